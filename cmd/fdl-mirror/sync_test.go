package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// layout makes an upstream and a sink path side by side in one parent, so
// that a test can see anything written beside them.
func layout(t *testing.T) (parent, up, sink string) {
	parent = t.TempDir()
	return parent, filepath.Join(parent, "upstream"), filepath.Join(parent, "mirror")
}

func gen(t *testing.T, dir string, opts generate.Options) *generate.Repo {
	t.Helper()
	r, err := generate.Generate(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("generating %s: %v", dir, err)
	}
	return r
}

func syncJSON(t *testing.T, args ...string) (fdlsync.Report, result) {
	t.Helper()
	res := run(t, append([]string{"sync", "--json"}, args...)...)
	var rep fdlsync.Report
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("sync --json printed no report (exit %d): %v\nstdout: %s\nstderr: %s", res.code, err, res.stdout, res.stderr)
	}
	return rep, res
}

// published lists the versions complete in a local mirror.
func published(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	entries, _ := os.ReadDir(filepath.Join(dir, "versions"))
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, "versions", e.Name(), "version.json")); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

func readRef(t *testing.T, dir, ref string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(ref)))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func TestSyncMirrorsARepositoryByteForByte(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts generate.Options
	}{
		{"layout 0.3 with deletes, removed files and tags", generate.Options{Versions: 4, FilesPerVersion: 3, DeleteFiles: true, RemoveFiles: true, Tags: true, ExtraFiles: true, ScheduledForDeletion: true}},
		{"layout 0.1", generate.Options{Versions: 3, Layout: "0.1"}},
		{"non-default data_dir", generate.Options{Versions: 2, DataDir: "lake/files/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, up, sink := layout(t)
			repo := gen(t, up, tc.opts)
			// An unknown file at the root: readers ignore it, a mirror
			// neither copies nor requires it.
			os.WriteFile(filepath.Join(up, "README.txt"), []byte("hello"), 0o644)

			rep, res := syncJSON(t, up, sink)
			if res.code != 0 {
				t.Fatalf("exit %d; refused: %+v\n%s", res.code, rep.Refused, res.stderr)
			}
			if len(rep.VersionsPublished) != len(repo.Versions) {
				t.Errorf("published %d versions, want %d", len(rep.VersionsPublished), len(repo.Versions))
			}
			fdltest.AssertMirrored(t, up, sink, func(n string) bool { return n == "README.txt" })
			if p := fdltest.Complete(t, sink); len(p) > 0 {
				t.Errorf("mirror does not verify: %v", p)
			}
			if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
				t.Errorf("written outside the mirror: %v", extra)
			}
		})
	}
}

func TestSyncRerunRewritesNothingAndOpensNoCatalog(t *testing.T) {
	_, up, sink := layout(t)
	gen(t, up, generate.Options{Versions: 3, FilesPerVersion: 2, Tags: true})
	if _, res := syncJSON(t, up, sink); res.code != 0 {
		t.Fatalf("first sync: exit %d\n%s", res.code, res.stdout)
	}
	before := fdltest.States(t, sink)
	rep, res := syncJSON(t, up, sink)
	if res.code != 0 {
		t.Fatalf("rerun: exit %d\n%s", res.code, res.stdout)
	}
	if rep.FilesCopied != 0 || len(rep.RefsMoved) != 0 || rep.CatalogsRead != 0 {
		t.Errorf("rerun copied %d files, moved %d refs, read %d catalogs; want none", rep.FilesCopied, len(rep.RefsMoved), rep.CatalogsRead)
	}
	after := fdltest.States(t, sink)
	for name, st := range after {
		if strings.HasPrefix(name, ".fdl-mirror/") {
			continue
		}
		if before[name] != st {
			t.Errorf("rerun rewrote %s", name)
		}
	}
}

func TestSyncFollowsANewUpstreamVersion(t *testing.T) {
	_, up, sink := layout(t)
	opts := generate.Options{Versions: 2, FilesPerVersion: 2}
	gen(t, up, opts)
	if _, res := syncJSON(t, up, sink); res.code != 0 {
		t.Fatalf("first sync: exit %d", res.code)
	}
	id, err := generate.AddVersion(context.Background(), up, 3, opts)
	if err != nil {
		t.Fatal(err)
	}
	rep, res := syncJSON(t, up, sink)
	if res.code != 0 {
		t.Fatalf("second sync: exit %d\n%s", res.code, res.stdout)
	}
	if got := readRef(t, sink, "refs/heads/main"); got != id {
		t.Errorf("main is %q in the mirror, want the new version %s", got, id)
	}
	// 3 data files + the version's directory (catalog, record, at least) —
	// and not the files that were there already.
	if rep.FilesCopied < 5 || rep.FilesCopied > 8 || rep.CatalogsRead != 1 {
		t.Errorf("copied %d files and read %d catalogs for one new version of 3 files", rep.FilesCopied, rep.CatalogsRead)
	}
	fdltest.AssertMirrored(t, up, sink, nil)
}

