package sync

import (
	"context"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// takeInventory takes the sink's (see sink.TakeInventory), checks that it
// holds this upstream's repository, and lists versions/ in the source
// where it lists.
func (e *engine) takeInventory(ctx context.Context) (*sink.Inventory, error) {
	inv, err := e.sink.TakeInventory(ctx, e.src.Settings().DataDir)
	if err != nil {
		return nil, &FatalError{err}
	}
	if inv.Settings != nil {
		if err := e.sameRepository(inv.Settings); err != nil {
			return nil, err
		}
	}
	if err := e.checkSource(ctx, inv.Settings != nil); err != nil {
		return nil, err
	}
	// versions/ in the source, where it can list.
	if err := e.src.Versions().List(ctx); err != nil {
		return nil, &FatalError{err}
	}
	e.inv = inv
	e.versions.published = map[string]bool{}
	for id := range inv.Versions {
		if inv.Complete(id) {
			e.versions.published[id] = true
		}
	}
	e.versions.pending = inv.Pending
	e.report.Distrusted = inv.Distrusted
	return inv, nil
}

// refsMovedUpstream says, from upstream's refs.json alone (one request;
// neither side's refs/ listed), whether the refs this run selects differ
// from those the mirror last saw upstream (its upstream state), in a
// mirror of this repository. Such a run has something to write, if only
// that state (hasWork), so it takes the lock before it reads both sides,
// and reads them once, under the lock, instead of once before and again
// under it (issue 43: each read of 20,000 refs is a listing of each
// side). The caller has loaded the upstream state. refs.json is only a
// hint: where it is absent, unreadable or says nothing moved, the run
// reads both sides first as it always did; what a run mirrors is what it
// reads under the lock either way. A repository without id is left to
// that way too (its mirror's recorded source is checked before any
// lock), as is a mirror of another repository.
func (e *engine) refsMovedUpstream(ctx context.Context) bool {
	st := e.upstream.state
	if e.src.Settings().ID == "" {
		return false
	}
	// Read up to twice the state's size (16 MiB at least): the state names
	// each ref it saw, with more than refs.json gives for it. A larger
	// refs.json (many refs new since) is no hint.
	refs, ok := e.src.RefsHint(ctx, max(repo.MaxRefsJSON, 2*int64(len(st.raw))))
	if !ok || !upstreamStateStale(st.loaded, st.raw == nil, e.planner.selectRefs(refs, "").selected) {
		return false
	}
	have, err := e.sink.Holdings().ReadSettings(ctx)
	if backend.IsNotExist(err) {
		return true // a new mirror
	}
	if err != nil {
		return false
	}
	return e.sameRepository(have) == nil
}

// hasWork says whether the run would write anything (planner.hasWork).
func (e *engine) hasWork(inv *sink.Inventory, upstream repo.Refs, head string) bool {
	return e.planner.hasWork(workView{
		inv: inv, upstream: upstream, head: head, published: e.versions.published,
		sourceVersions: e.src.Versions().Listing(), repair: e.opts.Repair, sourceUnrecorded: e.sourceUnrecorded(),
		stateStale: !e.upstream.unread && e.upstreamStateStale(upstream),
	})
}

// upstreamRefs reads every ref upstream (source.ReadRefs), refusing those
// that break the rules, with the values the mirror last saw upstream as
// the hint. The upstream state must be loaded first.
func (e *engine) upstreamRefs(ctx context.Context) (repo.Refs, string) {
	seen := e.upstream.state.loaded.Refs
	got := e.src.ReadRefs(ctx, func(ref string) (string, bool) {
		s, ok := seen[ref]
		return s.Version, ok
	})
	for _, r := range got.Refused {
		e.addRefusal(r)
	}
	if got.Unread {
		e.upstream.unread = true
	}
	return e.selectRefs(got.Refs, got.Head)
}

// selectRefs keeps the refs the operator chose (planner.selectRefs);
// the others, and the versions only they reach, are not mirrored.
func (e *engine) selectRefs(refs repo.Refs, head string) (repo.Refs, string) {
	sel := e.planner.selectRefs(refs, head)
	for _, name := range sel.names {
		e.log.Debug("ref not selected; not mirrored", zap.String("ref", name))
	}
	if head != "" && sel.head == "" {
		e.log.Info("HEAD names a ref that is not selected; HEAD not mirrored", zap.String("head", head))
	}
	// Each read of upstream's refs is whole: a run that reads again under
	// the lock reports what that read left out, not both reads'.
	e.report.Excluded = sel.names
	for name, id := range sel.excluded {
		e.upstream.excluded[name] = id
	}
	return sel.selected, sel.head
}

// listPart is how many names a part of a split listing of data_dir is
// meant to hold (see backend.WithListBounds): a few pages each, up to
// maxListParts parts. Refs are not listed in parts: upstream's and the
// sink's are listed at the same time already, and on the 2-core test
// machine splitting both made a no-op of 20,000 refs slower (1.58 s ->
// 1.66-2.01 s), where one listing alone in four parts took 0.82 s
// instead of 1.19 s.
const (
	listPart     = 2500
	maxListParts = 4
)
