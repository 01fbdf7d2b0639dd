package sync

import (
	"context"

	"go.uber.org/zap"

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