func TestSyncDryRunWritesNothing(t *testing.T) {
	parent, up, sink := layout(t)
	gen(t, up, generate.Options{Versions: 2})
	res := run(t, "sync", "--dry-run", up, sink)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stdout, "would write refs/heads/main") {
		t.Errorf("dry run does not print its plan:\n%s", res.stdout)
	}
	if _, err := os.Stat(sink); !os.IsNotExist(err) {
		t.Errorf("dry run made the sink: %v", err)
	}
	_ = parent
}

// refusal runs a sync that must refuse, and checks the exit code and that
// the message names the culprit.
func refusal(t *testing.T, up, sink string, culprit ...string) result {
	t.Helper()
	res := run(t, "sync", up, sink)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	if !fdltest.Contains(res.stdout+res.stderr, culprit...) {
		t.Errorf("no message naming %v:\nstdout: %s\nstderr: %s", culprit, res.stdout, res.stderr)
	}
	return res
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSyncRefusesARefWhoseContentClimbsOut(t *testing.T) {
	parent, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 1})
	writeFile(t, filepath.Join(up, "refs/heads/evil"), "../../../escaped\n")
	refusal(t, up, sink, "refs/heads/evil", "version ID")
	if readRef(t, sink, "refs/heads/evil") != "" {
		t.Error("the bad ref was published")
	}
	if readRef(t, sink, "refs/heads/main") != repo.Versions[0] {
		t.Error("the good ref was not mirrored beside the bad one")
	}
	if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
		t.Errorf("written outside the mirror: %v", extra)
	}
}

func TestSyncRefusesAVersionIDOfTwoSegments(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 1})
	writeFile(t, filepath.Join(up, "refs/heads/two"), repo.Versions[0]+"/x\n")
	refusal(t, up, sink, "refs/heads/two", "one path segment")
	if readRef(t, sink, "refs/heads/two") != "" {
		t.Error("the bad ref was published")
	}
}

func TestSyncRefusesAnUnknownMajorVersion(t *testing.T) {
	_, up, sink := layout(t)
	gen(t, up, generate.Options{Versions: 1})
	writeFile(t, filepath.Join(up, "fdl.json"), `{"fdl": "1.0", "id": "x"}`)
	refusal(t, up, sink, "fdl.json", "unknown major spec version")
	if files := fdltest.Files(t, sink); len(files) != 0 {
		t.Errorf("published %d files from a repository of an unknown version", len(files))
	}
}

func TestSyncRefusesASinkHoldingAnotherRepository(t *testing.T) {
	_, up, sink := layout(t)
	gen(t, up, generate.Options{Versions: 1})
	other := `{"fdl": "0.1", "id": "0190aaaa-0000-7000-8000-000000000000"}`
	writeFile(t, filepath.Join(sink, "fdl.json"), other)
	refusal(t, up, sink, "another repository", "0190aaaa-0000-7000-8000-000000000000")
	files := fdltest.Files(t, sink)
	if len(files) != 1 || string(files["fdl.json"]) != other {
		t.Errorf("the other repository's mirror was changed: %v", keys(files))
	}
}

func TestSyncNeverMovesATag(t *testing.T) {
	_, up, sink := layout(t)
	opts := generate.Options{Versions: 2, Tags: true}
	repo := gen(t, up, opts)
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("first sync: exit %d", res.code)
	}
	// Upstream moves tag v1 to the newer version.
	writeFile(t, filepath.Join(up, "refs/tags/v1"), repo.Versions[1]+"\n")
	refusal(t, up, sink, "refs/tags/v1", "never move")
	if got := readRef(t, sink, "refs/tags/v1"); got != repo.Versions[0] {
		t.Errorf("tag v1 is %s in the mirror, want it kept at %s", got, repo.Versions[0])
	}
}

func TestSyncRefusesACatalogNotMatchingItsSHA256(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 2})
	bad := repo.Versions[1]
	f, _ := os.OpenFile(filepath.Join(up, "versions", bad, "ducklake.duckdb"), os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{0})
	f.Close()
	refusal(t, up, sink, bad, "sha256 mismatch")
	assertNotPublished(t, sink, bad)
	if got := readRef(t, sink, "refs/heads/main"); got != "" {
		t.Errorf("main moved to %q although its version was refused", got)
	}
	if !contains(published(t, sink), repo.Versions[0]) {
		t.Error("the good ancestor was not mirrored")
	}
}

