package sync

import (
	"context"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// savePending writes what is pending after this run (nextPending).
func (p *publisher) savePending(ctx context.Context, roots map[string]bool) {
	p.mu.Lock()
	list, more := nextPending(pendingView{before: p.versions.pending, published: p.versions.published,
		absent: p.versions.absent, refused: p.versions.refused, roots: roots}, time.Now().UTC())
	p.mu.Unlock()
	p.report.Pending, p.report.PendingMore = list, more
	// A dry run's sink plans the write, and writes nothing.
	if len(list) == 0 && len(p.versions.pending) == 0 {
		return
	}
	if err := p.sink.State().WritePending(ctx, list, more); err != nil {
		p.addRefusal(refuse(ReasonCopy, "", backend.ReservedPrefix+sink.PendingFile, "writing the list of pending versions: %v", err))
	}
}
