package mirror

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/prune"
	"github.com/fdl-mirror/fdl-mirror/internal/scratch"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// Prune opens the source and the sink, takes the sink's lock as a sync
// does (a dry run takes none: it only reads), and prunes. Losing the lock
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
	locked, _, release, err := takeLock(ctx, st.dst, job.LockWait, job.LockTTL, log)
	if err != nil {
		return nil, err
	}
	defer release()
	rep, err := prune.Run(locked, st.src, st.dst, opts)
	if err != nil && errors.Is(context.Cause(locked), lock.ErrLost) {
		err = fmt.Errorf("sink %s: lost the mirror's lock; stopped at a safe point: %w", st.dst.Location(), err)
	}
	return rep, err
}
