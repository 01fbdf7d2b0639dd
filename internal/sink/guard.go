package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// guarded is the sink of a run that locks lazily: a write before the lock
// is held is a bug in the run's plan (internal/sync's hasWork), and fails
// instead of racing another run. Where the run has a lease (Options.Lease),
// every write and removal asks it first.
type guarded struct {
	backend.Backend
	locked *atomic.Bool // nil: the lock was taken before the sink was made
	lease  func() error // nil: no lease to check
}

// ErrNotSent is wrapped by the error of a write or removal the guard
// refused before it reached the store: whatever the run's state, the
// store never saw it (a prune's report tells it from one in flight).
var ErrNotSent = errors.New("not sent to the store")

// notSent is a refusal of the guard; its message is err's.
type notSent struct{ error }

func (e notSent) Unwrap() error        { return e.error }
func (e notSent) Is(target error) bool { return target == ErrNotSent }

func (g guarded) check(name string) error {
	if g.locked != nil && !g.locked.Load() {
		return notSent{fmt.Errorf("internal error: writing %s before holding the mirror's lock", name)}
	}
	if g.lease != nil {
		if err := g.lease(); err != nil {
			return notSent{fmt.Errorf("not writing %s: %w", name, err)}
		}
	}
	return nil
}

func (g guarded) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := g.check(name); err != nil {
		return err
	}
	return g.Backend.Put(ctx, name, r, size)
}

func (g guarded) Create(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := g.check(name); err != nil {
		return err
	}
	return g.Backend.Create(ctx, name, r, size)
}

func (g guarded) Remove(ctx context.Context, name string) error {
	if err := g.check(name); err != nil {
		return err
	}
	return g.Backend.Remove(ctx, name)
}

func (g guarded) Unwrap() backend.Reader { return g.Backend }

// OpenVersion, PutIfMatch and RemoveIfMatch forward to the store's
// Conditional (ConditionalOf finds them only where it has one), writes
// checked as Put's are.
func (g guarded) OpenVersion(ctx context.Context, name string) (io.ReadCloser, backend.FileInfo, error) {
	return backend.ConditionalOf(g.Backend).OpenVersion(ctx, name)
}

func (g guarded) PutIfMatch(ctx context.Context, name string, r io.Reader, size int64, version string) error {
	if err := g.check(name); err != nil {
		return err
	}
	return backend.ConditionalOf(g.Backend).PutIfMatch(ctx, name, r, size, version)
}

func (g guarded) RemoveIfMatch(ctx context.Context, name, version string) error {
	if err := g.check(name); err != nil {
		return err
	}
	return backend.ConditionalOf(g.Backend).RemoveIfMatch(ctx, name, version)
}

func (g guarded) CanCopyFrom(src backend.Reader) bool {
	c, ok := backend.As[backend.Copier](g.Backend)
	return ok && c.CanCopyFrom(src)
}

func (g guarded) CopyFrom(ctx context.Context, src backend.Reader, srcName, dstName string, size int64) (bool, error) {
	if err := g.check(dstName); err != nil {
		return false, err
	}
	c, _ := backend.As[backend.Copier](g.Backend)
	return c.CopyFrom(ctx, src, srcName, dstName, size)
}
