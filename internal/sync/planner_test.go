package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// The planner's tests give it values as the run reads them (refs,
// records, the sink's inventory) and check its decisions: no store.

const (
	vBase   = "2026-03-01-0a1b"
	vNext   = "2026-03-02-7f3a"
	vTip    = "2026-03-03-c44e"
	vOther  = "2026-03-02-e9d0" // a history unrelated to vBase's
	vBroken = "2026-03-04-dead"
)

// factsOf is refFacts from maps, counting the questions asked.
type factsOf struct {
	complete  map[string]bool
	refused   map[string]*refusal
	missing   map[string][]string
	confirm   map[string]error
	targets   map[string]*refusal
	relations map[[2]string]string // from, to
	asked     []string
}

func (f *factsOf) version(id string) (bool, *refusal) {
	f.asked = append(f.asked, "version "+id)
	return f.complete[id], f.refused[id]
}

func (f *factsOf) missingFiles(_ context.Context, id string) ([]string, error) {
	f.asked = append(f.asked, "files "+id)
	return f.missing[id], f.confirm[id]
}

func (f *factsOf) target(_ context.Context, id string) *refusal {
	f.asked = append(f.asked, "target "+id)
	return f.targets[id]
}

func (f *factsOf) relation(_ context.Context, from, to string) string {
	f.asked = append(f.asked, "relation "+from+" "+to)
	return f.relations[[2]string{from, to}]
}

