package sync

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Ref relations: how a branch's new value relates to its value in the
// mirror. Refs are not signed, so an upstream (or whoever took it over)
// could move a branch back to an old signed version with a known flaw;
// as git refuses a non-fast-forward fetch, a branch moves forward only.
const (
	relForward  = "forward"  // the current value is an ancestor of the new one
	relRewound  = "rewound"  // the new value is an ancestor of the current one
	relDiverged = "diverged" // neither: an unrelated history
)

// relation says how version to relates to version from through parents.
func (e *engine) relation(ctx context.Context, from, to string) string {
	switch {
	case from == to:
		return relForward
	case e.descends(ctx, to, from):
		return relForward
	case e.descends(ctx, from, to):
		return relRewound
	}
	return relDiverged
}

// descends says whether ancestor is reachable from id through parents.
func (e *engine) descends(ctx context.Context, id, ancestor string) bool {
	seen := map[string]bool{id: true}
	queue := []string{id}
	for len(queue) > 0 && ctx.Err() == nil {
		v := queue[0]
		queue = queue[1:]
		for _, p := range e.parentsOf(ctx, v) {
			if p == ancestor {
				return true
			}
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	return false
}

// parentsOf returns a version's parents: from the records this run read,
// else from the mirror's record (a complete version's, checked when it was
// published), else from upstream's. A version neither side has has none
// known: ancestry through it cannot be shown, and the move is refused.
func (e *engine) parentsOf(ctx context.Context, id string) []string {
	e.mu.Lock()
	ps, ok := e.parents[id]
	e.mu.Unlock()
	if ok {
		return ps
	}
	name := repo.VersionFile(id, repo.RecordFile)
	for _, store := range []backend.Reader{e.dst, e.src} {
		raw, err := backend.ReadAll(ctx, store, name, repo.MaxRecordFile)
		if err != nil {
			continue
		}
		if rec, err := repo.ParseRecord(id, raw); err == nil {
			ps = rec.Parents
			break
		}
	}
	e.noteParents(id, ps)
	return ps
}

// noteParents remembers a version's parents for this run.
func (e *engine) noteParents(id string, parents []string) {
	e.mu.Lock()
	e.parents[id] = parents
	e.mu.Unlock()
}
