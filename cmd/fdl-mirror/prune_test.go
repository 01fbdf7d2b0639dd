package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/prune"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// branchedRepo is an upstream with a chain on main (v1 ← v2 ← v3) and
// side branches off v3, each a version adding files no other version names.
type branchedRepo struct {
	dir      string
	chain    []string            // v1, v2, v3; main is v3
	branches map[string]string   // branch ref → its version
	only     map[string][]string // version → data files only it names
}

// makeBranchedRepo generates the chain, then one side branch per name,
// each with files data files of its own. Tests take a copy of one
// generated once (newBranchedRepo).
func makeBranchedRepo(t *testing.T, dir string, files int, branches ...string) *branchedRepo {
	t.Helper()
	opts := generate.Options{Versions: 3, FilesPerVersion: 2, RowsPerFile: 10, FastParquet: true, ExtraFiles: true}
	g := gen(t, dir, opts)
	r := &branchedRepo{dir: dir, chain: g.Versions, branches: map[string]string{}, only: map[string][]string{}}
	main := g.Versions[2]
	for _, b := range branches {
		before := dataFiles(t, dir)
		id, err := generate.AddVersion(context.Background(), dir, files, opts)
		if err != nil {
			t.Fatal(err)
		}
		for name := range dataFiles(t, dir) {
			if !before[name] {
				r.only[id] = append(r.only[id], name)
			}
		}
		sort.Strings(r.only[id])
		r.branches["refs/heads/"+b] = id
		writeFile(t, filepath.Join(dir, "refs/heads", b), id+"\n")
		writeFile(t, filepath.Join(dir, "refs/heads/main"), main+"\n") // the next branch starts at v3 too
	}
	r.writeRefsJSON(t)
	return r
}

func dataFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for name := range fdltest.Names(t, dir) {
		if strings.HasPrefix(name, "data/") {
			out[name] = true
		}
	}
	return out
}

// writeRefsJSON rewrites refs.json from the ref files, as a publisher does.
func (r *branchedRepo) writeRefsJSON(t *testing.T) {
	t.Helper()
	rd, closeRd, err := location.Open(context.Background(), r.dir, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeRd()
	refs, _, err := repo.ReadRefs(context.Background(), rd)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(r.dir, "refs.json"), string(repo.RefsJSON(refs)))
}

// deleteBranch withdraws a branch upstream and deletes its version.
func (r *branchedRepo) deleteBranch(t *testing.T, ref string) {
	t.Helper()
	os.Remove(filepath.Join(r.dir, ref))
	if err := os.RemoveAll(filepath.Join(r.dir, "versions", r.branches[ref])); err != nil {
		t.Fatal(err)
	}
	r.writeRefsJSON(t)
}

// expireBranch withdraws a branch upstream and marks its version expired;
// the version and its files stay upstream.
func (r *branchedRepo) expireBranch(t *testing.T, ref string) {
	t.Helper()
	os.Remove(filepath.Join(r.dir, ref))
	r.expire(t, r.branches[ref])
	r.writeRefsJSON(t)
}

func (r *branchedRepo) expire(t *testing.T, id string) {
	t.Helper()
	writeFile(t, filepath.Join(r.dir, "versions", id, "expired.json"), `{"expired": "2026-11-30"}`)
}

func pruneJSON(t *testing.T, args ...string) (prune.Report, result) {
	t.Helper()
	res := run(t, append([]string{"prune", "--json", "--log-level", "warn"}, args...)...)
	var out struct {
		prune.Report
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("prune --json printed no report (exit %d): %v\nstdout: %s\nstderr: %s", res.code, err, res.stdout, res.stderr)
	}
	if (res.code == 0) != out.OK {
		t.Errorf("exit %d but ok=%v", res.code, out.OK)
	}
	return out.Report, res
}

