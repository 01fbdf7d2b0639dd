package sync

import (
	"context"
	"fmt"
	"sort"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// Compare reads the refs upstream and in the mirror (dst nil: a mirror not
// made yet) and says how each stands, copying nothing: current, behind,
// rewound or diverged upstream (a branch the next run will refuse to
// move), or excluded by sel. Upstream's refs are read and judged as sync
// reads them (source.ReadRefs): a ref that breaks the rules, which sync
// refuses, is refused here too, behind with no upstream value.
// LastChange comes from the mirror's record of when it saw each upstream
// value. Compare judges no signature: a source made with a Trust counts
// for ancestry only the records it lets through.
func Compare(ctx context.Context, upstream *source.Source, mirror *sink.Sink, sel repo.RefSelection) ([]RefStatus, error) {
	mine := repo.Refs{}
	var seen sink.UpstreamState
	if mirror != nil {
		var err error
		if mine, _, err = mirror.Refs().Read(ctx); err != nil {
			return nil, fmt.Errorf("mirror %s: %w", mirror.Location(), err)
		}
		if seen, _, err = mirror.State().UpstreamState(ctx); err != nil {
			return nil, fmt.Errorf("mirror %s: %w", mirror.Location(), err)
		}
	}
	got := upstream.ReadRefsWithoutHead(ctx)
	if got.Unread {
		return nil, fmt.Errorf("source %s: %w", upstream.Location(), got.Err)
	}
	up := got.Refs
	// Compare has no signature policy: upstream records count when they
	// name their own folder. It only reports; sync judges a move itself.
	anc := newAncestry(mirror, upstream)
	out := []RefStatus{}
	for _, name := range up.Names() {
		st := RefStatus{Ref: name, Upstream: up[name], Mirror: mine[name], State: RefCurrent}
		if r, ok := seen.Refs[name]; ok && r.Version == up[name] {
			st.LastChange = r.Changed
		}
		kind, _ := repo.CheckRefName(name)
		switch {
		case !sel.Selects(name):
			st.State = RefExcluded
		case st.Mirror == st.Upstream:
		case kind == repo.Branch && st.Mirror != "":
			st.Behind = true
			st.State = RefBehind
			switch anc.relation(ctx, st.Mirror, st.Upstream) {
			case relRewound:
				st.State = RefRewound
			case relDiverged:
				st.State = RefDiverged
			}
		case kind == repo.Tag && st.Mirror != "":
			st.Behind = true
			st.State = RefRefused // tags never move
		default:
			st.Behind = true
			st.State = RefBehind
		}
		out = append(out, st)
	}
	for _, r := range got.Refused {
		if r.Ref == "" {
			continue
		}
		out = append(out, RefStatus{Ref: r.Ref, Mirror: mine[r.Ref], Behind: true, State: RefRefused})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out, nil
}
