package sink

import (
	"context"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/scratch"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// What a run does to the mirror besides a sync's and a prune's files:
// takes its lock, and clears the leftovers of runs that are gone.

// Runs is the mirror's lock and a run's place in it: the lock taken
// (Lock) and held (Locked, which opens the write guard), the run's
// scratch folder, and the leftovers of runs that are gone.
type Runs struct{ s *Sink }

// Runs is the mirror's lock and the runs that write it.
func (s *Sink) Runs() Runs { return Runs{s} }

// Lock takes the mirror's lock (see internal/sink/lock).
func (r Runs) Lock(ctx context.Context, opts lock.Options) (*lock.Held, error) {
	return lock.Lock(ctx, r.s.base, opts)
}

// AbortStaleUploads aborts the incomplete uploads (S3's multipart
// uploads) older than the lock's lifetime ttl, started by runs that no
// longer hold it (killed mid-upload): nothing else removes them. The run
// holds the lock; a failure is logged and the run goes on. It returns
// how many it aborted.
func (r Runs) AbortStaleUploads(ctx context.Context, ttl time.Duration) int {
	return lock.AbortStaleUploads(ctx, r.s.base, ttl, r.s.log)
}

// Scratch makes a run's folder for the catalogs it reads: in a local
// mirror it writes, on the mirror's disk (.fdl-mirror/scratch/);
// otherwise (a dry run, an object store) in $TMPDIR/fdl-mirror-<uid>/.
// Either way the next run in the same place removes it if this one is
// killed.
func (r Runs) Scratch() (*scratch.Dir, error) {
	if l, ok := backend.As[*local.Local](r.s.base); ok && !r.s.opts.DryRun {
		return scratch.InMirror(l.Dir())
	}
	return scratch.Private()
}

// IsLocal says whether the mirror is a local folder, whose lock is
// flock(2), held by the kernel through any pause of its holder.
func (r Runs) IsLocal() bool {
	_, ok := backend.As[*local.Local](r.s.base)
	return ok
}

// Locked says the run holds the mirror's lock: writes may begin.
func (r Runs) Locked() { r.s.locked.Store(true) }

// IsLocked says whether Locked was called.
func (r Runs) IsLocked() bool { return r.s.locked.Load() }
