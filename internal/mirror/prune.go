package mirror

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/prune"
	"github.com/fdl-mirror/fdl-mirror/internal/scratch"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// PruneJob is one prune as the command line or the config gives it;
// Prune opens its stores, takes the lock and runs it (prune.Run).
type PruneJob struct {
	Name string // for logs; "" for a plain CLI prune
	Stores
	DryRun    bool
	MaxDelete int // 0 = prune.DefaultMaxDelete
	// Grace holds removals on an object store back (prune.Options.Grace);
	// 0 is prune.DefaultGrace. A local mirror removes at once: its flock
	// holds.
	Grace time.Duration
	// Now removes at once, on a local mirror; on an object store it is
	// refused unless NowUnsafe says the risk was understood.
	Now bool
	// NowUnsafe removes at once on an object store as well: a run paused
	// past its lease may then have its removals land under a sync that
	// relies on the files (--now-unsafe-on-object-stores).
	NowUnsafe bool
	// Selected says which refs may be removed; nil selects all (see
	// prune.Options).
	Selected func(ref string) bool
}

// Prune opens the source and the sink, plans, takes the sink's lock as a
// sync does when there is something to remove (a dry run takes none: it
// only reads), and prunes. Losing the lock
// or cancelling ctx stops the prune between two removals, which are all
// safe points.
func Prune(ctx context.Context, job PruneJob, log *zap.Logger) (*prune.Report, error) {
	log = jobLogger(log, job.Name)
	st, err := openStores(ctx, job.Source, job.SourceOptions(log), job.Sink, job.sinkOptions(log), job.DryRun, true)
	if err != nil {
		return nil, err
	}
	defer st.close()
	tmp, err := scratch.Private()
	if err != nil {
		return nil, err
	}
	defer tmp.Close()

	opts := prune.Options{DryRun: job.DryRun, MaxDelete: job.MaxDelete, Selected: job.Selected, CatalogLimits: job.CatalogLimits,
		TempDir: tmp.Path(), Source: location.Clean(job.Source), Logger: log}
	// Each prune reads both sides afresh: the one under the lock takes
	// nothing from the plan made before it.
	mine := func(log *zap.Logger) *sink.Sink {
		return sink.New(st.dst, sink.Options{DryRun: job.DryRun, Logger: log})
	}
	upstream := func(log *zap.Logger) *source.Source { return source.New(st.src, nil, log) }
	if opts.Grace, err = pruneGrace(job, mine(log)); err != nil {
		return nil, err
	}
	if job.DryRun {
		return prune.Run(ctx, upstream(log), mine(log), opts)
	}
	// Planned first without the lock, which only reads: a prune with
	// nothing to remove (most, after most syncs) takes no lock, so it
	// never waits for, nor locks out, another replica's sync. With
	// something to remove, it plans again under the lock, from what is
	// there then.
	planOpts := opts
	planOpts.DryRun = true
	planOpts.Logger = zap.NewNop()
	if rep, err := prune.Run(ctx, upstream(planOpts.Logger), mine(planOpts.Logger), planOpts); err != nil || !rep.Writes() {
		if rep != nil {
			rep.DryRun = false
		}
		return rep, err
	}
	locked, held, release, err := takeLock(ctx, mine(log), job.LockWait, job.LockTTL, log)
	if err != nil {
		return nil, err
	}
	defer release()
	opts.Lease = held.CheckLease
	rep, err := prune.Run(locked, upstream(log), mine(log), opts)
	if err == nil {
		// Removals conditional on each object's own version succeed even
		// after another run took the lock over: only the lock itself
		// says whether this prune still held the mirror when it ended.
		if cerr := held.Check(context.WithoutCancel(ctx)); cerr != nil {
			err = cerr
		}
	}
	// Lost is closed by every way a lock is lost: a takeover the renewal
	// or Check saw, renewals that kept failing, a lease run out by the
	// prune's own clock (CheckLease).
	select {
	case <-held.Lost():
		rep.LockLost = true // Run always returns a report
		if err == nil {
			err = lock.ErrLost
		}
		err = fmt.Errorf("sink %s: lost the mirror's lock; stopped, having removed %d objects before it noticed (listed in the report): %w",
			st.dst.Location(), len(rep.Removed), err)
	default:
	}
	return rep, err
}

// ErrNowOnObjectStore is the refusal of prune --now on an object store.
var ErrNowOnObjectStore = errors.New("--now removes at once only on a local mirror")

// pruneGrace is the grace the job's removals wait for: none on a local
// mirror, whose lock is flock(2), held by the kernel through any pause of
// its holder; on an object store, whose lock is a lease a paused run can
// outlive, the job's (DefaultGrace when unset), or none when the job says
// it knows the risk.
func pruneGrace(job PruneJob, dst *sink.Sink) (time.Duration, error) {
	if dst.Runs().IsLocal() {
		return 0, nil
	}
	switch {
	case job.NowUnsafe:
		return 0, nil
	case job.Now:
		return 0, fmt.Errorf("sink %s: %w: on an object store a prune paused past its lock's lease could remove files a sync relies on; "+
			"nothing removed (without --now, what is unreferenced is removed by a prune after prune_grace; "+
			"--now-unsafe-on-object-stores removes at once, taking that risk)", dst.Location(), ErrNowOnObjectStore)
	case job.Grace == 0:
		return prune.DefaultGrace, nil
	}
	return job.Grace, prune.CheckGrace(job.Grace, job.LockTTL)
}
