package sync

import (
	"context"
	"fmt"

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

// refMove is how a ref the run writes moves: from its value in the sink,
// and whether it is a branch rewound or diverged (allowed).
type refMove struct{ from, rewound string }

// decideRefs applies the ref policy to every upstream ref the sink does
// not hold at its value: a tag never moves, a ref moves only to a version
// complete in the sink that passes the run's policy, a branch only
// forward unless Options.AllowRewind follows it. It refuses the others
// and returns the ref files to write.
func (e *engine) decideRefs(ctx context.Context, upstream, sinkRefs repo.Refs) ([]*sink.RefWrite, map[string]refMove) {
	var writes []*sink.RefWrite
	moves := map[string]refMove{}
	for _, name := range upstream.Names() {
		if ctx.Err() != nil {
			return nil, nil
		}
		id := upstream[name]
		cur, exists := sinkRefs[name]
		if exists && cur == id {
			continue
		}
		rewound, r := e.decideRef(ctx, name, id, cur, exists)
		if r != nil {
			r.Ref = name
			e.addRefusal(r)
			continue
		}
		writes = append(writes, &sink.RefWrite{Name: name, ID: id})
		moves[name] = refMove{from: cur, rewound: rewound}
	}
	return writes, moves
}

// decideRef is the policy for one ref moving from cur (exists: the sink
// has the ref) to id: a refusal, or how it moves.
func (e *engine) decideRef(ctx context.Context, name, id, cur string, exists bool) (rewound string, r *refusal) {
	kind, _ := repo.CheckRefName(name)
	if kind == repo.Tag && exists {
		return "", refuse(ReasonTagMoved, id, name, "tag %s is %s in the mirror and %s upstream; tags never move", name, cur, id)
	}
	e.mu.Lock()
	complete, why := e.versions.published[id], e.versions.refused[id]
	e.mu.Unlock()
	if !complete {
		msg := fmt.Sprintf("ref %s not moved to %s: version not complete", name, id)
		if why != nil {
			msg = fmt.Sprintf("ref %s not moved to %s: version refused (%s)", name, id, why.Reason)
		}
		return "", refuse(ReasonVersion, id, name, "%s", msg)
	}
	if missing, err := e.confirmFiles(ctx, id); err != nil || len(missing) > 0 {
		why := fmt.Sprintf("%d data files it needs are not in the mirror (%s first); sync --repair copies them back", len(missing), firstOf(missing))
		if err != nil {
			why = "its data files in the mirror could not be confirmed: " + err.Error()
		}
		return "", refuse(ReasonVersion, id, name, "ref %s not moved to %s: %s", name, id, why)
	}
	if bad := e.checkRefTarget(ctx, id); bad != nil {
		return "", refuse(bad.Reason, id, name, "ref %s not moved to %s: %s", name, id, bad.Message)
	}
	if kind != repo.Branch || !exists {
		return "", nil
	}
	rel := e.ancestry.relation(ctx, cur, id)
	if rel == relForward {
		return "", nil
	}
	if !e.rewindAllowed(name) {
		reason, what := ReasonRewound, "an ancestor of"
		if rel == relDiverged {
			reason, what = ReasonDiverged, "unrelated to"
		}
		return "", refuse(reason, id, name, "ref %s not moved from %s to %s: %s upstream (%s is %s %s); branches move forward only, --allow-rewind follows",
			name, cur, id, rel, id, what, cur)
	}
	e.log.Warn("ref moved to a version that does not descend from its value (allowed)",
		zap.String("ref", name), zap.String("from", cur), zap.String("to", id), zap.String("relation", rel))
	return rel, nil
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
	refusedRefs := map[string]string{}
	e.mu.Lock()
	for _, r := range e.report.Refused {
		if r.Ref != "" {
			refusedRefs[r.Ref] = r.Reason
		}
	}
	e.mu.Unlock()
	seen := e.nextUpstreamState(upstream, e.upstream.state.now)
	for _, name := range upstream.Names() {
		behind := sinkRefs[name] != upstream[name]
		st := RefStatus{Ref: name, Upstream: upstream[name], Mirror: sinkRefs[name], Behind: behind,
			State: RefCurrent, LastChange: seen.Refs[name].Changed}
		if behind {
			e.report.Lag++
			st.State = RefBehind
			switch reason, refused := refusedRefs[name]; {
			case reason == ReasonRewound:
				st.State = RefRewound
			case reason == ReasonDiverged:
				st.State = RefDiverged
			case refused:
				st.State = RefRefused
			}
		}
		e.report.Refs = append(e.report.Refs, st)
	}
	for _, name := range e.report.Excluded {
		e.report.Refs = append(e.report.Refs, RefStatus{Ref: name, Upstream: e.upstream.excluded[name], Mirror: sinkRefs[name], State: RefExcluded})
	}
}

// rewindAllowed says whether the operator lets branch name follow a move
// that is not forward (Options.AllowRewind).
func (e *engine) rewindAllowed(name string) bool {
	for _, p := range e.opts.AllowRewind {
		if repo.MatchRef(p, name) {
			return true
		}
	}
	return false
}