func TestPlannerDecideRefs(t *testing.T) {
	ctx := context.Background()
	type want struct {
		write   bool
		rewound string
		reason  string
		message string // a part of the refusal's message
		asked   []string
	}
	cases := []struct {
		name        string
		ref, to     string
		cur         string // "" : the sink lacks the ref
		facts       factsOf
		allowRewind []string
		want        want
	}{
		{name: "new branch to a complete version", ref: "refs/heads/main", to: vTip,
			facts: factsOf{complete: map[string]bool{vTip: true}},
			want:  want{write: true, asked: []string{"version " + vTip, "files " + vTip, "target " + vTip}}},
		{name: "branch forward", ref: "refs/heads/main", to: vTip, cur: vBase,
			facts: factsOf{complete: map[string]bool{vTip: true}, relations: map[[2]string]string{{vBase, vTip}: relForward}},
			want:  want{write: true, asked: []string{"version " + vTip, "files " + vTip, "target " + vTip, "relation " + vBase + " " + vTip}}},
		{name: "tag moved", ref: "refs/tags/v1.0", to: vTip, cur: vBase,
			facts: factsOf{complete: map[string]bool{vTip: true}},
			want: want{reason: ReasonTagMoved, message: "tag refs/tags/v1.0 is " + vBase + " in the mirror and " + vTip + " upstream; tags never move",
				asked: nil}},
		{name: "new tag", ref: "refs/tags/v1.0", to: vTip,
			facts: factsOf{complete: map[string]bool{vTip: true}},
			want:  want{write: true, asked: []string{"version " + vTip, "files " + vTip, "target " + vTip}}},
		{name: "version not complete", ref: "refs/heads/main", to: vTip, cur: vBase,
			facts: factsOf{},
			want: want{reason: ReasonVersion, message: "ref refs/heads/main not moved to " + vTip + ": version not complete",
				asked: []string{"version " + vTip}}},
		{name: "version refused", ref: "refs/heads/main", to: vBroken, cur: vBase,
			facts: factsOf{refused: map[string]*refusal{vBroken: refuse(ReasonSHA256, vBroken, "", "catalog sha256 mismatch")}},
			want: want{reason: ReasonVersion, message: "version refused (" + ReasonSHA256 + ")",
				asked: []string{"version " + vBroken}}},
		{name: "data files missing in the mirror", ref: "refs/heads/main", to: vNext, cur: vBase,
			facts: factsOf{complete: map[string]bool{vNext: true},
				missing: map[string][]string{vNext: {"data/main/t/part-0001.parquet", "data/main/t/part-0002.parquet"}}},
			want: want{reason: ReasonVersion, message: "2 data files it needs are not in the mirror (data/main/t/part-0001.parquet first); sync --repair copies them back",
				asked: []string{"version " + vNext, "files " + vNext}}},
		{name: "data files not confirmed", ref: "refs/heads/main", to: vNext, cur: vBase,
			facts: factsOf{complete: map[string]bool{vNext: true}, confirm: map[string]error{vNext: errors.New("catalog versions/" + vNext + "/ducklake.duckdb: not a database")}},
			want: want{reason: ReasonVersion, message: "its data files in the mirror could not be confirmed: catalog versions/" + vNext + "/ducklake.duckdb: not a database",
				asked: []string{"version " + vNext, "files " + vNext}}},
		{name: "target fails the run's policy", ref: "refs/heads/main", to: vNext, cur: vBase,
			facts: factsOf{complete: map[string]bool{vNext: true},
				targets: map[string]*refusal{vNext: refuse(ReasonSignature, vNext, "", "version %s: no signature; the policy requires one", vNext)}},
			want: want{reason: ReasonSignature, message: "ref refs/heads/main not moved to " + vNext + ": version " + vNext + ": no signature; the policy requires one",
				asked: []string{"version " + vNext, "files " + vNext, "target " + vNext}}},
		{name: "branch rewound", ref: "refs/heads/main", to: vBase, cur: vTip,
			facts: factsOf{complete: map[string]bool{vBase: true}, relations: map[[2]string]string{{vTip, vBase}: relRewound}},
			want: want{reason: ReasonRewound, message: "ref refs/heads/main not moved from " + vTip + " to " + vBase + ": rewound upstream (" + vBase + " is an ancestor of " + vTip + "); branches move forward only, --allow-rewind follows",
				asked: []string{"version " + vBase, "files " + vBase, "target " + vBase, "relation " + vTip + " " + vBase}}},
		{name: "branch diverged", ref: "refs/heads/main", to: vOther, cur: vTip,
			facts: factsOf{complete: map[string]bool{vOther: true}, relations: map[[2]string]string{{vTip, vOther}: relDiverged}},
			want: want{reason: ReasonDiverged, message: "diverged upstream (" + vOther + " is unrelated to " + vTip + ")",
				asked: []string{"version " + vOther, "files " + vOther, "target " + vOther, "relation " + vTip + " " + vOther}}},
		{name: "branch rewound, allowed", ref: "refs/heads/staging", to: vBase, cur: vTip, allowRewind: []string{"refs/heads/staging"},
			facts: factsOf{complete: map[string]bool{vBase: true}, relations: map[[2]string]string{{vTip, vBase}: relRewound}},
			want:  want{write: true, rewound: relRewound, asked: []string{"version " + vBase, "files " + vBase, "target " + vBase, "relation " + vTip + " " + vBase}}},
		{name: "allowance for another branch", ref: "refs/heads/main", to: vBase, cur: vTip, allowRewind: []string{"refs/heads/staging"},
			facts: factsOf{complete: map[string]bool{vBase: true}, relations: map[[2]string]string{{vTip, vBase}: relRewound}},
			want: want{reason: ReasonRewound, message: "rewound upstream",
				asked: []string{"version " + vBase, "files " + vBase, "target " + vBase, "relation " + vTip + " " + vBase}}},
		{name: "a request ref moves without ancestry", ref: "refs/requests/42", to: vOther, cur: vTip,
			facts: factsOf{complete: map[string]bool{vOther: true}, relations: map[[2]string]string{{vTip, vOther}: relDiverged}},
			want:  want{write: true, asked: []string{"version " + vOther, "files " + vOther, "target " + vOther}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			upstream := repo.Refs{c.ref: c.to}
			sinkRefs := repo.Refs{}
			if c.cur != "" {
				sinkRefs[c.ref] = c.cur
			}
			p := planner{allowRewind: c.allowRewind}
			d := p.decideRefs(ctx, upstream, sinkRefs, &c.facts)
			if !slices.Equal(c.facts.asked, c.want.asked) {
				t.Errorf("asked %q, want %q", c.facts.asked, c.want.asked)
			}
			if c.want.write {
				if len(d.refused) != 0 {
					t.Fatalf("refused %+v, want a write", d.refused[0].Refusal)
				}
				if len(d.writes) != 1 || d.writes[0].Name != c.ref || d.writes[0].ID != c.to {
					t.Fatalf("writes %+v, want %s -> %s", d.writes, c.ref, c.to)
				}
				if m := d.moves[c.ref]; m.from != c.cur || m.rewound != c.want.rewound {
					t.Errorf("move %+v, want from %q rewound %q", m, c.cur, c.want.rewound)
				}
				return
			}
			if len(d.writes) != 0 || len(d.moves) != 0 {
				t.Errorf("writes %+v, want none", d.writes)
			}
			if len(d.refused) != 1 {
				t.Fatalf("refused %d refs, want 1", len(d.refused))
			}
			r := d.refused[0]
			if r.Reason != c.want.reason || r.Ref != c.ref || r.Version != c.to || r.File != c.ref {
				t.Errorf("refusal %+v, want reason %s over ref %s, version %s", r.Refusal, c.want.reason, c.ref, c.to)
			}
			if !strings.Contains(r.Message, c.want.message) {
				t.Errorf("message %q, want it to say %q", r.Message, c.want.message)
			}
		})
	}
}

