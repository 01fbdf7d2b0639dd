package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsink "github.com/fdl-mirror/fdl-mirror/internal/sink"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// The third round of hostile cases (issue 28): what an upstream, or a
// damaged mirror, could still make the mirror do. Each test leaves a
// mirror that verify finds complete.

// assertVerifies runs verify on a mirror a test left.
func assertVerifies(t *testing.T, sink string, flags ...string) {
	t.Helper()
	if res := run(t, append(append([]string{"verify"}, flags...), sink)...); res.code != 0 {
		t.Errorf("verify of the mirror left: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// refusedFor finds the refusal of one ref or version with a reason.
func refusedFor(rep fdlsync.Report, ref, version, reason string) bool {
	for _, r := range rep.Refused {
		if r.Reason == reason && (ref == "" || r.Ref == ref) && (version == "" || r.Version == version) {
			return true
		}
	}
	return false
}

// Case 1. X ← A ← B, all signed; the mirror never had X. Upstream writes
// an unsigned record for X naming B as its parent and moves main to A. A
// record that fails the policy proves nothing: the move is a rewind,
// refused, as it is without the forged record.
func TestSyncAForgedAncestorDoesNotProveAForwardMove(t *testing.T) {
	key := newKey(t, "ed25519", "publisher@example.org")
	flags := []string{"--trusted-signers", allowedSigners(t, "", key), "--require-signatures"}
	_, up, sink := layout(t)
	g := gen(t, up, generate.Options{Versions: 3, FastParquet: true, Signer: key.Signer(t, "fdl")})
	x, a, b := g.Versions[0], g.Versions[1], g.Versions[2]
	xDir := filepath.Join(up, "versions", x)
	record, err := os.ReadFile(filepath.Join(xDir, "version.json"))
	if err != nil {
		t.Fatal(err)
	}
	hidden := filepath.Join(t.TempDir(), x)
	if err := os.Rename(xDir, hidden); err != nil {
		t.Fatal(err)
	}
	if rep, res := syncJSON(t, append(flags, up, sink)...); res.code != 0 {
		t.Fatalf("first sync (X absent upstream): exit %d, refused %+v", res.code, rep.Refused)
	}
	if readRef(t, sink, generate.MainRef) != b {
		t.Fatal("main is not B after the first sync")
	}

	// The forgery: X's record, unsigned, with B as its parent.
	var rec map[string]any
	if err := json.Unmarshal(record, &rec); err != nil {
		t.Fatal(err)
	}
	rec["parents"] = []string{b}
	forged, _ := json.Marshal(rec)
	writeFile(t, filepath.Join(xDir, "version.json"), string(forged))
	moveRef(t, up, generate.MainRef, a)

	rep, res := syncJSON(t, append(flags, up, sink)...)
	if res.code != 1 || !refusedFor(rep, generate.MainRef, "", fdlsync.ReasonRewound) {
		t.Errorf("main moved B → A under a forged ancestor: exit %d, refused %+v, moved %+v; want main refused %s",
			res.code, rep.Refused, rep.RefsMoved, fdlsync.ReasonRewound)
	}
	if got := readRef(t, sink, generate.MainRef); got != b {
		t.Errorf("mirror's main moved to %s, want it left at B (%s)", got, b)
	}
	assertNotPublished(t, sink, x)
	assertVerifies(t, sink, flags...)
}

// Case 2. The record of files written without a barrier names a
// published data file (which upstream has since grown by 50 bytes) and
// the mirror's main (which upstream has rewound), with no size: neither
// is replayed, the data file keeps the bytes its catalog records, and
// main stays.
func TestSyncReplaysNeitherRefsNorUnconfirmedFilesFromTheUnsyncedRecord(t *testing.T) {
	_, up, sink := layout(t)
	g := genCopy(t, up, generate.Options{Versions: 2, FastParquet: true})
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("first sync: exit %d\n%s", res.code, res.stderr)
	}
	data := g.DataFiles[0]
	before, err := os.ReadFile(filepath.Join(sink, data))
	if err != nil {
		t.Fatal(err)
	}
	fdltest.Append(t, filepath.Join(up, data), make([]byte, 50))
	moveRef(t, up, generate.MainRef, g.Versions[0])
	names := []string{data, generate.MainRef, "refs.json", "HEAD", "versions/" + g.Versions[1] + "/version.json"}
	raw, _ := json.Marshal(map[string]any{"files": names})
	writeFile(t, filepath.Join(sink, backend.ReservedPrefix+fdlsync.UnsyncedFile), string(raw))

	rep, res := syncJSON(t, up, sink)
	if res.code != 1 || !refusedFor(rep, generate.MainRef, "", fdlsync.ReasonRewound) {
		t.Errorf("exit %d, refused %+v; want main refused %s", res.code, rep.Refused, fdlsync.ReasonRewound)
	}
	if got := readRef(t, sink, generate.MainRef); got != g.Versions[1] {
		t.Errorf("the record replayed upstream's rewound main into the mirror: main = %s", got)
	}
	after, _ := os.ReadFile(filepath.Join(sink, data))
	if string(after) != string(before) {
		t.Errorf("%s: %d bytes after the replay, the catalog records %d", data, len(after), len(before))
	}
	record := filepath.Join(sink, backend.ReservedPrefix+fdlsync.UnsyncedFile)
	if left, err := os.ReadFile(record); err == nil && strings.Contains(string(left), "refs/") {
		t.Errorf("the record still names refs after the run: %s", left)
	}
	assertVerifies(t, sink)

	// A record as this release writes it, with the size the catalog
	// records: the file is copied again only at that size, and upstream's
	// grown file is not.
	raw, _ = json.Marshal(map[string]any{"files": []map[string]any{{"name": data, "size": len(before)}}})
	writeFile(t, record, string(raw))
	if _, res = syncJSON(t, up, sink); res.code != 1 {
		t.Errorf("second sync: exit %d, want 1 (main still rewound upstream)", res.code)
	}
	after, _ = os.ReadFile(filepath.Join(sink, data))
	if string(after) != string(before) {
		t.Errorf("%s: %d bytes after the sized replay, the catalog records %d", data, len(after), len(before))
	}
	assertVerifies(t, sink)
}

// Case 3. Refusal messages carry at most about 1 KiB of upstream text, and
// a pending.json too large to read does not stop every run: it is set
// aside, the run goes on, and status still answers.
func TestSyncKeepsPendingSmallAndSurvivesAnOversizedOne(t *testing.T) {
	t.Run("a refusal with a 200 KB path", func(t *testing.T) {
		_, up, sink := layout(t)
		g := gen(t, up, generate.Options{Versions: 2, FastParquet: true})
		long := strings.Repeat("z", 200_000) + "/../x.parquet"
		rewriteCatalog(t, up, g.Versions[0], "UPDATE ducklake_data_file SET path = '"+long+"' WHERE data_file_id = (SELECT min(data_file_id) FROM ducklake_data_file)")
		rep, res := syncJSON(t, up, sink)
		if res.code != 1 || len(rep.Refused) == 0 {
			t.Fatalf("exit %d, refused %+v; want the bad path refused", res.code, rep.Refused)
		}
		for _, r := range rep.Refused {
			if len(r.Message) > 1200 {
				t.Errorf("a refusal message of %d bytes: %.200s…", len(r.Message), r.Message)
			}
		}
		st, err := os.Stat(filepath.Join(sink, backend.ReservedPrefix+fdlsink.PendingFile))
		if err == nil && st.Size() > 8<<10 {
			t.Errorf("pending.json: %d bytes; want at most 8 KiB", st.Size())
		}
		assertNotPublished(t, sink, g.Versions[0])
		assertVerifies(t, sink)
	})

	t.Run("a pending.json of 65 MiB", func(t *testing.T) {
		_, up, sink := layout(t)
		g := gen(t, up, generate.Options{Versions: 1, FastParquet: true})
		if res := run(t, "sync", up, sink); res.code != 0 {
			t.Fatalf("first sync: exit %d", res.code)
		}
		pending := filepath.Join(sink, backend.ReservedPrefix+fdlsink.PendingFile)
		writeFile(t, pending, "["+strings.Repeat(" ", 65<<20)+"]")
		next, err := generate.AddVersion(context.Background(), up, 1, generate.Options{FastParquet: true})
		if err != nil {
			t.Fatal(err)
		}
		res := run(t, "sync", up, sink)
		if res.code != 0 || readRef(t, sink, generate.MainRef) != next {
			t.Fatalf("sync with an oversized pending.json: exit %d, main %s (want %s)\n%s%s", res.code, readRef(t, sink, generate.MainRef), next, res.stdout, res.stderr)
		}
		assertSetAside(t, sink, fdlsink.PendingFile, res.stderr)
		if st := run(t, "status", up, sink); st.code != 0 {
			t.Errorf("status after: exit %d\n%s%s", st.code, st.stdout, st.stderr)
		}
		assertVerifies(t, sink)
		_ = g
	})

	t.Run("status of 2,000 pending versions with 1,500-byte messages", func(t *testing.T) {
		_, up, sink := layout(t)
		gen(t, up, generate.Options{Versions: 1, FastParquet: true})
		if res := run(t, "sync", up, sink); res.code != 0 {
			t.Fatalf("first sync: exit %d", res.code)
		}
		var list []fdlsync.PendingVersion
		for i := range 2000 {
			list = append(list, fdlsync.PendingVersion{Version: "0190" + itoa(100000+i), Reason: fdlsync.ReasonCatalog,
				Message: strings.Repeat("m", 1500), Since: time.Now()})
		}
		raw, _ := json.Marshal(list)
		writeFile(t, filepath.Join(sink, backend.ReservedPrefix+fdlsink.PendingFile), string(raw))
		st := run(t, "status", "--json", up, sink)
		if len(st.stdout) > 1500<<10 || st.code != 1 {
			t.Errorf("status --json: exit %d, %d bytes; want 1 (behind) and at most 1.5 MiB", st.code, len(st.stdout))
		}
		var out struct {
			Pending     []fdlsync.PendingVersion `json:"pending"`
			PendingMore int                      `json:"pending_more"`
		}
		if err := json.Unmarshal([]byte(st.stdout), &out); err != nil || len(out.Pending)+out.PendingMore != len(list) {
			t.Errorf("status --json lists %d pending versions and counts %d more, want %d in all (%v)", len(out.Pending), out.PendingMore, len(list), err)
		}
	})
}

// assertSetAside checks that a state file was moved aside under a dated
// name (and the move logged), not followed, read or left in place.
func assertSetAside(t *testing.T, sink, name, log string) {
	t.Helper()
	dir := filepath.Join(sink, backend.ReservedPrefix)
	entries, _ := os.ReadDir(dir)
	var aside []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), name+".") && e.Name() != name+".new" {
			aside = append(aside, e.Name())
		}
	}
	if len(aside) == 0 {
		t.Errorf("%s was not set aside under a dated name: %v", name, entries)
	}
	if !strings.Contains(log, name) || !strings.Contains(log, "set aside") {
		t.Errorf("setting %s aside is not logged:\n%s", name, log)
	}
}

