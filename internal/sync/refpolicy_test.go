package sync_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlmirror "github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsink "github.com/fdl-mirror/fdl-mirror/internal/sink"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// Refs are not signed, only versions are: an upstream (or whoever took it
// over) could move main back to an old signed version with a known flaw.
// A branch in the mirror moves forward only (issue 12).

// setRefs writes ref files upstream and refs.json from all of them.
func setRefs(t *testing.T, up string, refs repo.Refs) {
	t.Helper()
	for name, id := range refs {
		p := filepath.Join(up, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, repo.RefFileContent(id), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	all, _, err := repo.ReadRefs(context.Background(), mustOpen(t, up))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(up, repo.RefsFile), repo.RefsJSON(all), 0o644); err != nil {
		t.Fatal(err)
	}
}

func refOf(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// chain generates a repository of three versions on main and mirrors it.
func chain(t *testing.T) (up, mirror string, g *generate.Repo) {
	t.Helper()
	up, mirror = filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	g, err := generate.Generate(context.Background(), up, generate.Options{Versions: 3, FilesPerVersion: 2, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run refused: %+v", rep.Refused)
	}
	return up, mirror, g
}

// unrelated adds to up a history of two versions that shares no version
// with up's own (another generated repository, same id), and returns its tip.
func unrelated(t *testing.T, up, id string) (tip string, versions []string) {
	t.Helper()
	other := filepath.Join(t.TempDir(), "other")
	g, err := generate.Generate(context.Background(), other, generate.Options{Versions: 2, FilesPerVersion: 1, FastParquet: true, ID: id, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"versions", "data"} {
		if err := os.CopyFS(filepath.Join(up, d), os.DirFS(filepath.Join(other, d))); err != nil && !os.IsExist(err) {
			// CopyFS refuses existing files; the folders differ only by new names.
			t.Fatal(err)
		}
	}
	return g.Versions[len(g.Versions)-1], g.Versions
}

func reasons(rep *fdlsync.Report) []string {
	var out []string
	for _, r := range rep.Refused {
		out = append(out, r.Reason+" "+r.Ref)
	}
	return out
}

func TestBranchRewoundUpstreamIsRefusedAndKept(t *testing.T) {
	up, mirror, g := chain(t)
	v1, v3 := g.Versions[0], g.Versions[2]
	setRefs(t, up, repo.Refs{generate.MainRef: v1})

	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if len(rep.Refused) != 1 || rep.Refused[0].Reason != fdlsync.ReasonRewound || rep.Refused[0].Ref != generate.MainRef {
		t.Fatalf("refused = %v, want one %s of %s", reasons(rep), fdlsync.ReasonRewound, generate.MainRef)
	}
	if msg := rep.Refused[0].Message; !fdltest.Contains(msg, v1, v3, "rewound") {
		t.Errorf("message %q does not name both versions and why", msg)
	}
	if got := refOf(t, mirror, generate.MainRef); got != v3 {
		t.Errorf("mirror's main = %s, want it kept at %s", got, v3)
	}
	if len(rep.RefsMoved) != 0 {
		t.Errorf("refs moved: %+v", rep.RefsMoved)
	}
	// refs.json still says what the ref file says.
	if b, _ := os.ReadFile(filepath.Join(mirror, repo.RefsFile)); !strings.Contains(string(b), v3) {
		t.Errorf("mirror's refs.json lost main=%s: %s", v3, b)
	}
}

func TestBranchMovedToUnrelatedHistoryIsRefused(t *testing.T) {
	up, mirror, g := chain(t)
	tip, versions := unrelated(t, up, g.ID)
	setRefs(t, up, repo.Refs{generate.MainRef: tip})

	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if len(rep.Refused) != 1 || rep.Refused[0].Reason != fdlsync.ReasonDiverged {
		t.Fatalf("refused = %v, want one %s", reasons(rep), fdlsync.ReasonDiverged)
	}
	if got := refOf(t, mirror, generate.MainRef); got != g.Versions[2] {
		t.Errorf("mirror's main = %s, want %s kept", got, g.Versions[2])
	}
	// The other history's versions were copied (objects first) but no ref
	// of the mirror leads to them.
	for _, v := range versions {
		if !slices.Contains(rep.VersionsPublished, v) {
			t.Errorf("version %s of the new history not mirrored", v)
		}
	}
}

func TestBranchMovedForwardIsFollowed(t *testing.T) {
	up, mirror, g := chain(t)
	next, err := generate.AddVersion(context.Background(), up, 1, generate.Options{FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.OK() {
		t.Fatalf("refused: %v", reasons(rep))
	}
	if got := refOf(t, mirror, generate.MainRef); got != next {
		t.Errorf("mirror's main = %s, want %s", got, next)
	}
	if len(rep.RefsMoved) != 1 || rep.RefsMoved[0].From != g.Versions[2] || rep.RefsMoved[0].Rewound != "" {
		t.Errorf("refs moved = %+v, want main forward from %s", rep.RefsMoved, g.Versions[2])
	}
}

func TestAllowRewindFollowsAndSaysSo(t *testing.T) {
	up, mirror, g := chain(t)
	setRefs(t, up, repo.Refs{generate.MainRef: g.Versions[0]})
	rep := mustRun(t, up, mirror, fdlsync.Options{AllowRewind: []string{"refs/heads/**"}})
	if !rep.OK() {
		t.Fatalf("refused: %v", reasons(rep))
	}
	if got := refOf(t, mirror, generate.MainRef); got != g.Versions[0] {
		t.Errorf("mirror's main = %s, want %s", got, g.Versions[0])
	}
	if len(rep.RefsMoved) != 1 || rep.RefsMoved[0].Rewound != "rewound" {
		t.Errorf("refs moved = %+v, want main marked rewound", rep.RefsMoved)
	}
	// A pattern that does not name the branch does not allow it.
	setRefs(t, up, repo.Refs{generate.MainRef: g.Versions[2]})
	mustRun(t, up, mirror, fdlsync.Options{AllowRewind: []string{"refs/heads/**"}})
	setRefs(t, up, repo.Refs{generate.MainRef: g.Versions[1]})
	rep = mustRun(t, up, mirror, fdlsync.Options{AllowRewind: []string{"refs/heads/release/**"}})
	if len(rep.Refused) != 1 || rep.Refused[0].Reason != fdlsync.ReasonRewound {
		t.Errorf("refused = %v, want main refused as rewound", reasons(rep))
	}
}

func TestTagsOnlyMirror(t *testing.T) {
	up, mirror := filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	g, err := generate.Generate(context.Background(), up, generate.Options{Versions: 2, Tags: true, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{Refs: repo.RefSelection{Include: []string{"refs/tags/*"}}})
	if !rep.OK() {
		t.Fatalf("refused: %v", reasons(rep))
	}
	if refOf(t, mirror, generate.MainRef) != "" {
		t.Error("refs/heads/main mirrored by a tags-only mirror")
	}
	if refOf(t, mirror, "refs/tags/v1") != g.Versions[0] || refOf(t, mirror, "refs/tags/v2") != g.Versions[1] {
		t.Error("tags not mirrored")
	}
	if _, err := os.Stat(filepath.Join(mirror, repo.HeadFile)); !os.IsNotExist(err) {
		t.Errorf("HEAD written though its ref is not selected (%v)", err)
	}
	if b, _ := os.ReadFile(filepath.Join(mirror, repo.RefsFile)); strings.Contains(string(b), "heads") {
		t.Errorf("refs.json lists a ref the mirror does not have: %s", b)
	}
	if !slices.Equal(rep.Excluded, []string{generate.MainRef}) {
		t.Errorf("report's excluded refs = %v, want main alone", rep.Excluded)
	}
	// A run that takes the lock reads both sides again under it: main
	// is still excluded once, not once per read.
	setRefs(t, up, repo.Refs{"refs/tags/v3": g.Versions[1]})
	lrep, err := fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: up, Sink: mirror},
		Refs: repo.RefSelection{Include: []string{"refs/tags/*"}}}, nil, nil)
	if err != nil || !lrep.OK() || refOf(t, mirror, "refs/tags/v3") != g.Versions[1] {
		t.Fatalf("locked run: %v %+v", err, lrep)
	}
	if !slices.Equal(lrep.Excluded, []string{generate.MainRef}) {
		t.Errorf("locked run's excluded refs = %v, want main alone", lrep.Excluded)
	}
}

func TestExcludedBranchAndItsVersionsAreAbsent(t *testing.T) {
	up, mirror := filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	g, err := generate.Generate(context.Background(), up, generate.Options{Versions: 2, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	tip, only := unrelated(t, up, g.ID)
	setRefs(t, up, repo.Refs{"refs/heads/experiment": tip})
	rep := mustRun(t, up, mirror, fdlsync.Options{Refs: repo.RefSelection{Exclude: []string{"refs/heads/experiment"}}})
	if !rep.OK() {
		t.Fatalf("refused: %v", reasons(rep))
	}
	if refOf(t, mirror, "refs/heads/experiment") != "" {
		t.Error("excluded branch mirrored")
	}
	for _, v := range only {
		if _, err := os.Stat(filepath.Join(mirror, "versions", v)); !os.IsNotExist(err) {
			t.Errorf("version %s, reached only by the excluded branch, is in the mirror", v)
		}
	}
	if refOf(t, mirror, generate.MainRef) != g.Versions[1] {
		t.Error("main not mirrored")
	}
}

func TestRequestRefsOnlyWhenSelected(t *testing.T) {
	up, mirror, g := chain(t)
	setRefs(t, up, repo.Refs{"refs/requests/17": g.Versions[1]})
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.OK() {
		t.Fatalf("refused: %v", reasons(rep))
	}
	if refOf(t, mirror, "refs/requests/17") != "" {
		t.Error("a request ref was mirrored by default")
	}
	rep = mustRun(t, up, mirror, fdlsync.Options{Refs: repo.RefSelection{Include: []string{"refs/heads/**", "refs/requests/*"}}})
	if !rep.OK() {
		t.Fatalf("refused: %v", reasons(rep))
	}
	if refOf(t, mirror, "refs/requests/17") != g.Versions[1] {
		t.Error("a selected request ref was not mirrored")
	}
}

func TestUpstreamLastChangeIsRecorded(t *testing.T) {
	up, mirror, _ := chain(t)
	st, _, err := fdlsink.NewReader(mustOpen(t, mirror), nil).State().UpstreamState(context.Background())
	if err != nil || st.Refs[generate.MainRef].Version == "" {
		t.Fatalf("no upstream state after the first run: %+v, %v", st, err)
	}
	first := st.LastChange()
	// Nothing changes upstream: the last change stays where it was.
	time.Sleep(20 * time.Millisecond)
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.UpstreamLastChange.Equal(first) {
		t.Errorf("no-op run: last change %v, want %v", rep.UpstreamLastChange, first)
	}
	if _, err := generate.AddVersion(context.Background(), up, 1, generate.Options{FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	rep = mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.UpstreamLastChange.After(first) {
		t.Errorf("after main moved: last change %v, not after %v", rep.UpstreamLastChange, first)
	}
}