func assertNotPublished(t *testing.T, sink, id string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(sink, "versions", id, "version.json")); err == nil {
		t.Errorf("version %s was published", id)
	}
}

func TestSyncRefusesAMissingDataFile(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 1, FilesPerVersion: 2})
	victim := repo.DataFiles[0]
	os.Remove(filepath.Join(up, victim))
	refusal(t, up, sink, victim, "missing")
	assertNotPublished(t, sink, repo.Versions[0])
	if readRef(t, sink, "refs/heads/main") != "" {
		t.Error("main was published to a version with a missing file")
	}
}

func TestSyncRefusesADataFileOfTheWrongSize(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 1, FilesPerVersion: 2})
	victim := repo.DataFiles[0]
	f, _ := os.OpenFile(filepath.Join(up, victim), os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte("extra"))
	f.Close()
	refusal(t, up, sink, victim, "bytes")
	assertNotPublished(t, sink, repo.Versions[0])
	if _, err := os.Stat(filepath.Join(sink, victim)); err == nil {
		t.Error("the wrong-sized file was written into the mirror")
	}
}

func TestSyncRefusesADataDirLeavingTheRoot(t *testing.T) {
	parent, up, sink := layout(t)
	gen(t, up, generate.Options{Versions: 1})
	writeFile(t, filepath.Join(up, "fdl.json"), `{"fdl": "0.1", "id": "x", "data_dir": "../outside/"}`)
	refusal(t, up, sink, "data_dir", "../outside/")
	if files := fdltest.Files(t, sink); len(files) != 0 {
		t.Errorf("published %d files", len(files))
	}
	if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
		t.Errorf("written outside the mirror: %v", extra)
	}
}

// rewriteCatalog changes a version's catalog with DuckDB and fixes its
// record's sha256, as a hostile publisher would.
func rewriteCatalog(t *testing.T, up, id, stmt string) {
	t.Helper()
	cat := filepath.Join(up, "versions", id, "ducklake.duckdb")
	db, err := sql.Open("duckdb", cat)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(stmt); err != nil {
		t.Fatal(err)
	}
	db.Exec("CHECKPOINT")
	db.Close()
	b, _ := os.ReadFile(cat)
	sum := sha256.Sum256(b)
	recPath := filepath.Join(up, "versions", id, "version.json")
	var rec map[string]any
	raw, _ := os.ReadFile(recPath)
	json.Unmarshal(raw, &rec)
	rec["sha256"] = hex.EncodeToString(sum[:])
	raw, _ = json.Marshal(rec)
	os.WriteFile(recPath, raw, 0o644)
}

func TestSyncRefusesACatalogPathOutsideItsDataPath(t *testing.T) {
	for _, tc := range []struct{ name, path, culprit string }{
		{"relative with ..", "../../../etc/passwd", ".."},
		{"absolute elsewhere", "/etc/passwd", "outside the catalog's data path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, up, sink := layout(t)
			repo := gen(t, up, generate.Options{Versions: 1})
			rel := "true"
			if strings.HasPrefix(tc.path, "/") {
				rel = "false"
			}
			rewriteCatalog(t, up, repo.Versions[0], "UPDATE ducklake_data_file SET path = '"+tc.path+"', path_is_relative = "+rel+" WHERE data_file_id = (SELECT min(data_file_id) FROM ducklake_data_file)")
			refusal(t, up, sink, repo.Versions[0], tc.culprit)
			assertNotPublished(t, sink, repo.Versions[0])
			if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
				t.Errorf("written outside the mirror: %v", extra)
			}
		})
	}
}

func TestSyncRefusesMalformedJSON(t *testing.T) {
	t.Run("fdl.json", func(t *testing.T) {
		_, up, sink := layout(t)
		gen(t, up, generate.Options{Versions: 1})
		writeFile(t, filepath.Join(up, "fdl.json"), `{"fdl": "0.1",`)
		refusal(t, up, sink, "fdl.json", "malformed JSON")
		if files := fdltest.Files(t, sink); len(files) != 0 {
			t.Errorf("published %d files", len(files))
		}
	})
	t.Run("version.json", func(t *testing.T) {
		_, up, sink := layout(t)
		repo := gen(t, up, generate.Options{Versions: 1})
		writeFile(t, filepath.Join(up, "versions", repo.Versions[0], "version.json"), `{"parents": [`)
		refusal(t, up, sink, repo.Versions[0], "version.json", "malformed JSON")
		assertNotPublished(t, sink, repo.Versions[0])
		if readRef(t, sink, "refs/heads/main") != "" {
			t.Error("main was published")
		}
	})
}

