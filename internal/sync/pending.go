package sync

import (
	"context"
	"sort"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// savePending writes what is pending after this run: the versions
// pending before and the ancestors refused now, less those published and
// those upstream no longer has. Roots are not kept: their refs lead to
// them at every run.
func (e *engine) savePending(ctx context.Context, roots map[string]bool) {
	now := time.Now().UTC()
	next := map[string]sink.PendingVersion{}
	e.mu.Lock()
	for id, p := range e.versions.pending {
		if !e.versions.published[id] && !e.versions.absent[id] {
			next[id] = p
		}
	}
	for id, r := range e.versions.refused {
		if roots[id] || e.versions.published[id] {
			continue
		}
		p, ok := next[id]
		if !ok {
			p = sink.PendingVersion{Version: id, Since: now}
		}
		p.Reason, p.Message = r.Reason, r.Message
		next[id] = p
	}
	e.mu.Unlock()
	list := make([]sink.PendingVersion, 0, len(next))
	for _, p := range next {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Version < list[j].Version })
	more := max(0, len(list)-sink.MaxPendingVersions)
	list = list[:len(list)-more]
	e.report.Pending, e.report.PendingMore = list, more
	if e.opts.DryRun || (len(list) == 0 && len(e.versions.pending) == 0) {
		return
	}
	if err := e.sink.WritePending(ctx, list, more); err != nil {
		e.addRefusal(refuse(ReasonCopy, "", backend.ReservedPrefix+sink.PendingFile, "writing the list of pending versions: %v", err))
	}
}
