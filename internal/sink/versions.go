package sink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// FileError is a write to the mirror that failed, naming the file.
type FileError struct {
	File string
	Err  error
}

func (e *FileError) Error() string { return fmt.Sprintf("%s: %v", e.File, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// Versions are the mirror's version folders: written file by file
// (PutCatalog, and the data files before them), published by
// version.json last (Publish), and read back: a version's record and
// signature (records.go), its catalogs (reads.go).
type Versions struct{ s *Sink }

// Versions are the mirror's version folders.
func (s *Sink) Versions() Versions { return Versions{s} }

// Publish writes version.json.sig (sig nil: none), then, once a
// barrier has made every file the version needs durable, version.json
// (durable when it returns), created only where there is none (see
// createRecord): from this moment the version is complete.
// Every other file of its folder, and every data file it needs, must be
// written before.
func (v Versions) Publish(ctx context.Context, id string, record, sig []byte) error {
	s := v.s
	if sig != nil {
		name := repo.VersionFile(id, repo.SignatureFile)
		if err := s.PutBytes(s.Durability().WithoutSync(ctx), name, sig); err != nil {
			return &FileError{name, err}
		}
	}
	name := repo.VersionFile(id, repo.RecordFile)
	if err := s.Durability().Barrier(ctx); err != nil {
		return &FileError{name, err}
	}
	if err := v.createRecord(ctx, name, record); err != nil {
		return &FileError{name, err}
	}
	return nil
}

// PutCatalog writes a fetched catalog from its local copy, with the
// SHA-256 of the bytes that were read: a store that can check a write
// against it (S3) stores those bytes or nothing.
func (v Versions) PutCatalog(ctx context.Context, name string, cat *catalog.Fetched) error {
	s := v.s
	f, err := os.Open(cat.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx = s.claims.claim(ctx, name)
	if err := s.b.Put(backend.WithContentSHA256(ctx, cat.SHA256), name, f, cat.Size); err != nil {
		return err
	}
	s.opts.Copied(cat.Size)
	return nil
}

// createRecord writes a version's version.json only where there is none
// (If-None-Match: * on an object store): a record already there was
// published by another run, which is fine when it holds these bytes, and
// means this run lost the mirror to another when it does not.
func (v Versions) createRecord(ctx context.Context, name string, b []byte) error {
	s := v.s
	listed := s.claims.listed(name)
	ctx = s.claims.claim(ctx, name)
	err := s.b.Create(ctx, name, strings.NewReader(string(b)), int64(len(b)))
	if errors.Is(err, backend.ErrExist) {
		there, rerr := backend.ReadAll(ctx, s.b, name, int64(len(b))+1)
		if rerr == nil && string(there) == string(b) {
			if listed {
				// A prune's candidate: made this run's own, the same
				// bytes under a new token (claims.go).
				return s.b.Put(ctx, name, strings.NewReader(string(b)), int64(len(b)))
			}
			return nil
		}
		return fenced(name, fmt.Errorf("%w: %w", backend.ErrPreconditionFailed, err))
	}
	if err != nil {
		return err
	}
	s.opts.Copied(int64(len(b)))
	return nil
}
