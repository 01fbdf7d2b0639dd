package sink

import (
	"context"
	"io"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// DataStream is a data file's bytes as the source gives them
// (source.DataFile): Body yields exactly Size bytes or fails, and
// Mismatch is then the source's refusal of the file.
type DataStream interface {
	Body() io.Reader
	Size() int64
	Mismatch() error
}

// PutDataFile writes the data file name from the source's stream,
// through the write guard. A stream that broke its size fails with the
// source's refusal, and the store publishes nothing (a Put publishes all
// of its bytes or none). The caller makes it durable (WithoutSync, then
// a barrier) as it does the version's other files.
func (s *Sink) PutDataFile(ctx context.Context, name string, f DataStream) error {
	ctx = s.claims.claim(ctx, name)
	if err := s.b.Put(ctx, name, f.Body(), f.Size()); err != nil {
		if m := f.Mismatch(); m != nil {
			return m
		}
		return err
	}
	s.opts.Copied(f.Size())
	return nil
}

// Origin is an upstream store the mirror's store may copy from
// server-side, no byte passing through the mirror (source.Origin): the
// sink hands it its store's copier, and is handed no upstream store.
type Origin interface {
	CopiableBy(c backend.Copier) bool
	CopyInto(ctx context.Context, c backend.Copier, srcName, dstName string, size int64) (ok bool, err error)
}

// CanCopyFrom says, without a request, whether the mirror's store copies
// from o server-side.
func (s *Sink) CanCopyFrom(o Origin) bool {
	return s.copier != nil && o.CopiableBy(s.copier)
}

// CopyDataFile copies the data file name, of size bytes (the caller has
// checked the size upstream), from o server-side, through the write
// guard. ok false: the store declined (a file past its copy size), and
// the caller streams it (PutDataFile).
func (s *Sink) CopyDataFile(ctx context.Context, o Origin, name string, size int64) (ok bool, err error) {
	if s.copier == nil {
		return false, nil
	}
	ctx = s.claims.claim(ctx, name)
	ok, err = o.CopyInto(ctx, s.copier, name, name, size)
	if ok && err == nil {
		s.opts.Copied(size)
	}
	return ok, err
}
