package sync

import (
	"context"
	"fmt"
	"iter"
	"sort"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// The planner decides what a run does from what both sides hold, read by
// others and handed in as values: which refs are selected, the version
// graph (parents first, cycles refused), whether the run has anything to
// write, which refs move and which are refused and why, what stays
// pending and how every ref stands. It reads no store. Where a ref's
// decision needs a fact that costs a request (a version's data files in
// the mirror, its record there, how two versions relate), it asks
// refFacts, in the order the policy needs them, so that a refusal found
// early costs nothing more.

// planner is the operator's choices the decisions follow.
type planner struct {
	sel         repo.RefSelection // the upstream refs to mirror
	allowRewind []string          // ref patterns whose branches may move back or across
}

// refSelection is the upstream's refs split by the operator's selection.
type refSelection struct {
	selected repo.Refs
	excluded repo.Refs // not selected: neither they nor the versions only they reach are mirrored
	names    []string  // excluded's names, sorted
	head     string    // the ref HEAD names; "" when that ref is not selected
}

// selectRefs keeps the refs the operator chose (Options.Refs); HEAD is
// kept only when its ref is selected.
func (p planner) selectRefs(refs repo.Refs, head string) refSelection {
	s := refSelection{selected: repo.Refs{}, excluded: repo.Refs{}, head: head}
	for _, name := range refs.Names() {
		if p.sel.Selects(name) {
			s.selected[name] = refs[name]
			continue
		}
		s.excluded[name] = refs[name]
		s.names = append(s.names, name)
	}
	if head != "" && !p.sel.Selects(head) {
		s.head = ""
	}
	return s
}

// workView is what decides whether a run has anything to write.
type workView struct {
	inv       *sink.Inventory
	upstream  repo.Refs // selected
	head      string
	published map[string]bool // complete in the sink
	// sourceVersions is upstream's versions/ listed (nil: the source
	// cannot list).
	sourceVersions map[string]map[string]int64
	repair         bool
	// sourceUnrecorded: the source's address is to be recorded;
	// stateStale: when upstream refs changed is to be recorded.
	sourceUnrecorded, stateStale bool
}

// hasWork says whether the run would write anything: it errs towards yes,
// and a write without the lock fails loudly (see guarded) rather than race.
func (p planner) hasWork(w workView) bool {
	inv := w.inv
	if inv.Settings == nil || len(inv.Pending) > 0 || w.repair || len(inv.Distrusted) > 0 || w.sourceUnrecorded || inv.RefsMoving {
		return true
	}
	for name, id := range w.upstream {
		if inv.Refs[name] != id || !w.published[id] {
			return true
		}
	}
	for range newFilesInCompleteVersions(w.sourceVersions, inv.Versions) {
		return true
	}
	if w.stateStale {
		return true
	}
	// Every upstream ref is as upstream has it: what is left to write is
	// refs.json and HEAD, if they do not say what the ref files say.
	if string(inv.RefsJSON) != string(repo.RefsJSON(inv.Refs)) {
		return true
	}
	return w.head != "" && inv.Refs[w.head] != "" && string(inv.Head) != "ref: "+w.head+"\n"
}

// newVersionFile is a file upstream in a version the sink holds complete,
// missing from the sink's copy of that version.
type newVersionFile struct {
	version, file string
	size          int64
}

// newFilesInCompleteVersions yields the files that appeared upstream
// (upstream: versions/ listed there, nil where the source cannot list) in
// versions the sink (have) holds complete: expired.json is added when a
// version passes its retention period. It alone decides it: hasWork
// (whether to take the lock) and completeVersionDirs (what to write) must
// never disagree. A version's catalog and signature are never among them:
// they are written before version.json, never after.
func newFilesInCompleteVersions(upstream, have map[string]map[string]int64) iter.Seq[newVersionFile] {
	return func(yield func(newVersionFile) bool) {
		if upstream == nil {
			return
		}
		for id, files := range have {
			if _, complete := files[repo.RecordFile]; !complete {
				continue
			}
			for f, size := range upstream[id] {
				if _, ok := files[f]; ok || f == repo.SignatureFile || f == repo.CatalogFile {
					continue
				}
				if !yield(newVersionFile{id, f, size}) {
					return
				}
			}
		}
	}
}

// nextUpstreamState is the state after seeing upstream refs now: a ref
// keeps its change time (from loaded) while its value is the same.
func nextUpstreamState(loaded sink.UpstreamState, upstream repo.Refs, now time.Time) sink.UpstreamState {
	next := sink.UpstreamState{LastRead: now, Refs: map[string]sink.RefSeen{}}
	for name, id := range upstream {
		seen, ok := loaded.Refs[name]
		if !ok || seen.Version != id {
			seen = sink.RefSeen{Version: id, Changed: now}
		}
		next.Refs[name] = seen
	}
	return next
}

// upstreamStateStale says whether the state on record (loaded; absent:
// there is none) differs from upstream's refs now (a ref changed,
// appeared or went).
func upstreamStateStale(loaded sink.UpstreamState, absent bool, upstream repo.Refs) bool {
	have := loaded.Refs
	if absent || len(have) != len(upstream) {
		return true
	}
	for name, id := range upstream {
		if have[name].Version != id {
			return true
		}
	}
	return false
}

// versionGraph is the versions a run mirrors: those the refs name and
// their ancestors, down to versions complete in the sink. The records are
// read by others, a level at a time (take, then addParents).
type versionGraph struct {
	nodes     map[string]*versionJob
	published map[string]bool // complete in the sink: the walk stops there
	level     []*versionJob   // added since the last take
}

func newVersionGraph(published map[string]bool) *versionGraph {
	return &versionGraph{nodes: map[string]*versionJob{}, published: published}
}

// add puts a version in the graph, unless it is there or complete in the
// sink.
func (g *versionGraph) add(id string, isRoot bool) {
	if _, seen := g.nodes[id]; seen || g.published[id] {
		return
	}
	n := &versionJob{id: id, isRoot: isRoot, done: make(chan struct{})}
	g.nodes[id] = n
	g.level = append(g.level, n)
}

// take returns the versions added since the last take, whose records are
// to be read.
func (g *versionGraph) take() []*versionJob {
	level := g.level
	g.level = nil
	return level
}

// addParents adds the parents the records of level name.
func (g *versionGraph) addParents(level []*versionJob) {
	for _, n := range level {
		if n.rec == nil {
			continue
		}
		for _, p := range n.rec.Parents {
			g.add(p, false)
		}
	}
}

// finish leaves out the ancestors absent upstream (neither a record nor
// an error) and returns them, sorted; each version left then waits on
// its parents in the graph.
func (g *versionGraph) finish() (absent []string) {
	for id, n := range g.nodes {
		if n.rec == nil && n.err == nil {
			delete(g.nodes, id)
			absent = append(absent, id)
		}
	}
	sort.Strings(absent)
	for _, n := range g.nodes {
		if n.rec == nil {
			continue
		}
		for _, p := range n.rec.Parents {
			if pn, ok := g.nodes[p]; ok && pn != n {
				n.wait = append(n.wait, pn)
			}
		}
	}
	return absent
}

// cycles returns, sorted by id, the versions whose parents lead back to
// themselves (a hostile or broken upstream), and those that wait on them:
// they could never be published parents first.
func (g *versionGraph) cycles() []*versionJob {
	waiting := map[*versionJob]int{}
	children := map[*versionJob][]*versionJob{}
	var ready []*versionJob
	for _, n := range g.nodes {
		waiting[n] = len(n.wait)
		for _, p := range n.wait {
			children[p] = append(children[p], n)
		}
		if len(n.wait) == 0 {
			ready = append(ready, n)
		}
	}
	for len(ready) > 0 {
		n := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		delete(waiting, n)
		for _, c := range children[n] {
			if waiting[c]--; waiting[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	var out []*versionJob
	for n := range waiting {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// cycleRefusal is the refusal of a version in (or waiting on) a cycle.
func cycleRefusal(id string) *refusal {
	return refuse(ReasonRecord, id, repo.VersionFile(id, repo.RecordFile),
		"version %s: its parents lead back to itself (a cycle of versions); refused", id)
}

// refFacts answers the questions of the ref policy that the planner
// cannot answer from values: each costs requests, and is asked only when
// the policy gets to it.
type refFacts interface {
	// version says whether id is complete in the sink, and why this run
	// refused it where it did.
	version(id string) (complete bool, refused *refusal)
	// missingFiles are the data files a complete version needs that the
	// sink lacks (see confirmFiles).
	missingFiles(ctx context.Context, id string) ([]string, error)
	// target judges a complete version by the run's policy (see
	// checkRefTarget); nil passes.
	target(ctx context.Context, id string) *refusal
	// relation is how version to relates to version from (relForward,
	// relRewound, relDiverged).
	relation(ctx context.Context, from, to string) string
}

// refMove is how a ref the run writes moves: from its value in the sink,
// and whether it is a branch rewound or diverged (allowed).
type refMove struct{ from, rewound string }

// refDecisions are the ref files a run writes, how each moves, and the
// refs it refuses, in ref order.
type refDecisions struct {
	writes  []*sink.RefWrite
	moves   map[string]refMove
	refused []*refusal
}

// decideRefs applies the ref policy to every upstream ref the sink does
// not hold at its value: a tag never moves, a ref moves only to a version
// complete in the sink that passes the run's policy, a branch only
// forward unless Options.AllowRewind follows it. A stopped run decides no
// writes (the refusals found so far are kept).
func (p planner) decideRefs(ctx context.Context, upstream, sinkRefs repo.Refs, facts refFacts) refDecisions {
	d := refDecisions{moves: map[string]refMove{}}
	for _, name := range upstream.Names() {
		if ctx.Err() != nil {
			d.writes, d.moves = nil, nil
			return d
		}
		id := upstream[name]
		cur, exists := sinkRefs[name]
		if exists && cur == id {
			continue
		}
		rewound, r := p.decideRef(ctx, name, id, cur, exists, facts)
		if r != nil {
			r.Ref = name
			d.refused = append(d.refused, r)
			continue
		}
		d.writes = append(d.writes, &sink.RefWrite{Name: name, ID: id})
		d.moves[name] = refMove{from: cur, rewound: rewound}
	}
	return d
}

// decideRef is the policy for one ref moving from cur (exists: the sink
// has the ref) to id: a refusal, or how it moves.
func (p planner) decideRef(ctx context.Context, name, id, cur string, exists bool, facts refFacts) (rewound string, r *refusal) {
	kind, _ := repo.CheckRefName(name)
	if kind == repo.Tag && exists {
		return "", refuse(ReasonTagMoved, id, name, "tag %s is %s in the mirror and %s upstream; tags never move", name, cur, id)
	}
	complete, why := facts.version(id)
	if !complete {
		msg := fmt.Sprintf("ref %s not moved to %s: version not complete", name, id)
		if why != nil {
			msg = fmt.Sprintf("ref %s not moved to %s: version refused (%s)", name, id, why.Reason)
		}
		return "", refuse(ReasonVersion, id, name, "%s", msg)
	}
	if missing, err := facts.missingFiles(ctx, id); err != nil || len(missing) > 0 {
		why := fmt.Sprintf("%d data files it needs are not in the mirror (%s first); sync --repair copies them back", len(missing), firstOf(missing))
		if err != nil {
			why = "its data files in the mirror could not be confirmed: " + err.Error()
		}
		return "", refuse(ReasonVersion, id, name, "ref %s not moved to %s: %s", name, id, why)
	}
	if bad := facts.target(ctx, id); bad != nil {
		return "", refuse(bad.Reason, id, name, "ref %s not moved to %s: %s", name, id, bad.Message)
	}
	if kind != repo.Branch || !exists {
		return "", nil
	}
	rel := facts.relation(ctx, cur, id)
	if rel == relForward {
		return "", nil
	}
	if !p.rewindAllowed(name) {
		reason, what := ReasonRewound, "an ancestor of"
		if rel == relDiverged {
			reason, what = ReasonDiverged, "unrelated to"
		}
		return "", refuse(reason, id, name, "ref %s not moved from %s to %s: %s upstream (%s is %s %s); branches move forward only, --allow-rewind follows",
			name, cur, id, rel, id, what, cur)
	}
	return rel, nil
}

// rewindAllowed says whether the operator lets branch name follow a move
// that is not forward (Options.AllowRewind).
func (p planner) rewindAllowed(name string) bool {
	for _, pat := range p.allowRewind {
		if repo.MatchRef(pat, name) {
			return true
		}
	}
	return false
}

func firstOf(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// refStatuses says how every upstream ref stands in the sink after the
// run (sinkRefs), given the run's refusals and the upstream state seen,
// then the refs the selection left out (excludedNames, with their values
// in excluded); lag counts the refs behind.
func refStatuses(upstream, sinkRefs repo.Refs, refused []Refusal, seen sink.UpstreamState, excludedNames []string, excluded repo.Refs) (out []RefStatus, lag int) {
	refusedRefs := map[string]string{}
	for _, r := range refused {
		if r.Ref != "" {
			refusedRefs[r.Ref] = r.Reason
		}
	}
	for _, name := range upstream.Names() {
		behind := sinkRefs[name] != upstream[name]
		st := RefStatus{Ref: name, Upstream: upstream[name], Mirror: sinkRefs[name], Behind: behind,
			State: RefCurrent, LastChange: seen.Refs[name].Changed}
		if behind {
			lag++
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
		out = append(out, st)
	}
	for _, name := range excludedNames {
		out = append(out, RefStatus{Ref: name, Upstream: excluded[name], Mirror: sinkRefs[name], State: RefExcluded})
	}
	return out, lag
}

// pendingView is what decides the pending versions after a run.
type pendingView struct {
	before    map[string]sink.PendingVersion // pending at the run's start
	published map[string]bool                // complete in the sink now
	absent    map[string]bool                // ancestors upstream does not have
	refused   map[string]*refusal            // refused in this run
	roots     map[string]bool                // named by refs: never kept
}

// nextPending is what is pending after a run: the versions pending before
// and the ancestors refused now, less those published and those upstream
// no longer has, sorted, at most sink.MaxPendingVersions (more: how many
// left out). Roots are not kept: their refs lead to them at every run.
func nextPending(v pendingView, now time.Time) (list []sink.PendingVersion, more int) {
	next := map[string]sink.PendingVersion{}
	for id, p := range v.before {
		if !v.published[id] && !v.absent[id] {
			next[id] = p
		}
	}
	for id, r := range v.refused {
		if v.roots[id] || v.published[id] {
			continue
		}
		p, ok := next[id]
		if !ok {
			p = sink.PendingVersion{Version: id, Since: now}
		}
		p.Reason, p.Message = r.Reason, r.Message
		next[id] = p
	}
	list = make([]sink.PendingVersion, 0, len(next))
	for _, p := range next {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Version < list[j].Version })
	more = max(0, len(list)-sink.MaxPendingVersions)
	return list[:len(list)-more], more
}
