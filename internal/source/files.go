package source

import (
	"context"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Data files: the upstream's bytes of one file below data_dir, named by
// its path there as a catalog gives it (the source joins data_dir), and
// checked for the size the catalog records as they are read. The store's
// own checksum, where it gives one, is checked by its reader (a resumed
// S3 body against the object's CRC32C or MD5, GCS's client against its
// CRC32C): nothing is added per file here.

// Data is the upstream's data files (and a version folder's files) as a
// transfer reads them: opened for a copy and checked as they are read,
// sized, passed over in order, read ahead, or named for a server-side
// copy.
type Data struct{ s *Source }

// Data is the upstream's files, for a transfer.
func (s *Source) Data() Data { return Data{s} }

// Name is a data file's name in the store: data_dir, then path.
func (d Data) Name(path string) string { return d.s.settings.DataDir + path }

// Spool is where a data file whose size the store cannot say before its
// bytes (HTTP without Content-Length) is copied first, and its bound: a
// store's Put needs the size up front.
type Spool struct {
	Dir     string // "" is os.TempDir
	MaxSize int64  // 0: catalog.DefaultMaxSize
}

// DataFile is an upstream data file (or a version's file) open for one
// copy. Body yields
// exactly Size bytes or fails: a file of another size upstream than the
// one its catalog records is a ReasonSizeMismatch refusal, never a
// published file of the wrong size.
type DataFile struct {
	name  string
	size  int64
	body  io.Reader
	close func() error
	exact *exactReader // nil where the size was checked before reading
}

// Name is the file's name in the store (data_dir and path).
func (f *DataFile) Name() string { return f.name }

// Size is how many bytes Body yields.
func (f *DataFile) Size() int64 { return f.size }

// Body is the file's bytes. A local file is the *os.File itself, its size
// checked before a byte is read, so that a copy into another file is one
// copy_file_range(2) and an S3 upload can read it at offsets.
func (f *DataFile) Body() io.Reader { return f.body }

// Close releases the file (and a spooled copy).
func (f *DataFile) Close() error { return f.close() }

// Mismatch is the refusal Body met (the file was larger or smaller
// upstream than recorded), nil if none: a store's Put may wrap the
// reader's error in its own.
func (f *DataFile) Mismatch() error {
	if f.exact == nil || f.exact.mismatch == nil {
		return nil
	}
	return f.exact.mismatch
}

// Open opens the data file at path below data_dir for a copy whose
// catalog records size bytes (-1: unknown): OpenFile of its name.
func (d Data) Open(ctx context.Context, path string, size int64, spool Spool) (*DataFile, error) {
	return d.OpenFile(ctx, d.Name(path), size, spool)
}

// OpenFile opens an immutable file of the repository, a data file or a
// file of a version's folder, for a copy of size bytes (-1: unknown,
// whatever upstream has is taken). A size that differs from the
// recorded one is a *RefusalError (ReasonSizeMismatch); any other error
// is the store's, after its own retries. A file whose size the store
// cannot say before its bytes is copied to spool first, under its bound.
// Other files (settings, refs) are read and judged elsewhere, never
// copied as they are.
func (d Data) OpenFile(ctx context.Context, name string, size int64, spool Spool) (*DataFile, error) {
	s := d.s
	if !strings.HasPrefix(name, s.settings.DataDir) && !strings.HasPrefix(name, repo.VersionsDir) {
		return nil, s.errorf("%s is neither a data file nor a version's file; not copied", name)
	}
	if f := d.fromPeer(ctx, name, size); f != nil {
		return f, nil
	}
	rc, err := s.r.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	if st, ok := rc.(interface{ Stat() (fs.FileInfo, error) }); ok {
		// A local file: its size is known without reading it.
		fi, err := st.Stat()
		if err != nil {
			rc.Close()
			return nil, err
		}
		if size >= 0 && fi.Size() != size {
			rc.Close()
			return nil, SizeRefusal(name, fi.Size(), size)
		}
		return &DataFile{name: name, size: fi.Size(), body: rc, close: rc.Close}, nil
	}
	if size < 0 {
		fi, err := s.r.Stat(ctx, name)
		if err != nil {
			rc.Close()
			return nil, err
		}
		size = fi.Size
	}
	if size < 0 {
		// The store cannot say the size before the bytes (HTTP without
		// Content-Length), and a store's Put needs it: the file goes
		// through a local copy, as catalogs do.
		rc.Close()
		return d.spool(ctx, name, spool)
	}
	x := &exactReader{r: rc, left: size, name: name, want: size}
	return &DataFile{name: name, size: size, body: x, close: rc.Close, exact: x}, nil
}

// spool copies a file whose size the source does not say to a local
// temporary file, under the catalog download's limits.
func (d Data) spool(ctx context.Context, name string, spool Spool) (*DataFile, error) {
	fetched, err := catalog.Fetch(ctx, d.s.r, name, spool.Dir, spool.MaxSize)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fetched.Path)
	if err != nil {
		fetched.Remove()
		return nil, err
	}
	return &DataFile{name: name, size: fetched.Size, body: f, close: func() error {
		err := f.Close()
		fetched.Remove()
		return err
	}}, nil
}

