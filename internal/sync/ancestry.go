package sync

import (
	"context"
	"sync"

	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
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
// version's parents once, only from records that pass the run's policy:
// the mirror's published record (checked when it was published), else
// upstream's when it passes Trust (its signature, where one is required)
// and names its own folder. A record that fails proves nothing: an
// upstream could otherwise forge an unsigned record of a version the
// mirror lacks, naming the mirror's branch as its parent, and so pass a
// rewind off as a forward move. A version with no such record has no
// parents known: ancestry through it cannot be shown, and a move to it
// is refused.
type ancestry struct {
	sink    *sink.Sink     // the mirror's records; nil: a mirror not made yet
	src     *source.Source // upstream's records, judged by the run's Trust
	mu      sync.Mutex
	parents map[string][]string
}

// newAncestry reads the mirror through mirror (nil: none yet) and the
// upstream through src, which judges upstream's records by its Trust.
func newAncestry(mirror *sink.Sink, src *source.Source) *ancestry {
	return &ancestry{sink: mirror, src: src, parents: map[string][]string{}}
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
	ps = a.readParents(ctx, id)
	a.note(id, ps)
	return ps
}

// readParents reads a version's parents from the mirror's published
// record, else from upstream's record where it passes the policy
// (source.Versions.Read: its signature, and an id that names its own
// folder); nil when neither does.
func (a *ancestry) readParents(ctx context.Context, id string) []string {
	if a.sink != nil {
		if raw, err := a.sink.Versions().ReadRecord(ctx, id); err == nil {
			if rec, bad := source.JudgeRecord(id, raw); bad == nil {
				return rec.Parents
			}
		}
	}
	v, err := a.src.Versions().Read(ctx, id)
	if err != nil || !v.Passes() {
		return nil
	}
	return v.Record.Parents
}

// note remembers a version's parents, from a record that passed the
// policy (a version this run published).
func (a *ancestry) note(id string, parents []string) {
	a.mu.Lock()
	a.parents[id] = parents
	a.mu.Unlock()
}
