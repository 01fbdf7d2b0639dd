package sync

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
)

// CopyAttempts bounds the tries of one file's copy, and CopyRetryWait
// times the try's number is the wait before the next. This is the third
// retry layer (see package backend): what failed after the store's own
// retries and resumptions, and is not backend.IsPermanent, such as a write
// to the mirror that its client gave up on.
const (
	CopyAttempts  = 3
	CopyRetryWait = 200 * time.Millisecond
)

// copyFile streams one immutable file from source to sink (or copies it
// server-side), refusing it when its size is not the recorded one. size -1
// means unknown: whatever the source has is taken. Transient failures are
// retried.
func (e *engine) copyFile(ctx context.Context, name string, size int64) error {
	select {
	case e.slots.copy <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-e.slots.copy }()
	if e.opts.DryRun {
		e.plan(name)
		return nil
	}
	var err error
	for attempt := 1; attempt <= CopyAttempts; attempt++ {
		var n int64
		n, err = e.copyOnce(ctx, name, size)
		if err == nil {
			e.copied(n)
			return nil
		}
		if err := e.waitToRetry(ctx, "copy failed; retrying", name, attempt, err); err != nil {
			return err
		}
	}
	return err
}

// waitToRetry decides whether a failed try (number attempt, failed with
// err) of a copy or a catalog's fetch is tried again: not after a
// permanent error, a stopped run or the last of CopyAttempts. It returns
// the error to give up with, or nil once it has waited for the next try.
func (e *engine) waitToRetry(ctx context.Context, msg, name string, attempt int, err error) error {
	if backend.IsPermanent(err) || ctx.Err() != nil || attempt >= CopyAttempts {
		return err
	}
	e.log.Warn(msg, zap.String("file", name), zap.Int("attempt", attempt), zap.Error(err))
	select {
	case <-time.After(time.Duration(attempt) * CopyRetryWait):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *engine) copyOnce(ctx context.Context, name string, size int64) (int64, error) {
	if c, ok := backend.As[backend.Copier](e.sink.Backend()); ok && c.CanCopyFrom(e.src.Reader()) {
		have, err := e.sourceSize(ctx, name)
		if err != nil {
			return 0, &sourceError{err}
		}
		if size >= 0 && have != size {
			return 0, sizeRefusal(name, have, size)
		}
		if ok, err := c.CopyFrom(ctx, backend.Innermost(e.src.Reader()), name, name, have); ok || err != nil {
			return have, err
		}
	}
	rc, err := e.src.Reader().Open(ctx, name)
	if err != nil {
		return 0, &sourceError{err}
	}
	defer rc.Close()
	var body io.Reader = rc
	if st, ok := rc.(interface{ Stat() (fs.FileInfo, error) }); ok {
		// A local file: its size is known without reading it, and passing
		// the *os.File on lets the kernel copy it (copy_file_range).
		fi, err := st.Stat()
		if err != nil {
			return 0, err
		}
		if size >= 0 && fi.Size() != size {
			return 0, sizeRefusal(name, fi.Size(), size)
		}
		size = fi.Size()
	} else {
		if size < 0 {
			fi, err := e.src.Reader().Stat(ctx, name)
			if err != nil {
				return 0, &sourceError{err}
			}
			size = fi.Size
		}
		if size < 0 {
			// The source cannot say the size before the bytes (HTTP
			// without Content-Length), and a store's Put needs it: the
			// file goes through a local copy, as catalogs do.
			return e.copyUnsized(ctx, name)
		}
		body = &exactReader{r: rc, left: size, name: name, want: size}
	}
	if err := e.sink.Backend().Put(ctx, name, body, size); err != nil {
		var r *refusal
		if errors.As(err, &r) {
			return 0, r
		}
		if x, ok := body.(*exactReader); ok && x.mismatch != nil {
			return 0, x.mismatch
		}
		return 0, err
	}
	return size, nil
}

// copyUnsized copies a file whose size the source does not say through a
// local temporary copy, under the catalog download's limits.
func (e *engine) copyUnsized(ctx context.Context, name string) (int64, error) {
	fetched, err := catalog.Fetch(ctx, e.src.Reader(), name, e.opts.TempDir, e.opts.CatalogLimits.MaxSize)
	if err != nil {
		return 0, &sourceError{err}
	}
	defer fetched.Remove()
	f, err := os.Open(fetched.Path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := e.sink.Backend().Put(ctx, name, f, fetched.Size); err != nil {
		return 0, err
	}
	return fetched.Size, nil
}

// sourceError is a request to the source that failed after the backend's
// own retries: the engine does not retry it again. What it retries are
// streams cut after they started.
type sourceError struct{ err error }

func (e *sourceError) Error() string   { return e.err.Error() }
func (e *sourceError) Unwrap() error   { return e.err }
func (e *sourceError) Permanent() bool { return true }

// sourceSize is a source file's size, checked before a server-side copy:
// from the catalog's pass over the upstream's data_dir where it has one
// (withSourcePass), else as source.Size says (one listing where the sink's
// data_dir was listed whole, a request per file otherwise).
func (e *engine) sourceSize(ctx context.Context, name string) (int64, error) {
	if pass, _ := ctx.Value(sourcePassKey{}).(*backend.Cursor); pass != nil {
		if size, ok, err := pass.Size(ctx, name); err == nil && ok {
			return size, nil
		}
		// Not listed, or the listing failed: asked for alone below.
	}
	sinkListed, sinkFiles := e.sink.DataListed()
	return e.src.Size(ctx, name, sinkListed, sinkFiles)
}

type sourcePassKey struct{}

// withSourcePass gives the copies of a catalog of many files a pass over
// the upstream's data_dir (backend.Cursor) for the sizes checked before
// server-side copies: the copies go in path order, a few at once, so
// their sizes come from a page per thousand files, one page held, where
// a Stat each would cost a request per file. Only where the sink copies
// from the source server-side and the source lists pages; a size asked
// out of order is a Stat.
func (e *engine) withSourcePass(ctx context.Context) context.Context {
	c, ok := backend.As[backend.Copier](e.sink.Backend())
	if !ok || !c.CanCopyFrom(e.src.Reader()) || backend.PageListerOf(e.src.Reader()) == nil {
		return ctx
	}
	return context.WithValue(ctx, sourcePassKey{}, backend.NewCursor(e.src.Reader(), e.src.Settings().DataDir))
}

func sizeRefusal(name string, got, want int64) *refusal {
	return refuse(ReasonSizeMismatch, "", name, "data file %s has %d bytes upstream, the catalog records %d", name, got, want)
}

// exactReader passes on exactly want bytes and fails the stream when the
// source has more or fewer, so that a Put never publishes a file of the
// wrong size.
type exactReader struct {
	r        io.Reader
	left     int64
	name     string
	want     int64
	mismatch *refusal
}

func (x *exactReader) Read(p []byte) (int, error) {
	if x.left <= 0 {
		var one [1]byte
		n, err := io.ReadFull(x.r, one[:])
		if n > 0 {
			x.mismatch = refuse(ReasonSizeMismatch, "", x.name, "data file %s is larger upstream than the %d bytes the catalog records", x.name, x.want)
			return 0, x.mismatch
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
		x.mismatch = sizeRefusal(x.name, x.want-x.left, x.want)
		return n, x.mismatch
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}
