package mirror

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/prune"
	"github.com/fdl-mirror/fdl-mirror/internal/scratch"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// Prune opens the source and the sink, plans, takes the sink's lock as a
// sync does when there is something to remove (a dry run takes none: it
// only reads), and prunes. Losing the lock
// or cancelling ctx stops the prune between two removals, which are all
// safe points.
func Prune(ctx context.Context, job prune.Job, log *zap.Logger) (*prune.Report, error) {
	log = jobLogger(log, job.Name)
	srcOpts := location.Options{HTTPHeaders: job.HTTPHeaders, HTTPAllowRedirects: job.HTTPAllowRedirects, Retries: job.Retries, Logger: log,
		CAFile: job.CAFile, HTTPAllowInsecureAuth: job.HTTPAllowInsecureAuth}
	st, err := openStores(ctx, job.Source, srcOpts, job.Sink, location.Options{Retries: job.Retries, CAFile: job.CAFile, Logger: log}, job.DryRun, true)
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
	if job.DryRun {
		return prune.Run(ctx, st.src, st.dst, opts)
	}
	// Planned first without the lock, which only reads: a prune with
	// nothing to remove (most, after most syncs) takes no lock, so it
	// never waits for, nor locks out, another replica's sync. With
	// something to remove, it plans again under the lock, from what is
	// there then.
	planOpts := opts
	planOpts.DryRun = true
	planOpts.Logger = zap.NewNop()
	if rep, err := prune.Run(ctx, st.src, st.dst, planOpts); err != nil || rep.Deletions == 0 {
		if rep != nil {
			rep.DryRun = false
		}
		return rep, err
	}
	locked, held, release, err := takeLock(ctx, st.dst, job.LockWait, job.LockTTL, log)
	if err != nil {
		return nil, err
	}
	defer release()
	opts.Lease = held.CheckLease
	rep, err := prune.Run(locked, st.src, st.dst, opts)
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