func TestPlannerDecideRefsMany(t *testing.T) {
	// The sink's values are kept where upstream has them; the others are
	// decided each on its own, in ref order.
	upstream := repo.Refs{"refs/heads/main": vTip, "refs/heads/dev": vNext, "refs/tags/v1.0": vBase, "refs/tags/v2.0": vTip}
	sinkRefs := repo.Refs{"refs/heads/main": vNext, "refs/heads/dev": vNext, "refs/tags/v1.0": vNext}
	facts := &factsOf{complete: map[string]bool{vTip: true, vBase: true}, relations: map[[2]string]string{{vNext, vTip}: relForward}}
	d := planner{}.decideRefs(context.Background(), upstream, sinkRefs, facts)
	var wrote []string
	for _, w := range d.writes {
		wrote = append(wrote, w.Name+"="+w.ID)
	}
	if want := []string{"refs/heads/main=" + vTip, "refs/tags/v2.0=" + vTip}; !slices.Equal(wrote, want) {
		t.Errorf("writes %q, want %q", wrote, want)
	}
	if len(d.refused) != 1 || d.refused[0].Ref != "refs/tags/v1.0" || d.refused[0].Reason != ReasonTagMoved {
		t.Errorf("refused %+v, want the tag moved back", d.refused)
	}

	// A stopped run writes nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d = planner{}.decideRefs(ctx, upstream, sinkRefs, &factsOf{complete: map[string]bool{vTip: true}})
	if len(d.writes) != 0 {
		t.Errorf("a stopped run decided writes %+v", d.writes)
	}
}

func TestPlannerSelectRefs(t *testing.T) {
	refs := repo.Refs{"refs/heads/main": vTip, "refs/heads/wip/x": vNext, "refs/tags/v1.0": vBase, "refs/requests/7": vOther}
	p := planner{sel: repo.RefSelection{Exclude: []string{"refs/heads/wip/**"}}}
	s := p.selectRefs(refs, "refs/heads/main")
	if want := (repo.Refs{"refs/heads/main": vTip, "refs/tags/v1.0": vBase}); !refsEqual(s.selected, want) {
		t.Errorf("selected %v, want %v", s.selected, want)
	}
	if want := []string{"refs/heads/wip/x", "refs/requests/7"}; !slices.Equal(s.names, want) {
		t.Errorf("excluded %q, want %q", s.names, want)
	}
	if s.excluded["refs/heads/wip/x"] != vNext || s.head != "refs/heads/main" {
		t.Errorf("excluded values %v, head %q", s.excluded, s.head)
	}
	// HEAD naming a ref left out is not mirrored.
	if s := p.selectRefs(refs, "refs/heads/wip/x"); s.head != "" {
		t.Errorf("head %q, want none: its ref is not selected", s.head)
	}
}

