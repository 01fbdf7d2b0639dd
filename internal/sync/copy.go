package sync

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
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
func (t *transfer) copyFile(ctx context.Context, name string, size int64) error {
	select {
	case t.copySlots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-t.copySlots }()
	if t.dryRun {
		// Not through the dry run's sink, which would take every byte
		// from upstream to drop it: the plan names the file unread.
		t.plan(name)
		return nil
	}
	var err error
	for attempt := 1; attempt <= CopyAttempts; attempt++ {
		if err = t.copyOnce(ctx, name, size); err == nil {
			return nil
		}
		if err := t.waitToRetry(ctx, "copy failed; retrying", name, attempt, err); err != nil {
			return err
		}
	}
	return err
}

// waitToRetry decides whether a failed try (number attempt, failed with
// err) of a copy or a catalog's fetch is tried again: not after a
// permanent error, a stopped run or the last of CopyAttempts. It returns
// the error to give up with, or nil once it has waited for the next try.
func (t *transfer) waitToRetry(ctx context.Context, msg, name string, attempt int, err error) error {
	if backend.IsPermanent(err) || ctx.Err() != nil || attempt >= CopyAttempts {
		return err
	}
	t.log.Warn(msg, zap.String("file", name), zap.Int("attempt", attempt), zap.Error(err))
	select {
	case <-time.After(time.Duration(attempt) * CopyRetryWait):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// copyOnce is one try of copyFile: server-side where the sink's store
// copies from the upstream's (the size checked upstream first), else the
// source's stream of the file into the sink.
func (t *transfer) copyOnce(ctx context.Context, name string, size int64) error {
	if origin := t.src.Data().Origin(); t.sink.Data().CanCopyFrom(origin) {
		have, err := t.sourceSize(ctx, name)
		if err != nil {
			return &sourceError{err}
		}
		if size >= 0 && have != size {
			return source.SizeRefusal(name, have, size)
		}
		if ok, err := t.sink.Data().Copy(ctx, origin, name, have); ok || err != nil {
			return err
		}
	}
	f, err := t.src.Data().OpenFile(ctx, name, size, t.spool)
	if err != nil {
		var r *refusal
		if errors.As(err, &r) {
			return r
		}
		return &sourceError{err}
	}
	defer f.Close()
	return t.sink.Data().Put(ctx, name, f)
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
// (withSourcePass), else as source.Data.Size says (one listing where the sink's
// data_dir was listed whole, a request per file otherwise).
func (t *transfer) sourceSize(ctx context.Context, name string) (int64, error) {
	if pass, _ := ctx.Value(sourcePassKey{}).(*backend.Cursor); pass != nil {
		if size, ok, err := pass.Size(ctx, name); err == nil && ok {
			return size, nil
		}
		// Not listed, or the listing failed: asked for alone below.
	}
	sinkListed, sinkFiles := t.sink.Data().Listed()
	return t.src.Data().Size(ctx, name, sinkListed, sinkFiles)
}

type sourcePassKey struct{}

// withSourcePass gives the copies of a catalog of many files a pass over
// the upstream's data_dir (backend.Cursor) for the sizes checked before
// server-side copies: the copies go in path order, a few at once, so
// their sizes come from a page per thousand files, one page held, where
// a Stat each would cost a request per file. Only where the sink copies
// from the source server-side and the source lists pages; a size asked
// out of order is a Stat.
func (t *transfer) withSourcePass(ctx context.Context) context.Context {
	if !t.sink.Data().CanCopyFrom(t.src.Data().Origin()) {
		return ctx
	}
	pass := t.src.Data().Pass()
	if pass == nil {
		return ctx
	}
	return context.WithValue(ctx, sourcePassKey{}, pass)
}
