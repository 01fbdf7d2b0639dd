package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
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
	g := gen(t, up, generate.Options{Versions: 2, FastParquet: true})
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