func refsEqual(a, b repo.Refs) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestPlannerHasWork(t *testing.T) {
	upstream := repo.Refs{"refs/heads/main": vTip}
	settled := func() workView {
		refs := repo.Refs{"refs/heads/main": vTip}
		return workView{
			inv: &sink.Inventory{Settings: []byte(`{"id":"r1"}`), Refs: refs, RefsJSON: repo.RefsJSON(refs), Head: []byte("ref: refs/heads/main\n"),
				Versions: map[string]map[string]int64{vTip: {repo.RecordFile: 120, repo.CatalogFile: 4096}}},
			upstream: upstream, head: "refs/heads/main", published: map[string]bool{vTip: true},
			sourceVersions: map[string]map[string]int64{vTip: {repo.RecordFile: 120, repo.CatalogFile: 4096}},
		}
	}
	if (planner{}).hasWork(settled()) {
		t.Fatal("a mirror that says what upstream says has work")
	}
	cases := map[string]func(w *workView){
		"a new mirror":               func(w *workView) { w.inv.Settings = nil },
		"a pending version":          func(w *workView) { w.inv.Pending = map[string]sink.PendingVersion{vNext: {Version: vNext}} },
		"repair":                     func(w *workView) { w.repair = true },
		"distrusted files":           func(w *workView) { w.inv.Distrusted = []string{"data/main/t/part-0001.parquet"} },
		"source to record":           func(w *workView) { w.sourceUnrecorded = true },
		"refs moving":                func(w *workView) { w.inv.RefsMoving = true },
		"a ref behind":               func(w *workView) { w.upstream = repo.Refs{"refs/heads/main": vNext} },
		"a new ref":                  func(w *workView) { w.upstream = repo.Refs{"refs/heads/main": vTip, "refs/tags/v1.0": vTip} },
		"target not complete":        func(w *workView) { w.published = map[string]bool{} },
		"a new file in a version":    func(w *workView) { w.sourceVersions[vTip]["expired.json"] = 64 },
		"upstream state to record":   func(w *workView) { w.stateStale = true },
		"refs.json out of date":      func(w *workView) { w.inv.RefsJSON = []byte("{}") },
		"HEAD names another ref":     func(w *workView) { w.inv.Head = []byte("ref: refs/heads/dev\n") },
		"HEAD absent, ref in mirror": func(w *workView) { w.inv.Head = nil },
	}
	for name, change := range cases {
		w := settled()
		change(&w)
		if !(planner{}).hasWork(w) {
			t.Errorf("%s: no work", name)
		}
	}
	// Nothing to write: a file new upstream in a version the sink holds
	// incomplete (the run writes it with the version), a signature or a
	// catalog (written before version.json, never after), a HEAD whose
	// ref the mirror lacks.
	quiet := map[string]func(w *workView){
		"signature":        func(w *workView) { w.sourceVersions[vTip][repo.SignatureFile] = 300 },
		"catalog":          func(w *workView) { w.sourceVersions[vTip][repo.CatalogFile] = 5000 },
		"incomplete":       func(w *workView) { w.sourceVersions[vNext] = map[string]int64{"expired.json": 64} },
		"source not lists": func(w *workView) { w.sourceVersions = nil },
		"HEAD unknown ref": func(w *workView) { w.head = "refs/heads/dev" },
	}
	for name, change := range quiet {
		w := settled()
		change(&w)
		if (planner{}).hasWork(w) {
			t.Errorf("%s: has work", name)
		}
	}
}

func TestNewFilesInCompleteVersions(t *testing.T) {
	have := map[string]map[string]int64{
		vBase: {repo.RecordFile: 100, repo.CatalogFile: 4096},
		vNext: {repo.CatalogFile: 4096}, // no version.json: being written
	}
	upstream := map[string]map[string]int64{
		vBase: {repo.RecordFile: 100, repo.CatalogFile: 4096, "expired.json": 64, repo.SignatureFile: 300},
		vNext: {repo.RecordFile: 100, repo.CatalogFile: 4096, "expired.json": 64},
	}
	var got []newVersionFile
	for nf := range newFilesInCompleteVersions(upstream, have) {
		got = append(got, nf)
	}
	if len(got) != 1 || got[0] != (newVersionFile{vBase, "expired.json", 64}) {
		t.Errorf("new files %+v, want expired.json of %s", got, vBase)
	}
}

