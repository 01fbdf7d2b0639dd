package sync

import (
	"context"
	"sync"

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

// ancestry answers questions about the version graph, reading each
// version's parents once: from the records this run read, else from the
// mirror's record (a complete version's, checked when it was published),
// else from upstream's. A version neither side has has no parents known:
// ancestry through it cannot be shown, and a move to it is refused.
type ancestry struct {
	stores  []backend.Reader // where records are read, in order
	mu      sync.Mutex
	parents map[string][]string
}

func newAncestry(stores ...backend.Reader) *ancestry {
	return &ancestry{stores: stores, parents: map[string][]string{}}
}

// relation says how version to relates to version from through parents.
func (a *ancestry) relation(ctx context.Context, from, to string) string {
	switch {
	case from == to:
		return relForward
	case a.descends(ctx, to, from):
		return relForward
	case a.descends(ctx, from, to):
		return relRewound
	}
	return relDiverged
}

// descends says whether ancestor is reachable from id through parents.
func (a *ancestry) descends(ctx context.Context, id, ancestor string) bool {
	seen := map[string]bool{id: true}
	queue := []string{id}
	for len(queue) > 0 && ctx.Err() == nil {
		v := queue[0]
		queue = queue[1:]
		for _, p := range a.parentsOf(ctx, v) {
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

func (a *ancestry) parentsOf(ctx context.Context, id string) []string {
	a.mu.Lock()
	ps, ok := a.parents[id]
	a.mu.Unlock()
	if ok {
		return ps
	}
	name := repo.VersionFile(id, repo.RecordFile)
	for _, store := range a.stores {
		raw, err := backend.ReadAll(ctx, store, name, repo.MaxRecordFile)
		if err != nil {
			continue
		}
		if rec, err := repo.ParseRecord(id, raw); err == nil {
			ps = rec.Parents
			break
		}
	}
	a.note(id, ps)
	return ps
}

// note remembers a version's parents, as read from its record.
func (a *ancestry) note(id string, parents []string) {
	a.mu.Lock()
	a.parents[id] = parents
	a.mu.Unlock()
}