// Case 5. A state file that is a symlink (to a file outside the mirror) or
// a FIFO is neither followed nor read: it is set aside and rebuilt, and
// the run goes on.
func TestSyncSetsAsideAStateFileThatIsNotARegularFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"a symlink outside the mirror", func(t *testing.T, path string) {
			outside := filepath.Join(t.TempDir(), "outside.json")
			writeFile(t, outside, `[{"version": "0190aaaa", "reason": "catalog", "message": "read through a symlink"}]`)
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"a FIFO", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, up, sink := layout(t)
			gen(t, up, generate.Options{Versions: 1, FastParquet: true})
			if res := run(t, "sync", up, sink); res.code != 0 {
				t.Fatalf("first sync: exit %d", res.code)
			}
			tc.plant(t, filepath.Join(sink, backend.ReservedPrefix+fdlsink.PendingFile))
			next, err := generate.AddVersion(context.Background(), up, 1, generate.Options{FastParquet: true})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res := runCtx(t, ctx, "sync", up, sink)
			if res.code != 0 || readRef(t, sink, generate.MainRef) != next {
				t.Fatalf("exit %d, main %s (want %s)\n%s%s", res.code, readRef(t, sink, generate.MainRef), next, res.stdout, res.stderr)
			}
			assertSetAside(t, sink, fdlsink.PendingFile, res.stderr)
			st := runCtx(t, ctx, "status", up, sink)
			if st.code != 0 || strings.Contains(st.stdout, "read through a symlink") {
				t.Errorf("status: exit %d\n%s%s", st.code, st.stdout, st.stderr)
			}
			assertVerifies(t, sink)
		})
	}
}