func TestVersionGraph(t *testing.T) {
	// Records as upstream has them: vTip <- vNext <- vBase (complete in
	// the sink: the walk stops there); a cycle c1 <-> c2 and cw waiting
	// on it; gone, an ancestor upstream no longer has.
	records := map[string][]string{
		vTip:               {vNext},
		vNext:              {vBase, "2026-02-01-0900"},
		"2026-03-05-c1c1":  {"2026-03-05-c2c2"},
		"2026-03-05-c2c2":  {"2026-03-05-c1c1"},
		"2026-03-06-cwcw":  {"2026-03-05-c1c1"},
		"2026-03-06-self":  {"2026-03-06-self"},
		"2026-03-07-error": nil,
	}
	g := newVersionGraph(map[string]bool{vBase: true})
	for _, id := range []string{vTip, "2026-03-06-cwcw", "2026-03-05-c2c2", "2026-03-06-self", "2026-03-07-error"} {
		g.add(id, true)
	}
	g.add(vTip, false) // once
	var levels [][]string
	for level := g.take(); len(level) > 0; level = g.take() {
		var ids []string
		for _, n := range level {
			ids = append(ids, n.id)
			if n.id == "2026-03-07-error" {
				n.err = refuse(ReasonRecord, n.id, repo.VersionFile(n.id, repo.RecordFile), "version %s: not JSON", n.id)
				continue
			}
			if parents, ok := records[n.id]; ok {
				n.rec = &repo.Record{ID: n.id, Parents: parents}
			}
		}
		slices.Sort(ids)
		levels = append(levels, ids)
		g.addParents(level)
	}
	want := [][]string{
		{vTip, "2026-03-05-c2c2", "2026-03-06-cwcw", "2026-03-06-self", "2026-03-07-error"},
		{vNext, "2026-03-05-c1c1"},
		{"2026-02-01-0900"},
	}
	if fmt.Sprint(levels) != fmt.Sprint(want) {
		t.Errorf("levels %v, want %v", levels, want)
	}
	if absent := g.finish(); !slices.Equal(absent, []string{"2026-02-01-0900"}) {
		t.Errorf("absent %q, want the ancestor upstream lacks", absent)
	}
	if _, ok := g.nodes[vBase]; ok {
		t.Error("a version complete in the sink is in the graph")
	}
	if n := g.nodes[vTip]; len(n.wait) != 1 || n.wait[0].id != vNext || !n.isRoot {
		t.Errorf("%s waits on %v, want %s", vTip, n.wait, vNext)
	}
	if n := g.nodes[vNext]; len(n.wait) != 0 || n.isRoot {
		t.Errorf("%s waits on %d versions, want none (its parents are complete or absent)", vNext, len(n.wait))
	}
	var cyclic []string
	for _, n := range g.cycles() {
		cyclic = append(cyclic, n.id)
	}
	// The version naming itself waits on nothing (a parent that is itself
	// is not waited on): it is refused by the source's record checks, not
	// here.
	if want := []string{"2026-03-05-c1c1", "2026-03-05-c2c2", "2026-03-06-cwcw"}; !slices.Equal(cyclic, want) {
		t.Errorf("cycles %q, want %q", cyclic, want)
	}
	r := cycleRefusal("2026-03-05-c1c1")
	if r.Reason != ReasonRecord || r.File != "versions/2026-03-05-c1c1/version.json" || !strings.Contains(r.Message, "a cycle of versions") {
		t.Errorf("cycle refusal %+v", r.Refusal)
	}
}

func TestUpstreamState(t *testing.T) {
	before := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := before.Add(time.Hour)
	loaded := sink.UpstreamState{LastRead: before, Refs: map[string]sink.RefSeen{
		"refs/heads/main": {Version: vNext, Changed: before},
		"refs/tags/v1.0":  {Version: vBase, Changed: before},
	}}
	upstream := repo.Refs{"refs/heads/main": vTip, "refs/tags/v1.0": vBase, "refs/heads/dev": vNext}
	next := nextUpstreamState(loaded, upstream, now)
	if !next.LastRead.Equal(now) || len(next.Refs) != 3 {
		t.Fatalf("next %+v", next)
	}
	if s := next.Refs["refs/tags/v1.0"]; !s.Changed.Equal(before) || s.Version != vBase {
		t.Errorf("an unchanged ref: %+v, want its change time kept", s)
	}
	for _, name := range []string{"refs/heads/main", "refs/heads/dev"} {
		if s := next.Refs[name]; !s.Changed.Equal(now) || s.Version != upstream[name] {
			t.Errorf("%s: %+v, want changed now", name, s)
		}
	}
	if !next.LastChange().Equal(now) {
		t.Errorf("last change %v", next.LastChange())
	}
	if !upstreamStateStale(loaded, false, upstream) {
		t.Error("a state that lacks a ref and has another value is not stale")
	}
	if upstreamStateStale(next, false, upstream) {
		t.Error("the state just made is stale")
	}
	if !upstreamStateStale(next, true, upstream) {
		t.Error("an absent state is not stale")
	}
	if !upstreamStateStale(next, false, repo.Refs{"refs/heads/main": vTip, "refs/tags/v1.0": vBase}) {
		t.Error("a ref gone upstream leaves the state current")
	}
}

