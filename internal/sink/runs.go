package sink

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/scratch"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// What a run that holds the mirror's lock writes besides a sync's and a
// prune's files: the mirror's own leftovers of runs that are gone.

// AbortStaleUploads aborts the incomplete uploads (S3's multipart
// uploads) older than the lock's lifetime ttl, started by runs that no
// longer hold it (killed mid-upload): nothing else removes them. The run
// holds the lock; a failure is logged and the run goes on. It returns
// how many it aborted.
func AbortStaleUploads(ctx context.Context, b backend.Backend, ttl time.Duration, log *zap.Logger) int {
	return lock.AbortStaleUploads(ctx, b, ttl, log)
}

// Scratch makes a run's folder for the catalogs it reads: in a local
// mirror it writes, on the mirror's disk (.fdl-mirror/scratch/);
// otherwise (a dry run, an object store) in $TMPDIR/fdl-mirror-<uid>/.
// Either way the next run in the same place removes it if this one is
// killed.
func Scratch(dst backend.Reader, dryRun bool) (*scratch.Dir, error) {
	if l, ok := backend.As[*local.Local](dst); ok && !dryRun {
		return scratch.InMirror(l.Dir())
	}
	return scratch.Private()
}