// listStore lists every object of a store at addr, outside .fdl-mirror/.
func listStore(t *testing.T, addr string) map[string]int64 {
	t.Helper()
	r, closeR, err := location.Open(context.Background(), addr, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeR()
	out := map[string]int64{}
	err = r.List(context.Background(), "", func(fi backend.FileInfo) error {
		if !strings.HasPrefix(fi.Name, backend.ReservedPrefix) {
			out[fi.Name] = fi.Size
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// putObject writes one object into the store at addr.
func putObject(t *testing.T, addr, name, content string) {
	t.Helper()
	b, closeB, err := location.OpenWritable(context.Background(), addr, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeB()
	if err := b.Put(context.Background(), name, strings.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
}

func withoutPrefix(m map[string]int64, prefixes ...string) map[string]int64 {
	out := map[string]int64{}
next:
	for k, v := range m {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				continue next
			}
		}
		out[k] = v
	}
	return out
}

func diffStores(want, got map[string]int64) []string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			d = append(d, "missing "+k)
		} else if g != v && k != "refs.json" {
			d = append(d, "size of "+k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	sort.Strings(d)
	return d
}

// The whole scenario, on each kind of sink: a branch deleted with
// its version, a branch withdrawn with its version expired, and an expired
// ancestor on main. The prune removes the two refs, the three versions and
// the data files only the two branch versions named; the expired ancestor's
// files stay (main's versions need them); a file no catalog names is left
// and reported; what remains is exactly what it was, and verify passes.
func TestPruneRemovesWithdrawnRefsVersionsAndTheirFilesOnEverySink(t *testing.T) {
	s3 := testserver.S3(t)
	gcs := testserver.GCS(t)
	sinks := []struct{ name, addr string }{
		{"local", filepath.Join(t.TempDir(), "mirror")},
		{"s3", s3.URL(s3.Bucket(t), "mirror")},
		{"gcs", gcs.URL(gcs.Bucket(t), "mirror")},
	}
	for _, sk := range sinks {
		t.Run(sk.name, func(t *testing.T) {
			// At once, without the grace period (TestAPruneOfAnObjectStore…
			// shows the grace): --now on a local folder, the loud flag on
			// an object store.
			now := "--now"
			if sk.name != "local" {
				now = "--now-unsafe-on-object-stores"
			}
			up := filepath.Join(t.TempDir(), "upstream")
			r := newBranchedRepo(t, up, 3, "gone", "expired", "kept")
			if res := run(t, "sync", "--log-level", "error", up, sk.addr); res.code != 0 {
				t.Fatalf("sync: exit %d\n%s", res.code, res.stdout)
			}
			putObject(t, sk.addr, "data/stray.parquet", "written by someone else")
			gone, expired, v1 := r.branches["refs/heads/gone"], r.branches["refs/heads/expired"], r.chain[0]
			r.deleteBranch(t, "refs/heads/gone")
			r.expireBranch(t, "refs/heads/expired")
			r.expire(t, v1)
			before := listStore(t, sk.addr)

			// A dry run names everything and removes nothing.
			dry, res := pruneJSON(t, "--dry-run", now, up, sk.addr)
			if res.code != 0 {
				t.Fatalf("dry run: exit %d\n%s", res.code, res.stderr)
			}
			if d := diffStores(before, listStore(t, sk.addr)); len(d) > 0 {
				t.Fatalf("the dry run changed the mirror: %v", d)
			}
			assertPrunePlan(t, dry, r, gone, expired, v1)
			for _, name := range append(append([]string{"refs/heads/gone", "versions/" + gone + "/version.json"}, r.only[gone]...), r.only[expired]...) {
				if !contains(dry.Removed, name) {
					t.Errorf("the dry run does not name %s", name)
				}
			}

			rep, res := pruneJSON(t, now, up, sk.addr)
			if res.code != 0 {
				t.Fatalf("prune: exit %d\n%s", res.code, res.stderr)
			}
			assertPrunePlan(t, rep, r, gone, expired, v1)
			if !contains(rep.Unnamed, "data/stray.parquet") {
				t.Errorf("the stray file is not reported: %v", rep.Unnamed)
			}

			// The mirror now holds what upstream holds, less the expired
			// versions and the files only the expired branch needed, plus
			// the stray file; every remaining object as it was.
			want := withoutPrefix(listStore(t, up), "versions/"+v1+"/", "versions/"+expired+"/")
			// Upstream deleted the gone version's folder but not its data
			// files; the mirror, going by catalogs, removed them too.
			for _, f := range append(append([]string{}, r.only[expired]...), r.only[gone]...) {
				delete(want, f)
			}
			want["data/stray.parquet"] = before["data/stray.parquet"]
			got := listStore(t, sk.addr)
			if d := diffStores(want, got); len(d) > 0 {
				t.Errorf("mirror after prune differs from what should remain: %v", d)
			}
			for name, size := range got {
				if before[name] != size && name != "refs.json" {
					t.Errorf("%s changed size in the prune", name)
				}
			}
			if v := run(t, "verify", sk.addr); v.code != 0 {
				t.Errorf("verify after prune: exit %d\n%s", v.code, v.stdout)
			}

			// Nothing is left to do, and a sync finds nothing to copy back.
			again, res := pruneJSON(t, now, up, sk.addr)
			if res.code != 0 || len(again.Removed) != 0 {
				t.Errorf("second prune: exit %d, removed %v", res.code, again.Removed)
			}
			if s, res := syncJSON(t, up, sk.addr); res.code != 0 || s.FilesCopied != 0 || len(s.RefsMoved) != 0 {
				t.Errorf("sync after prune: exit %d, copied %d files, moved %v", res.code, s.FilesCopied, s.RefsMoved)
			}
		})
	}
}

func assertPrunePlan(t *testing.T, rep prune.Report, r *branchedRepo, gone, expired, v1 string) {
	t.Helper()
	var refs []string
	for _, x := range rep.RefsRemoved {
		refs = append(refs, x.Ref+"="+x.Version)
	}
	if want := []string{"refs/heads/expired=" + expired, "refs/heads/gone=" + gone}; strings.Join(refs, " ") != strings.Join(want, " ") {
		t.Errorf("refs removed = %v, want %v", refs, want)
	}
	versions := map[string]string{}
	for _, v := range rep.VersionsRemoved {
		versions[v.Version] = v.Reason
	}
	want := map[string]string{gone: prune.ReasonGone, expired: prune.ReasonExpired, v1: prune.ReasonExpired}
	if len(versions) != len(want) {
		t.Errorf("versions removed = %v, want %v", versions, want)
	}
	for id, why := range want {
		if versions[id] != why {
			t.Errorf("version %s: removed as %q, want %q", id, versions[id], why)
		}
	}
	wantFiles := append(append([]string{}, r.only[gone]...), r.only[expired]...)
	sort.Strings(wantFiles)
	if strings.Join(rep.DataFilesRemoved, " ") != strings.Join(wantFiles, " ") {
		t.Errorf("data files removed = %v\nwant %v", rep.DataFilesRemoved, wantFiles)
	}
	if rep.HeadRemoved != "" {
		t.Errorf("HEAD removed, naming %s; main stays", rep.HeadRemoved)
	}
}

// The mirror of the scenario above, on a local sink, for the refusals.
func prunedScenario(t *testing.T) (r *branchedRepo, up, sink string) {
	t.Helper()
	_, up, sink = layout(t)
	r = newBranchedRepo(t, up, 3, "gone", "expired")
	if res := run(t, "sync", "--log-level", "error", up, sink); res.code != 0 {
		t.Fatalf("sync: exit %d\n%s", res.code, res.stdout)
	}
	r.deleteBranch(t, "refs/heads/gone")
	r.expireBranch(t, "refs/heads/expired")
	return r, up, sink
}

// assertUntouched fails if any file of the mirror changed since before.
func assertUntouched(t *testing.T, sink string, before map[string]fdltest.FileState, res result) {
	t.Helper()
	after := fdltest.States(t, sink)
	for name, st := range before {
		if strings.HasPrefix(name, backend.ReservedPrefix) {
			continue
		}
		if a, ok := after[name]; !ok || a != st {
			t.Errorf("%s removed or rewritten by a prune that must remove nothing\n%s%s", name, res.stdout, res.stderr)
		}
	}
}

// More deletions than --max-delete: refused, nothing removed, and the
// message says how many and which flag raises it.
func TestPruneRefusesMoreDeletionsThanMaxDelete(t *testing.T) {
	_, up, sink := prunedScenario(t)
	before := fdltest.States(t, sink)
	res := run(t, "prune", "--max-delete", "3", up, sink)
	if res.code != 1 || !strings.Contains(res.stdout, "--max-delete") || !strings.Contains(res.stdout, "limit is 3") {
		t.Fatalf("exit %d, want 1 naming --max-delete\n%s%s", res.code, res.stdout, res.stderr)
	}
	assertUntouched(t, sink, before, res)
	if res := run(t, "prune", "--max-delete", "100", up, sink); res.code != 0 {
		t.Fatalf("prune with --max-delete raised: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// The default limit is 1000 objects: a prune of 1,200 data files is
// refused until the flag raises it.
func TestPruneDefaultMaxDeleteIsAThousand(t *testing.T) {
	_, up, sink := layout(t)
	r := makeBranchedRepo(t, up, 1200, "big")
	if res := run(t, "sync", "--log-level", "error", up, sink); res.code != 0 {
		t.Fatalf("sync: exit %d\n%s", res.code, res.stdout)
	}
	r.deleteBranch(t, "refs/heads/big")
	before := fdltest.States(t, sink)
	res := run(t, "prune", up, sink)
	if res.code != 1 || !strings.Contains(res.stdout, "limit is 1000") {
		t.Fatalf("exit %d, want 1 and the limit of 1000 named\n%s", res.code, res.stdout)
	}
	assertUntouched(t, sink, before, res)
	rep, res := pruneJSON(t, "--max-delete", "2000", up, sink)
	if res.code != 0 || len(rep.DataFilesRemoved) != 1200 {
		t.Fatalf("exit %d, removed %d data files, want 1200", res.code, len(rep.DataFilesRemoved))
	}
	if p := fdltest.Complete(t, sink); len(p) > 0 {
		t.Fatalf("after prune: %v", p)
	}
}

// An upstream that cannot be read removes nothing: unreachable, its refs
// unreadable, another repository, no refs at all, or a version.json that
// answers an error rather than 404 over HTTP.
func TestPruneOfAnUnreadableUpstreamRemovesNothing(t *testing.T) {
	r, up, sink := prunedScenario(t)
	web := testserver.HTTP(t, up)
	failing := func(path string, code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path == path {
				http.Error(w, "broken", code)
				return
			}
			web.ServeHTTP(w, req)
		}))
		t.Cleanup(srv.Close)
		return srv.URL + "/"
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	other := t.TempDir()
	gen(t, other, generate.Options{Versions: 1})
	noRefs := t.TempDir()
	gen(t, noRefs, generate.Options{Versions: 1, ID: readID(t, up)})
	os.RemoveAll(filepath.Join(noRefs, "refs"))
	os.Remove(filepath.Join(noRefs, "refs.json"))

	cases := []struct{ name, source, says string }{
		{"unreachable", down.URL + "/", "fdl.json"},
		{"refs.json answers 500", failing("/refs.json", 500), "refs"},
		{"refs.json answers 404", failing("/refs.json", 404), "refs"},
		{"a version.json answers 503", failing("/versions/"+r.branches["refs/heads/gone"]+"/version.json", 503), "version.json"},
		{"another repository", other, "another repository"},
		{"no refs at all", noRefs, "no refs"},
		{"an unlistable refs folder", unlistableRefs(t, up), "refs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := fdltest.States(t, sink)
			res := run(t, "prune", "--retries", "1", c.source, sink)
			if res.code != 1 || !strings.Contains(res.stdout, c.says) || !strings.Contains(res.stdout, "nothing removed") {
				t.Errorf("exit %d, want 1 saying %q and \"nothing removed\"\n%s%s", res.code, c.says, res.stdout, res.stderr)
			}
			assertUntouched(t, sink, before, res)
		})
	}

	// Over HTTP, a version.json that answers 404 is a version upstream no
	// longer has: the same prune through the plain server removes it.
	rep, res := pruneJSON(t, web.URL, sink)
	if res.code != 0 || len(rep.VersionsRemoved) != 2 {
		t.Fatalf("prune over HTTP: exit %d, removed %+v\n%s", res.code, rep.VersionsRemoved, res.stderr)
	}
	if p := fdltest.Complete(t, sink); len(p) > 0 {
		t.Fatalf("after prune: %v", p)
	}
}

// unlistableRefs is a copy of up whose refs/ folder cannot be read.
func unlistableRefs(t *testing.T, up string) string {
	t.Helper()
	if os.Geteuid() == 0 {
		t.Skip("running as root: permissions do not stop a listing")
	}
	dir := filepath.Join(t.TempDir(), "copy")
	if res := run(t, "sync", "--log-level", "error", up, dir); res.code != 0 {
		t.Fatalf("copying upstream: exit %d", res.code)
	}
	os.Chmod(filepath.Join(dir, "refs", "heads"), 0)
	t.Cleanup(func() { os.Chmod(filepath.Join(dir, "refs", "heads"), 0o755) })
	return dir
}

func readID(t *testing.T, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "fdl.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := repo.ParseSettings(raw)
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// HEAD goes only with the ref it names; a ref upstream still has, even
// one whose file breaks the rules there, stays with its version.
func TestPruneRemovesHEADOnlyWithItsRef(t *testing.T) {
	r, up, sink := prunedScenario(t)
	// Upstream deletes main and points HEAD at a tag; its refs/heads/gone
	// comes back holding garbage: still upstream's ref, so never removed.
	os.Remove(filepath.Join(up, "refs/heads/main"))
	writeFile(t, filepath.Join(up, "refs/tags/v1"), r.chain[0]+"\n")
	writeFile(t, filepath.Join(up, "refs/heads/gone"), "../../not a version\n")
	r.writeRefsJSON(t)
	writeFile(t, filepath.Join(up, "HEAD"), "ref: refs/tags/v1\n")
	rep, res := pruneJSON(t, up, sink)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	if rep.HeadRemoved != "refs/heads/main" {
		t.Errorf("HEAD removed = %q, want it gone with refs/heads/main", rep.HeadRemoved)
	}
	var refs []string
	for _, x := range rep.RefsRemoved {
		refs = append(refs, x.Ref)
	}
	if strings.Join(refs, " ") != "refs/heads/expired refs/heads/main" {
		t.Errorf("refs removed = %v, want expired and main", refs)
	}
	for _, name := range []string{"HEAD", "refs/heads/main", "refs/heads/expired"} {
		if _, err := os.Stat(filepath.Join(sink, name)); !os.IsNotExist(err) {
			t.Errorf("%s still in the mirror", name)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(sink, "refs.json"))
	if strings.Contains(string(raw), "refs/heads/main") || !strings.Contains(string(raw), "refs/heads/gone") {
		t.Errorf("refs.json should name gone and not main:\n%s", raw)
	}
	// main's version is not expired upstream, and gone's has a ref: both stay.
	for _, id := range []string{r.chain[2], r.branches["refs/heads/gone"]} {
		if _, err := os.Stat(filepath.Join(sink, "versions", id, "version.json")); err != nil {
			t.Errorf("version %s was removed: %v", id, err)
		}
	}
	if p := fdltest.Complete(t, sink); len(p) > 0 {
		t.Fatalf("after prune: %v", p)
	}
}

// A prune waits for, or gives up on, a sink another run holds, as a sync does.
func TestPruneHoldsTheSinksLock(t *testing.T) {
	_, up, sinkDir := prunedScenario(t)
	held := fdltest.HoldLock(t, sinkDir, lock.Options{})
	before := fdltest.States(t, sinkDir)
	res := run(t, "prune", up, sinkDir)
	if res.code != 1 || !strings.Contains(res.stdout+res.stderr, "locked") {
		t.Errorf("prune of a locked sink: exit %d, want 1 saying it is locked\n%s%s", res.code, res.stdout, res.stderr)
	}
	assertUntouched(t, sinkDir, before, res)
	// A dry run only reads: it does not need the lock.
	if res := run(t, "prune", "--dry-run", up, sinkDir); res.code != 0 {
		t.Errorf("dry run of a locked sink: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	held.Release(context.Background())
	if res := run(t, "prune", up, sinkDir); res.code != 0 {
		t.Errorf("prune once the lock is free: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// A refs.json that lags the ref files (a sync killed between them) still
// protects the versions it names: readers that cannot list follow it.
func TestPruneKeepsAVersionThatOnlyRefsJSONNames(t *testing.T) {
	r, up, sink := prunedScenario(t)
	expired, gone := r.branches["refs/heads/expired"], r.branches["refs/heads/gone"]
	// The mirror's refs.json still says main is the expired branch's
	// version, as one lagging the ref files would.
	writeFile(t, filepath.Join(sink, "refs.json"), string(repo.RefsJSON(repo.Refs{"refs/heads/main": expired})))
	rep, res := pruneJSON(t, "--dry-run", up, sink)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	removed := map[string]bool{}
	for _, v := range rep.VersionsRemoved {
		removed[v.Version] = true
	}
	if removed[expired] || !removed[gone] {
		t.Errorf("versions removed = %v; want %s (gone) and not %s, which refs.json names", rep.VersionsRemoved, gone, expired)
	}
}

// prune --config prunes the configured mirrors, within their
// prune_max_delete unless --max-delete says otherwise.
func TestPruneConfigHonoursPruneMaxDelete(t *testing.T) {
	_, up, sink := prunedScenario(t)
	cfg := filepath.Join(t.TempDir(), "fdl-mirror.yaml")
	writeFile(t, cfg, "mirrors:\n  - name: m\n    source: "+up+"\n    sink: "+sink+"\n    prune: true\n    prune_max_delete: 2\n")
	before := fdltest.States(t, sink)
	res := run(t, "prune", "--config", cfg)
	if res.code != 1 || !strings.Contains(res.stdout, "limit is 2") {
		t.Fatalf("prune --config with prune_max_delete 2: exit %d\n%s", res.code, res.stdout)
	}
	assertUntouched(t, sink, before, res)
	if res := run(t, "prune", "--config", cfg, "--mirror", "m", "--max-delete", "100"); res.code != 0 || !strings.Contains(res.stdout, "m: ") {
		t.Fatalf("prune --config --max-delete 100: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if p := fdltest.Complete(t, sink); len(p) > 0 {
		t.Fatalf("after prune: %v", p)
	}
}

// The daemon prunes a mirror with prune: true after each successful sync,
// and counts it.
func TestDaemonPrunesAfterASuccessfulSync(t *testing.T) {
	r, up, sink := prunedScenario(t)
	addr := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "fdl-mirror.yaml")
	writeFile(t, cfg, "listen: "+addr+"\nmirrors:\n  - name: m\n    source: "+up+"\n    sink: "+sink+
		"\n    schedule: \"@every 1s\"\n    prune: true\n")
	d := startDaemon(t, cfg, addr)
	gone := filepath.Join(sink, "versions", r.branches["refs/heads/gone"], "version.json")
	waitUntil(t, "the daemon to prune the gone version", 60*time.Second, func() bool {
		_, err := os.Stat(gone)
		return os.IsNotExist(err)
	})
	waitUntil(t, "the prune to be counted", 10*time.Second, func() bool {
		return scrape(t, addr)[`fdl_mirror_prunes_total{mirror="m",result="success"}`] >= 1
	})
	m := scrape(t, addr)
	if n := m[`fdl_mirror_pruned_objects_total{mirror="m"}`]; n < 5 {
		t.Errorf("pruned_objects_total = %v, want the objects removed", n)
	}
	if code, _ := d.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("daemon exit %d", code)
	}
	if p := fdltest.Complete(t, sink); len(p) > 0 {
		t.Fatalf("after the daemon's prune: %v", p)
	}
	for _, ref := range []string{"refs/heads/gone", "refs/heads/expired"} {
		if _, err := os.Stat(filepath.Join(sink, ref)); !os.IsNotExist(err) {
			t.Errorf("%s still in the mirror", ref)
		}
	}
}

// A mirror whose own refs cannot be read removes nothing: a version they
// point to could otherwise look unreferenced.
func TestPruneOfAMirrorWithUnreadableRefsRemovesNothing(t *testing.T) {
	cases := []struct {
		name, file, content, says string
	}{
		{"a ref file holding garbage", "refs/heads/extra", "../../elsewhere\n", "refs/heads/extra"},
		{"a malformed refs.json", "refs.json", "{not json", "refs.json"},
		{"refs.json naming a bad version", "refs.json", `{"refs/heads/main": "../x"}`, "refs.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, up, sink := prunedScenario(t)
			writeFile(t, filepath.Join(sink, c.file), c.content)
			before := fdltest.States(t, sink)
			res := run(t, "prune", up, sink)
			if res.code != 1 || !strings.Contains(res.stdout, c.says) || !strings.Contains(res.stdout, "nothing removed") {
				t.Errorf("exit %d, want 1 naming %s and saying nothing was removed\n%s%s", res.code, c.says, res.stdout, res.stderr)
			}
			assertUntouched(t, sink, before, res)
		})
	}
}

// The text a person reads from a dry run names every ref, version and
// object, says nothing was removed, and a real run then says what it did.
func TestPruneDryRunNamesWhatItWouldRemove(t *testing.T) {
	r, up, sink := prunedScenario(t)
	gone, expired := r.branches["refs/heads/gone"], r.branches["refs/heads/expired"]
	before := fdltest.States(t, sink)
	res := run(t, "prune", "--dry-run", up, sink)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	assertUntouched(t, sink, before, res)
	lines := []string{
		"dry run: nothing removed",
		"would remove ref refs/heads/gone (was " + gone + ")",
		"would remove version " + gone + ": no longer upstream",
		"would remove version " + expired + ": expired upstream",
		"would remove versions/" + expired + "/ducklake.duckdb",
	}
	for _, f := range append(append([]string{}, r.only[gone]...), r.only[expired]...) {
		lines = append(lines, "would remove data file "+f)
	}
	for _, l := range lines {
		if !strings.Contains(res.stdout, l) {
			t.Errorf("dry run does not say %q:\n%s", l, res.stdout)
		}
	}
	// Over the limit, a dry run still lists the plan, and says a real run
	// would be refused.
	res = run(t, "prune", "--dry-run", "--max-delete", "1", up, sink)
	if res.code != 1 || !strings.Contains(res.stdout, "would remove ref refs/heads/gone") || !strings.Contains(res.stdout, "limit is 1") {
		t.Errorf("dry run over the limit: exit %d\n%s", res.code, res.stdout)
	}
	assertUntouched(t, sink, before, res)
	res = run(t, "prune", up, sink)
	if res.code != 0 || !strings.Contains(res.stdout, "removed 2 refs, 2 versions, "+itoa(len(r.only[gone])+len(r.only[expired]))+" data files") {
		t.Errorf("prune: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A sink that does not exist is a usage error, and is not made.
func TestPruneOfAMissingSinkIsAUsageError(t *testing.T) {
	parent, up, sink := layout(t)
	genCopy(t, up, generate.Options{Versions: 1})
	res := run(t, "prune", up, sink)
	if res.code != 2 || !strings.Contains(res.stderr, sink) {
		t.Errorf("exit %d, want 2 naming %s\n%s%s", res.code, sink, res.stdout, res.stderr)
	}
	if extra := fdltest.Outside(t, parent, "upstream"); len(extra) > 0 {
		t.Errorf("the prune made %v", extra)
	}
}

// A version that stays but whose catalog is missing or unreadable in the
// mirror needs files nobody can name: the prune removes nothing.
func TestPruneRemovesNothingWhenARemainingCatalogIsUnknown(t *testing.T) {
	for _, broken := range []string{"missing", "garbage"} {
		t.Run(broken, func(t *testing.T) {
			r, up, sink := prunedScenario(t)
			cat := filepath.Join(sink, "versions", r.chain[1], "ducklake.duckdb")
			if broken == "missing" {
				os.Remove(cat)
			} else {
				writeFile(t, cat, "not a database")
			}
			before := fdltest.States(t, sink)
			res := run(t, "prune", up, sink)
			if res.code != 1 || !strings.Contains(res.stdout, r.chain[1]) || !strings.Contains(res.stdout, "nothing removed") {
				t.Errorf("exit %d, want 1 naming version %s\n%s%s", res.code, r.chain[1], res.stdout, res.stderr)
			}
			assertUntouched(t, sink, before, res)
		})
	}
}
