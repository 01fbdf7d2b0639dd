package sink

import (
	"context"
	"fmt"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// The fence: a run paused past its lock's lifetime (a GC pause, a frozen
// VM) may check its lock, be paused, and write after another run took
// the mirror over. Only the store can refuse that write: every write of
// a file another run may change (a ref file, refs.json, HEAD; a prune's
// removals) is conditional on the version the run read (If-Match its
// version token, or If-None-Match: * where it was absent), on a store
// that can make writes conditional (backend.Conditional). A local folder
// needs no condition: its flock is held by the kernel through any pause.
// A refused write is fenced's error, and the run stops.

// replace writes name only if it is still the version the run read
// (version: its token as a read or listing gave it; "" where it was
// absent, or the store has none). It is durable when it returns.
func (s *Sink) replace(ctx context.Context, name string, b []byte, version string) error {
	err := backend.ReplaceIfUnchanged(ctx, s.b, name, b, version)
	if backend.IsPreconditionFailed(err) {
		return fenced(name, err)
	}
	if err != nil {
		return err
	}
	s.opts.Copied(int64(len(b)))
	return nil
}

// remove removes name only if it is still the version the run read or
// listed (version as for replace; "" removes it whatever it holds). A
// removal made under WithoutSync is durable at the next Barrier.
func (s *Sink) remove(ctx context.Context, name, version string) error {
	err := backend.RemoveIfUnchanged(ctx, s.b, name, version)
	if backend.IsPreconditionFailed(err) {
		return fenced(name, err)
	}
	return err
}

// fenced is the error of a write or removal the store refused because
// another run changed name since this run read it: the run lost the
// mirror's lock, whatever its renewal has seen so far, and must stop
// before it writes more. It wraps backend.ErrPreconditionFailed, by
// which the caller tells it from a failed write.
func fenced(name string, err error) error {
	return fmt.Errorf("%s was changed by another run since this run read it; this run lost the mirror's lock, and the store refused the change: %w", name, err)
}
