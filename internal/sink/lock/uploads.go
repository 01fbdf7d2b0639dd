package lock

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// staleUploadAborter is a store that can abort the incomplete uploads a
// killed run left behind (S3's multipart uploads).
type staleUploadAborter interface {
	AbortStaleUploads(ctx context.Context, olderThan time.Duration) (int, error)
}

// AbortStaleUploads aborts the incomplete uploads under the mirror's
// prefix that are older than the lock's lifetime: a run that holds the
// lock calls it, so such an upload belongs to a run that is gone. Nothing
// else ever removes them (a listing does not show them, yet they are
// billed). A failure is logged and the run goes on: the bucket's
// AbortIncompleteMultipartUpload lifecycle rule is the backstop.
func AbortStaleUploads(ctx context.Context, b backend.Backend, ttl time.Duration, log *zap.Logger) int {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	a, ok := backend.As[staleUploadAborter](b)
	if !ok {
		return 0
	}
	n, err := a.AbortStaleUploads(ctx, ttl)
	if err != nil && ctx.Err() == nil {
		log.Warn("aborting incomplete uploads of earlier runs failed", zap.String("sink", b.Location()), zap.Error(err))
	}
	if n > 0 {
		log.Info("aborted incomplete uploads of earlier runs", zap.String("sink", b.Location()), zap.Int("uploads", n))
	}
	return n
}
