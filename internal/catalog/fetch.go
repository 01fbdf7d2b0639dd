package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// Fetched is a catalog copied from a store into a local temporary file,
// hashed on the way: its bytes are read from the store once, then DuckDB
// and the upload to a mirror read the local copy.
type Fetched struct {
	Path   string // local temporary file; Remove deletes it
	SHA256 string // lowercase hex
	Size   int64
	pool   *Pool // the pool that fetched it to be read (Pool.Fetch)
}

// Remove deletes the temporary file: a catalog its pool fetched to be
// read and that was not read wants a reader no more.
func (f *Fetched) Remove() {
	if f.pool != nil {
		f.pool.taken(f.Path)
	}
	os.Remove(f.Path)
}

// Fetch copies name from r into a new file in dir (os.TempDir when empty).
// A catalog larger than maxSize bytes (DefaultMaxSize when 0 or less) is
// refused with a *LimitError once that many bytes have come, and the copy
// removed: an upstream chooses the size, the mirror's disk pays for it.
func Fetch(ctx context.Context, r backend.Reader, name, dir string, maxSize int64) (*Fetched, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	rc, err := r.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(dir, "catalog-*.duckdb")
	if err != nil {
		return nil, fmt.Errorf("%s: temporary copy of %s: %w", r.Location(), name, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(rc, maxSize+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > maxSize {
		os.Remove(tmp.Name())
		return nil, &LimitError{Catalog: name, Key: KeyMaxSize, Detail: fmt.Sprintf("larger than the %s a catalog may have", FormatBytes(maxSize))}
	}
	if err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("%s: reading %s: %w", r.Location(), name, err)
	}
	return &Fetched{Path: tmp.Name(), SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}