func TestVerifyFindsAChangedCatalogAndATruncatedDataFile(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 2, FilesPerVersion: 2})
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("sync: exit %d", res.code)
	}
	if res := run(t, "verify", sink); res.code != 0 {
		t.Fatalf("verify of a good mirror: exit %d\n%s", res.code, res.stdout)
	}
	cat := filepath.Join(sink, "versions", repo.Versions[1], "ducklake.duckdb")
	f, _ := os.OpenFile(cat, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{1})
	f.Close()
	data := filepath.Join(sink, repo.DataFiles[0])
	st, _ := os.Stat(data)
	os.Truncate(data, st.Size()/2)

	res := run(t, "verify", sink)
	if res.code != 1 {
		t.Fatalf("verify: exit %d, want 1\n%s", res.code, res.stdout)
	}
	if !fdltest.Contains(res.stdout, repo.Versions[1], "sha256 mismatch") {
		t.Errorf("verify did not name the changed catalog:\n%s", res.stdout)
	}
	if !fdltest.Contains(res.stdout, repo.DataFiles[0], "bytes") {
		t.Errorf("verify did not name the truncated file:\n%s", res.stdout)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A host marks a version past its retention period with expired.json, in a
// version the mirror already has: the next sync copies the marker, and
// nothing else.
func TestSyncCopiesAnExpiredMarkerAddedToAMirroredVersion(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 2})
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("first sync: exit %d", res.code)
	}
	marker := filepath.Join("versions", repo.Versions[0], "expired.json")
	writeFile(t, filepath.Join(up, marker), `{"expired": "2026-11-30"}`)
	rep, res := syncJSON(t, up, sink)
	if res.code != 0 || rep.FilesCopied != 1 || rep.CatalogsRead != 0 {
		t.Fatalf("exit %d, copied %d files, read %d catalogs; want the marker alone", res.code, rep.FilesCopied, rep.CatalogsRead)
	}
	fdltest.AssertMirrored(t, up, sink, nil)
}

// An immutable file already in the mirror with another size is an error,
// reported and left alone: never overwritten.
func TestSyncNeverOverwritesAnImmutableFileOfAnotherSize(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 1, FilesPerVersion: 2})
	planted := filepath.Join(sink, filepath.FromSlash(repo.DataFiles[0]))
	writeFile(t, planted, "not the upstream bytes")
	refusal(t, up, sink, repo.DataFiles[0], "exists in the sink", "left alone")
	if b, _ := os.ReadFile(planted); string(b) != "not the upstream bytes" {
		t.Error("the immutable file was overwritten")
	}
	assertNotPublished(t, sink, repo.Versions[0])
}

func TestSyncTakesFileURLs(t *testing.T) {
	_, up, sink := layout(t)
	gen(t, up, generate.Options{Versions: 1})
	if res := run(t, "sync", "file://"+up, "file://"+sink); res.code != 0 {
		t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	fdltest.AssertMirrored(t, up, sink, nil)
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"sync"}, {"sync", "only-one"}, {"sync", "--no-such-flag", "a", "b"}, {"bogus"},
		{"sync", "a", "https://example.org/mirror/"}, {"verify"},
		{"sync", "--require-signatures", "a", "b"},
	} {
		if res := run(t, args...); res.code != 2 {
			t.Errorf("fdl-mirror %v: exit %d, want 2\n%s", args, res.code, res.stderr)
		}
	}
}

// Versions whose parents lead back to themselves cannot be published
// parents first: refused, named, and the rest of the repository mirrored.
func TestSyncRefusesACycleOfVersions(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 3})
	first, second := repo.Versions[0], repo.Versions[1]
	rec := filepath.Join(up, "versions", first, "version.json")
	var doc map[string]any
	raw, _ := os.ReadFile(rec)
	json.Unmarshal(raw, &doc)
	doc["parents"] = []string{second}
	raw, _ = json.Marshal(doc)
	os.WriteFile(rec, raw, 0o644)
	res := refusal(t, up, sink, first, "cycle")
	if !fdltest.Contains(res.stdout, second, "cycle") {
		t.Errorf("the other version of the cycle was not named:\n%s", res.stdout)
	}
	for _, id := range repo.Versions {
		assertNotPublished(t, sink, id)
	}
	if readRef(t, sink, "refs/heads/main") != "" {
		t.Error("main was published above a cycle")
	}
}