// Case 4. Prune removes nothing on evidence sync would not accept: (a) a
// listable upstream whose versions/ are gone while its refs still point
// there; (b) an HTTP upstream whose HEAD says 404 while GET serves the
// file.
func TestPruneRemovesNothingOnInconsistentUpstream(t *testing.T) {
	t.Run("refs point at versions the listing lacks", func(t *testing.T) {
		_, up, sink := layout(t)
		g := gen(t, up, generate.Options{Versions: 6, FastParquet: true})
		if res := run(t, "sync", up, sink); res.code != 0 {
			t.Fatalf("sync: exit %d", res.code)
		}
		if err := os.Rename(filepath.Join(up, "versions"), filepath.Join(up, "versions.moved")); err != nil {
			t.Fatal(err)
		}
		before := fdltest.States(t, sink)
		for _, args := range [][]string{{"--dry-run"}, {}} {
			rep, res := pruneJSON(t, append(args, up, sink)...)
			if res.code != 1 || !strings.Contains(res.stdout, generate.MainRef) || !strings.Contains(res.stdout, g.Versions[5]) {
				t.Errorf("prune %v: exit %d, plans %d removals; want exit 1 naming main's target %s\n%s", args, res.code, len(rep.VersionsRemoved), g.Versions[5], res.stdout)
			}
			if len(rep.VersionsRemoved) > 0 {
				t.Errorf("prune %v plans to remove %d versions", args, len(rep.VersionsRemoved))
			}
		}
		assertUntouched(t, sink, before, result{})
		assertVerifies(t, sink)
	})

	t.Run("HEAD answers 404, GET the file", func(t *testing.T) {
		_, up, sink := layout(t)
		g := gen(t, up, generate.Options{Versions: 6, FastParquet: true})
		web := testserver.HTTP(t, up)
		lying := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodHead {
				http.NotFound(w, r)
				return
			}
			web.ServeHTTP(w, r)
		}))
		t.Cleanup(lying.Close)
		src := lying.URL + "/"
		if res := run(t, "sync", src, sink); res.code != 0 || len(fdltest.Files(t, sink)) == 0 {
			t.Fatalf("sync through the lying server: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		before := fdltest.States(t, sink)
		rep, res := pruneJSON(t, src, sink)
		if len(rep.VersionsRemoved) > 0 {
			t.Errorf("prune removed %d of %d versions on HEAD's 404 (exit %d)", len(rep.VersionsRemoved), len(g.Versions), res.code)
		}
		assertUntouched(t, sink, before, res)
		assertVerifies(t, sink)
	})
}

