package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// dropID rewrites a repository's fdl.json without its id.
func dropID(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, repo.SettingsFile)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "id")
	raw, _ = json.Marshal(doc)
	writeFile(t, p, string(raw))
}

// A second repository without id into a sink made from another: exit 1,
// a message naming both addresses and --force; with --force the run goes
// on (and here still exits 1: main diverged, which --force does not
// bypass).
func TestSyncFromAnotherSourceWithoutIDExitsOneNamingForce(t *testing.T) {
	parent, a, sink := layout(t)
	b := filepath.Join(parent, "other")
	gen(t, a, generate.Options{Versions: 1})
	gen(t, b, generate.Options{Versions: 1})
	dropID(t, a)
	dropID(t, b)
	if res := run(t, "sync", a, sink); res.code != 0 {
		t.Fatalf("first sync: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res := run(t, "sync", b, sink)
	if res.code != 1 {
		t.Fatalf("sync from another source: exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
	}
	out := res.stdout + res.stderr
	for _, want := range []string{a, b, "--force", ".fdl-mirror/source.json"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not name %q:\n%s", want, out)
		}
	}
	res = run(t, "sync", "--force", b, sink)
	if res.code != 1 || !strings.Contains(res.stdout, "REFUSED [diverged]") || strings.Contains(res.stdout+res.stderr, "refusing to merge") {
		t.Errorf("sync --force: exit %d, want 1 with main refused as diverged\n%s%s", res.code, res.stdout, res.stderr)
	}
}
