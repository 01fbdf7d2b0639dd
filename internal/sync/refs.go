package sync

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// publishRefs is stage two: each ref whose version is complete in the sink
// is written (tags only when new), then refs.json, then HEAD.
func (e *engine) publishRefs(ctx context.Context, upstream repo.Refs, head string, inv *inventory) error {
	sinkRefs := inv.refs
	refWriteFailed := false // a ref file may hold what refs.json will not say
	var writes []*refWrite
	for _, name := range upstream.Names() {
		if err := ctx.Err(); err != nil {
			return err
		}
		id := upstream[name]
		kind, _ := repo.CheckRefName(name)
		cur, exists := sinkRefs[name]
		if exists && cur == id {
			continue
		}
		if kind == repo.Tag && exists {
			r := refuse(ReasonTagMoved, id, name, "tag %s is %s in the mirror and %s upstream; tags never move", name, cur, id)
			r.Ref = name
			e.addRefusal(r)
			continue
		}
		e.mu.Lock()
		complete, why := e.published[id], e.refused[id]
		e.mu.Unlock()
		if !complete {
			msg := fmt.Sprintf("ref %s not moved to %s: version not complete", name, id)
			if why != nil {
				msg = fmt.Sprintf("ref %s not moved to %s: version refused (%s)", name, id, why.Reason)
			}
			r := refuse(ReasonVersion, id, name, "%s", msg)
			r.Ref = name
			e.addRefusal(r)
			continue
		}
		if missing, err := e.confirmFiles(ctx, id); err != nil || len(missing) > 0 {
			why := fmt.Sprintf("%d data files it needs are not in the mirror (%s first); sync --repair copies them back", len(missing), firstOf(missing))
			if err != nil {
				why = "its data files in the mirror could not be confirmed: " + err.Error()
			}
			r := refuse(ReasonVersion, id, name, "ref %s not moved to %s: %s", name, id, why)
			r.Ref = name
			e.addRefusal(r)
			continue
		}
		if bad := e.checkRefTarget(ctx, id); bad != nil {
			r := refuse(bad.Reason, id, name, "ref %s not moved to %s: %s", name, id, bad.Message)
			r.Ref = name
			e.addRefusal(r)
			continue
		}
		rewound := ""
		if kind == repo.Branch && exists {
			if rel := e.ancestry.relation(ctx, cur, id); rel != relForward {
				if !e.rewindAllowed(name) {
					reason, what := ReasonRewound, "an ancestor of"
					if rel == relDiverged {
						reason, what = ReasonDiverged, "unrelated to"
					}
					r := refuse(reason, id, name, "ref %s not moved from %s to %s: %s upstream (%s is %s %s); branches move forward only, --allow-rewind follows",
						name, cur, id, rel, id, what, cur)
					r.Ref = name
					e.addRefusal(r)
					continue
				}
				rewound = rel
				e.log.Warn("ref moved to a version that does not descend from its value (allowed)",
					zap.String("ref", name), zap.String("from", cur), zap.String("to", id), zap.String("relation", rel))
			}
		}
		writes = append(writes, &refWrite{name: name, id: id, from: cur, rewound: rewound})
	}
	if len(writes) > 0 {
		if err := e.startMovingRefs(ctx, inv); err != nil {
			for _, w := range writes {
				r := refuse(ReasonCopy, w.id, w.name, "ref %s not moved: writing %s%s first: %v", w.name, backend.ReservedPrefix, RefsMovingFile, err)
				r.Ref = w.name
				e.addRefusal(r)
			}
			writes = nil
		}
	}
	// The ref files at once: each names a version complete in the sink,
	// so their order among themselves does not matter (refs.json comes
	// after all of them). One at a time, a first mirror of 20,000 tags
	// took 40 s on the test gateway.
	width := repo.RefReaders
	if e.opts.DryRun {
		width = 1 // the plan lists them in name order; nothing is written
	}
	e.eachOf(width, len(writes), func(k int) {
		w := writes[k]
		w.err = e.putRead(ctx, inv, w.name, repo.RefFileContent(w.id))
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, w := range writes {
		if backend.IsPreconditionFailed(w.err) {
			// Another run moved refs after this run read them: neither
			// refs.json nor HEAD from this run's view.
			return fatalf("sink %s: %v", e.dst.Location(), w.err)
		}
	}
	for _, w := range writes {
		if w.err != nil {
			refWriteFailed = true
			r := refuse(ReasonCopy, w.id, w.name, "ref %s: %v", w.name, w.err)
			r.Ref = w.name
			e.addRefusal(r)
			continue
		}
		e.mu.Lock()
		e.report.RefsMoved = append(e.report.RefsMoved, RefMove{Ref: w.name, From: w.from, To: w.id, Rewound: w.rewound})
		e.mu.Unlock()
		e.log.Info("ref moved", zap.String("ref", w.name), zap.String("from", w.from), zap.String("to", w.id), zap.Bool("dry_run", e.opts.DryRun))
		sinkRefs[w.name] = w.id
	}
	for _, name := range sinkRefs.Names() {
		if _, ok := upstream[name]; !ok {
			e.log.Info("ref in the mirror is not upstream; kept", zap.String("ref", name))
		}
	}
	refusedRefs := map[string]string{}
	e.mu.Lock()
	for _, r := range e.report.Refused {
		if r.Ref != "" {
			refusedRefs[r.Ref] = r.Reason
		}
	}
	e.mu.Unlock()
	seen := e.nextUpstreamState(upstream, e.upstreamState.now)
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
		e.report.Refs = append(e.report.Refs, RefStatus{Ref: name, Upstream: e.excluded[name], Mirror: sinkRefs[name], State: RefExcluded})
	}

	want := repo.RefsJSON(sinkRefs)
	refsJSONWritten := true
	if string(inv.refsJSON) != string(want) {
		if err := e.putRead(ctx, inv, repo.RefsFile, want); backend.IsPreconditionFailed(err) {
			return fatalf("sink %s: %v", e.dst.Location(), err)
		} else if err != nil {
			refsJSONWritten = false
			e.addRefusal(refuse(ReasonCopy, "", repo.RefsFile, "writing %s: %v", repo.RefsFile, err))
		}
	}
	if refsJSONWritten && !refWriteFailed {
		e.doneMovingRefs(ctx, inv)
	}
	if head != "" {
		if _, ok := sinkRefs[head]; !ok {
			e.log.Warn("HEAD names a ref the mirror does not have yet; HEAD not written", zap.String("head", head))
			return nil
		}
		content := []byte("ref: " + head + "\n")
		if string(inv.head) != string(content) {
			if err := e.putRead(ctx, inv, repo.HeadFile, content); backend.IsPreconditionFailed(err) {
				return fatalf("sink %s: %v", e.dst.Location(), err)
			} else if err != nil {
				e.addRefusal(refuse(ReasonCopy, "", repo.HeadFile, "writing %s: %v", repo.HeadFile, err))
			}
		}
	}
	return nil
}

// confirmFiles returns the data files that a version complete in the sink
// from before this run names and the sink lacks now: a folder with
// version.json is not proof that its files are all there (a prune that
// ran while the run publishing it was paused, a hand's removal). A
// version this run published was confirmed as it was, and costs nothing
// here; another is confirmed once per run, from its catalogs in the sink
// and one listing of data_dir.
func (e *engine) confirmFiles(ctx context.Context, id string) ([]string, error) {
	e.mu.Lock()
	now := e.publishedNow[id]
	e.mu.Unlock()
	if now || e.opts.DryRun {
		return nil, nil
	}
	if e.confirmed == nil {
		e.confirmed = map[string][]string{}
	}
	if missing, ok := e.confirmed[id]; ok {
		return missing, nil
	}
	have := e.dstVersions[id]
	var missing []string
	seen := map[string]bool{}
	for _, file := range append([]string{repo.MainCatalog(have)}, repo.AlternateCatalogs(have)...) {
		cat, err := e.readSinkFile(ctx, id, file)
		if err != nil {
			return nil, fmt.Errorf("catalog %s: %w", repo.VersionFile(id, file), err)
		}
		for _, f := range cat.Files {
			name := e.settings.DataDir + f.Path
			if seen[name] {
				continue
			}
			seen[name] = true
			size, ok, err := e.sinkDataFile(ctx, name)
			if err != nil {
				return nil, err
			}
			if !ok || (f.Size >= 0 && size != f.Size) {
				missing = append(missing, name)
			}
		}
	}
	e.confirmed[id] = missing
	return missing, nil
}

func firstOf(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// refWrite is a ref file stage two writes, and how the write went.
type refWrite struct {
	name, id, from, rewound string
	err                     error
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
