package sync

import (
	"context"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// savePending writes what is pending after this run (nextPending).
func (e *engine) savePending(ctx context.Context, roots map[string]bool) {
	e.mu.Lock()
	list, more := nextPending(pendingView{before: e.versions.pending, published: e.versions.published,
		absent: e.versions.absent, refused: e.versions.refused, roots: roots}, time.Now().UTC())
	e.mu.Unlock()
	e.report.Pending, e.report.PendingMore = list, more
	if e.opts.DryRun || (len(list) == 0 && len(e.versions.pending) == 0) {
		return
	}
	if err := e.sink.WritePending(ctx, list, more); err != nil {
		e.addRefusal(refuse(ReasonCopy, "", backend.ReservedPrefix+sink.PendingFile, "writing the list of pending versions: %v", err))
	}
}