// SizeRefusal is the refusal of a data file of got bytes upstream whose
// catalog records want.
func SizeRefusal(name string, got, want int64) *RefusalError {
	return Refuse(ReasonSizeMismatch, "", name, "data file %s has %d bytes upstream, the catalog records %d", name, got, want)
}

// Origin is the upstream's store as a server-side copy names it: a
// mirror's store that can copy from it (backend.Copier) is handed it by
// the source, and nothing reads through it.
type Origin struct{ r backend.Reader }

// Origin is the upstream, for the sink's server-side copies.
func (d Data) Origin() Origin { return Origin{d.s.r} }

// CopiableBy says, without a request, whether c copies from the upstream.
func (o Origin) CopiableBy(c backend.Copier) bool { return c.CanCopyFrom(o.r) }

// CopyInto asks c to copy the upstream's srcName to dstName, of size
// bytes (checked by the caller); ok false when c declined it.
func (o Origin) CopyInto(ctx context.Context, c backend.Copier, srcName, dstName string, size int64) (ok bool, err error) {
	return c.CopyFrom(ctx, backend.Innermost(o.r), srcName, dstName, size)
}

// Pass is a pass over the upstream's data_dir in path order, a page at
// a time, for the sizes checked before server-side copies (see
// internal/sync's withSourcePass); nil where the store lists no pages.
func (d Data) Pass() *backend.Cursor {
	if backend.PageListerOf(d.s.r) == nil {
		return nil
	}
	return backend.NewCursor(d.s.r, d.s.settings.DataDir)
}

// ReadAhead announces, where the store takes it (a local folder), the
// data files about to be read (names as Name gives them), in that order,
// and returns when it has gone through them or ctx is done. A hint:
// nothing read is checked or kept.
func (d Data) ReadAhead(ctx context.Context, names []string) {
	if ra, ok := backend.As[backend.ReadAheader](d.s.r); ok {
		ra.ReadAhead(ctx, names)
	}
}

// CanReadAhead says whether ReadAhead does anything.
func (d Data) CanReadAhead() bool {
	_, ok := backend.As[backend.ReadAheader](d.s.r)
	return ok
}

// exactReader passes on exactly want bytes and fails the stream when the
// source has more or fewer, so that a Put never publishes a file of the
// wrong size.
type exactReader struct {
	r        io.Reader
	left     int64
	name     string
	want     int64
	mismatch *RefusalError
	// peer is the earlier sink read instead of the upstream (fanout.go),
	// "" for the upstream: a peer's file of another size is a failed try,
	// and onPeerMismatch sends the next one upstream.
	peer           string
	onPeerMismatch func()
}

// broke is the error of a stream of got bytes (-1: more than want).
func (x *exactReader) broke(got int64) error {
	if x.peer != "" {
		x.onPeerMismatch()
		return peerMismatch(x.name, x.peer, x.want)
	}
	if got < 0 {
		x.mismatch = Refuse(ReasonSizeMismatch, "", x.name, "data file %s is larger upstream than the %d bytes the catalog records", x.name, x.want)
	} else {
		x.mismatch = SizeRefusal(x.name, got, x.want)
	}
	return x.mismatch
}

func (x *exactReader) Read(p []byte) (int, error) {
	if x.left <= 0 {
		var one [1]byte
		n, err := io.ReadFull(x.r, one[:])
		if n > 0 {
			return 0, x.broke(-1)
		}
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > x.left {
		p = p[:x.left]
	}
	n, err := x.r.Read(p)
	x.left -= int64(n)
	if err == io.EOF && x.left > 0 {
		return n, x.broke(x.want - x.left)
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}