func TestNextPending(t *testing.T) {
	since := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	now := since.Add(72 * time.Hour)
	v := pendingView{
		before: map[string]sink.PendingVersion{
			"2026-01-10-aaaa": {Version: "2026-01-10-aaaa", Since: since, Reason: ReasonCopy, Message: "timeout"},
			"2026-01-11-bbbb": {Version: "2026-01-11-bbbb", Since: since, Reason: ReasonCopy}, // published now
			"2026-01-12-cccc": {Version: "2026-01-12-cccc", Since: since, Reason: ReasonCopy}, // gone upstream
		},
		published: map[string]bool{"2026-01-11-bbbb": true, vTip: true},
		absent:    map[string]bool{"2026-01-12-cccc": true},
		refused: map[string]*refusal{
			"2026-01-10-aaaa": refuse(ReasonSignature, "2026-01-10-aaaa", "", "no signature"),
			vNext:             refuse(ReasonSHA256, vNext, "", "catalog sha256 mismatch"),
			vBroken:           refuse(ReasonRecord, vBroken, "", "not JSON"), // a root: its ref leads to it
		},
		roots: map[string]bool{vBroken: true, vTip: true},
	}
	list, more := nextPending(v, now)
	want := []sink.PendingVersion{
		{Version: "2026-01-10-aaaa", Since: since, Reason: ReasonSignature, Message: "no signature"},
		{Version: vNext, Since: now, Reason: ReasonSHA256, Message: "catalog sha256 mismatch"},
	}
	if more != 0 || fmt.Sprint(list) != fmt.Sprint(want) {
		t.Errorf("pending %+v (more %d), want %+v", list, more, want)
	}

	// At most sink.MaxPendingVersions are kept; the rest are counted.
	v = pendingView{refused: map[string]*refusal{}}
	for i := range sink.MaxPendingVersions + 3 {
		id := fmt.Sprintf("2025-%06d", i)
		v.refused[id] = refuse(ReasonCopy, id, "", "timeout")
	}
	list, more = nextPending(v, now)
	if len(list) != sink.MaxPendingVersions || more != 3 || list[0].Version != "2025-000000" {
		t.Errorf("kept %d (first %s), more %d", len(list), list[0].Version, more)
	}
}

func TestRefStatuses(t *testing.T) {
	changed := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	upstream := repo.Refs{"refs/heads/main": vTip, "refs/heads/old": vBase, "refs/heads/x": vOther, "refs/tags/v2": vBroken, "refs/heads/new": vNext}
	sinkRefs := repo.Refs{"refs/heads/main": vTip, "refs/heads/old": vTip, "refs/heads/x": vTip, "refs/tags/v2": vTip, "refs/heads/wip": vNext}
	refused := []Refusal{
		{Reason: ReasonRewound, Ref: "refs/heads/old"},
		{Reason: ReasonDiverged, Ref: "refs/heads/x"},
		{Reason: ReasonTagMoved, Ref: "refs/tags/v2"},
		{Reason: ReasonCopy, File: "HEAD"}, // no ref
	}
	seen := sink.UpstreamState{Refs: map[string]sink.RefSeen{"refs/heads/main": {Version: vTip, Changed: changed}}}
	st, lag := refStatuses(upstream, sinkRefs, refused, seen, []string{"refs/heads/wip"}, repo.Refs{"refs/heads/wip": vTip})
	got := map[string]RefStatus{}
	for _, s := range st {
		got[s.Ref] = s
	}
	want := map[string]string{"refs/heads/main": RefCurrent, "refs/heads/old": RefRewound, "refs/heads/x": RefDiverged,
		"refs/tags/v2": RefRefused, "refs/heads/new": RefBehind, "refs/heads/wip": RefExcluded}
	if len(st) != len(want) || lag != 4 {
		t.Errorf("%d statuses, lag %d; want %d, 4", len(st), lag, len(want))
	}
	for name, state := range want {
		if got[name].State != state {
			t.Errorf("%s: %s, want %s", name, got[name].State, state)
		}
	}
	if s := got["refs/heads/main"]; s.Behind || !s.LastChange.Equal(changed) {
		t.Errorf("main: %+v", s)
	}
	if s := got["refs/heads/wip"]; s.Upstream != vTip || s.Mirror != vNext || s.Behind {
		t.Errorf("wip: %+v", s)
	}
	if s := got["refs/heads/new"]; !s.Behind || s.Mirror != "" || s.Upstream != vNext {
		t.Errorf("new: %+v", s)
	}
}
