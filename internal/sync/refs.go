package sync

import (
	"context"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// publishRefs is stage two: decide each ref by the policy, have the sink
// write them in its order (ref files, refs.json, HEAD; see
// sink.WriteRefs), and report how every ref stands.
func (e *engine) publishRefs(ctx context.Context, upstream repo.Refs, head string, inv *sink.Inventory) error {
	writes, moves := e.decideRefs(ctx, upstream, inv.Refs)
	if err := ctx.Err(); err != nil {
		return err
	}
	written, err := e.sink.WriteRefs(ctx, inv, writes, head)
	if backend.IsPreconditionFailed(err) {
		// Another run moved refs after this run read them: it has the
		// mirror, and this run stops.
		e.lockLost.Store(true)
		return fatalf("sink %s: %v", e.sink.Location(), err)
	}
	if err != nil {
		return err
	}
	e.reportRefWrites(writes, moves, written, head)
	for _, name := range written.Refs.Names() {
		if _, ok := upstream[name]; !ok {
			e.log.Info("ref in the mirror is not upstream; kept", zap.String("ref", name))
		}
	}
	e.reportRefs(upstream, written.Refs)
	return nil
}

// decideRefs applies the ref policy (planner.decideRefs), the facts it
// needs asked of this run, and reports its refusals.
func (e *engine) decideRefs(ctx context.Context, upstream, sinkRefs repo.Refs) ([]*sink.RefWrite, map[string]refMove) {
	d := e.planner.decideRefs(ctx, upstream, sinkRefs, runFacts{e})
	for _, r := range d.refused {
		e.addRefusal(r)
	}
	for _, name := range upstream.Names() {
		if m, ok := d.moves[name]; ok && m.rewound != "" {
			e.log.Warn("ref moved to a version that does not descend from its value (allowed)",
				zap.String("ref", name), zap.String("from", m.from), zap.String("to", upstream[name]), zap.String("relation", m.rewound))
		}
	}
	return d.writes, d.moves
}

// runFacts answers the ref policy's questions (refFacts) from this run.
type runFacts struct{ e *engine }

func (f runFacts) version(id string) (bool, *refusal) {
	f.e.mu.Lock()
	defer f.e.mu.Unlock()
	return f.e.versions.published[id], f.e.versions.refused[id]
}

func (f runFacts) missingFiles(ctx context.Context, id string) ([]string, error) {
	return f.e.confirmFiles(ctx, id)
}

func (f runFacts) target(ctx context.Context, id string) *refusal { return f.e.checkRefTarget(ctx, id) }

func (f runFacts) relation(ctx context.Context, from, to string) string {
	return f.e.ancestry.relation(ctx, from, to)
}

// reportRefWrites reports how the sink's writes of stage two went: the
// refs moved, and a refusal for every write that failed.
func (e *engine) reportRefWrites(writes []*sink.RefWrite, moves map[string]refMove, written sink.RefsWritten, head string) {
	for _, w := range writes {
		r := (*refusal)(nil)
		switch {
		case written.MarkerErr != nil:
			r = refuse(ReasonCopy, w.ID, w.Name, "ref %s not moved: writing %s%s first: %v", w.Name, backend.ReservedPrefix, sink.RefsMovingFile, written.MarkerErr)
		case w.Err != nil:
			r = refuse(ReasonCopy, w.ID, w.Name, "ref %s: %v", w.Name, w.Err)
		}
		if r != nil {
			r.Ref = w.Name
			e.addRefusal(r)
			continue
		}
		m := moves[w.Name]
		e.mu.Lock()
		e.report.RefsMoved = append(e.report.RefsMoved, RefMove{Ref: w.Name, From: m.from, To: w.ID, Rewound: m.rewound})
		e.mu.Unlock()
		e.log.Info("ref moved", zap.String("ref", w.Name), zap.String("from", m.from), zap.String("to", w.ID), zap.Bool("dry_run", e.opts.DryRun))
	}
	if written.RefsJSONErr != nil {
		e.addRefusal(refuse(ReasonCopy, "", repo.RefsFile, "writing %s: %v", repo.RefsFile, written.RefsJSONErr))
	}
	if written.HeadUnknown {
		e.log.Warn("HEAD names a ref the mirror does not have yet; HEAD not written", zap.String("head", head))
	}
	if written.HeadErr != nil {
		e.addRefusal(refuse(ReasonCopy, "", repo.HeadFile, "writing %s: %v", repo.HeadFile, written.HeadErr))
	}
}

// reportRefs says how every upstream ref stands in the sink after the
// run (sinkRefs), and the refs the selection leaves out.
func (e *engine) reportRefs(upstream, sinkRefs repo.Refs) {
	e.mu.Lock()
	refused := e.report.Refused
	e.mu.Unlock()
	seen := nextUpstreamState(e.upstream.state.loaded, upstream, e.upstream.state.now)
	st, lag := refStatuses(upstream, sinkRefs, refused, seen, e.report.Excluded, e.upstream.excluded)
	e.report.Lag += lag
	e.report.Refs = append(e.report.Refs, st...)
}