// Case 6. Upstream marks X expired; main points at Y, X's child, which
// the mirror refuses (a damaged catalog), so every sync walks Y's
// ancestors again. Prune removes X, expired and named by no ref; sync
// must not copy it back. A ref that points at X itself still brings it.
func TestSyncDoesNotCopyBackAnExpiredAncestorPruneRemoved(t *testing.T) {
	_, up, sink := layout(t)
	g := gen(t, up, generate.Options{Versions: 2, FastParquet: true})
	x, y := g.Versions[0], g.Versions[1]
	catalog := filepath.Join(up, "versions", y, "ducklake.duckdb")
	good, err := os.ReadFile(catalog)
	if err != nil {
		t.Fatal(err)
	}
	fdltest.Append(t, catalog, []byte{0})
	writeFile(t, filepath.Join(up, "versions", x, "expired.json"), `{"expired": "2026-11-30"}`)
	for i, step := range []string{"sync", "prune", "sync"} {
		if step == "prune" {
			if _, res := pruneJSON(t, up, sink); res.code != 0 {
				t.Fatalf("prune: exit %d\n%s", res.code, res.stdout)
			}
			continue
		}
		rep, res := syncJSON(t, up, sink)
		if res.code != 1 || !refusedFor(rep, "", y, fdlsync.ReasonSHA256) {
			t.Fatalf("sync %d: exit %d, refused %+v; want %s refused", i, res.code, rep.Refused, y)
		}
	}
	if _, err := os.Stat(filepath.Join(sink, "versions", x, "version.json")); err == nil {
		t.Errorf("sync copied back %s, which upstream marks expired and prune removed", x)
	}
	if rep, res := pruneJSON(t, "--dry-run", up, sink); res.code != 0 || len(rep.VersionsRemoved) != 0 {
		t.Errorf("prune and sync still disagree: prune would remove %+v", rep.VersionsRemoved)
	}
	assertVerifies(t, sink)

	// Y repaired upstream: it is mirrored without its expired parent.
	writeFile(t, catalog, string(good))
	if res := run(t, "sync", up, sink); res.code != 0 || readRef(t, sink, generate.MainRef) != y {
		t.Fatalf("sync of the repaired Y: exit %d\n%s", res.code, res.stdout)
	}
	if _, err := os.Stat(filepath.Join(sink, "versions", x, "version.json")); err == nil {
		t.Errorf("sync copied the expired %s with its child", x)
	}
	assertVerifies(t, sink)

	// A ref that points at the expired version itself brings it.
	moveRef(t, up, "refs/tags/old", x)
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("sync with a tag on the expired version: exit %d\n%s", res.code, res.stdout)
	}
	if readRef(t, sink, "refs/tags/old") != x {
		t.Error("a tag on the expired version was not mirrored")
	}
	assertVerifies(t, sink)
}
