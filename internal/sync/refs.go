package sync

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// publishRefs is stage two: decide each ref by the policy, have the sink
// write them in its order (ref files, refs.json, HEAD; see
// sink.WriteRefs), and report how every ref stands.
func (p *publisher) publishRefs(ctx context.Context, upstream repo.Refs, head string, inv *sink.Inventory) error {
	writes, moves := p.decideRefs(ctx, upstream, inv.Refs)
	if err := ctx.Err(); err != nil {
		return err
	}
	// Before any ref moves: what the run made its own of a prune's
	// candidates leaves its list, by a write conditional on the list the
	// inventory read (sink/claims.go). Refused, the run lost the mirror.
	claimed := p.sink.Claims().Claimed()
	if len(writes) > 0 || len(claimed) > 0 {
		p.mu.Lock()
		p.report.Claimed = claimed
		p.mu.Unlock()
		if err := p.sink.Claims().Settle(ctx, time.Now()); err != nil {
			if backend.IsPreconditionFailed(err) {
				p.lockLost.Store(true)
			}
			return fatalf("sink %s: %v", p.sink.Location(), err)
		}
	}
	written, err := p.sink.WriteRefs(ctx, inv, writes, head)
	if backend.IsPreconditionFailed(err) {
		// Another run moved refs after this run read them: it has the
		// mirror, and this run stops.
		p.lockLost.Store(true)
		return fatalf("sink %s: %v", p.sink.Location(), err)
	}
	if err != nil {
		return err
	}
	p.reportRefWrites(writes, moves, written, head)
	for _, name := range written.Refs.Names() {
		if _, ok := upstream[name]; !ok {
			p.log.Info("ref in the mirror is not upstream; kept", zap.String("ref", name))
		}
	}
	p.reportRefs(upstream, written.Refs)
	return nil
}

// decideRefs applies the ref policy (planner.decideRefs), the facts it
// needs asked of this run, and reports its refusals.
func (p *publisher) decideRefs(ctx context.Context, upstream, sinkRefs repo.Refs) ([]*sink.RefWrite, map[string]refMove) {
	d := p.planner.decideRefs(ctx, upstream, sinkRefs, runFacts{p})
	for _, r := range d.refused {
		p.addRefusal(r)
	}
	for _, name := range upstream.Names() {
		if m, ok := d.moves[name]; ok && m.rewound != "" {
			p.log.Warn("ref moved to a version that does not descend from its value (allowed)",
				zap.String("ref", name), zap.String("from", m.from), zap.String("to", upstream[name]), zap.String("relation", m.rewound))
		}
	}
	return d.writes, d.moves
}

// runFacts answers the ref policy's questions (refFacts) from this run.
type runFacts struct{ p *publisher }

func (f runFacts) version(id string) (bool, *refusal) {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	return f.p.versions.published[id], f.p.versions.refused[id]
}

func (f runFacts) missingFiles(ctx context.Context, id string) ([]string, error) {
	return f.p.confirmFiles(ctx, id)
}

func (f runFacts) target(ctx context.Context, id string) *refusal { return f.p.checkRefTarget(ctx, id) }

func (f runFacts) relation(ctx context.Context, from, to string) string {
	return f.p.ancestry.relation(ctx, from, to)
}

// reportRefWrites reports how the sink's writes of stage two went: the
// refs moved, and a refusal for every write that failed.
func (p *publisher) reportRefWrites(writes []*sink.RefWrite, moves map[string]refMove, written sink.RefsWritten, head string) {
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
			p.addRefusal(r)
			continue
		}
		m := moves[w.Name]
		p.mu.Lock()
		p.report.RefsMoved = append(p.report.RefsMoved, RefMove{Ref: w.Name, From: m.from, To: w.ID, Rewound: m.rewound})
		p.mu.Unlock()
		p.log.Info("ref moved", zap.String("ref", w.Name), zap.String("from", m.from), zap.String("to", w.ID), zap.Bool("dry_run", p.opts.DryRun))
	}
	if written.RefsJSONErr != nil {
		p.addRefusal(refuse(ReasonCopy, "", repo.RefsFile, "writing %s: %v", repo.RefsFile, written.RefsJSONErr))
	}
	if written.HeadUnknown {
		p.log.Warn("HEAD names a ref the mirror does not have yet; HEAD not written", zap.String("head", head))
	}
	if written.HeadErr != nil {
		p.addRefusal(refuse(ReasonCopy, "", repo.HeadFile, "writing %s: %v", repo.HeadFile, written.HeadErr))
	}
}

// reportRefs says how every upstream ref stands in the sink after the
// run (sinkRefs), and the refs the selection leaves out.
func (p *publisher) reportRefs(upstream, sinkRefs repo.Refs) {
	p.mu.Lock()
	refused := p.report.Refused
	p.mu.Unlock()
	seen := nextUpstreamState(p.upstream.state.loaded, upstream, p.upstream.state.now)
	st, lag := refStatuses(upstream, sinkRefs, refused, seen, p.report.Excluded, p.upstream.excluded)
	p.report.Lag += lag
	p.report.Refs = append(p.report.Refs, st...)
}
