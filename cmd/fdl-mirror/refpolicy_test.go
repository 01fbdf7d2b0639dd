package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// moveRef points an upstream ref at id (ref file and refs.json).
func moveRef(t *testing.T, up, ref, id string) {
	t.Helper()
	writeFile(t, filepath.Join(up, filepath.FromSlash(ref)), id+"\n")
	refs := repo.Refs{}
	_ = filepath.WalkDir(filepath.Join(up, "refs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(up, p)
			refs[filepath.ToSlash(rel)] = readRef(t, up, filepath.ToSlash(rel))
		}
		return nil
	})
	writeFile(t, filepath.Join(up, repo.RefsFile), string(repo.RefsJSON(refs)))
}

func TestSyncRefusesARewoundBranchUnlessAllowed(t *testing.T) {
	_, up, sink := layout(t)
	g := genCopy(t, up, generate.Options{Versions: 3, FastParquet: true})
	if _, res := syncJSON(t, up, sink); res.code != 0 {
		t.Fatalf("first sync exit %d: %s", res.code, res.stderr)
	}
	moveRef(t, up, generate.MainRef, g.Versions[0])

	rep, res := syncJSON(t, up, sink)
	if res.code != 1 || len(rep.Refused) != 1 || rep.Refused[0].Reason != fdlsync.ReasonRewound {
		t.Fatalf("exit %d, refused %+v; want exit 1 and main refused as rewound", res.code, rep.Refused)
	}
	if got := readRef(t, sink, generate.MainRef); got != g.Versions[2] {
		t.Fatalf("mirror's main moved to %s", got)
	}
	st := run(t, "status", "--json", up, sink)
	var out struct {
		Refs []fdlsync.RefStatus `json:"refs"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &out); err != nil || st.code != 1 {
		t.Fatalf("status exit %d: %v\n%s", st.code, err, st.stdout)
	}
	if len(out.Refs) != 1 || out.Refs[0].State != fdlsync.RefRewound {
		t.Errorf("status refs = %+v, want main rewound", out.Refs)
	}

	rep, res = syncJSON(t, "--allow-rewind", up, sink)
	if res.code != 0 || len(rep.RefsMoved) != 1 || rep.RefsMoved[0].Rewound != "rewound" {
		t.Fatalf("--allow-rewind: exit %d, moved %+v", res.code, rep.RefsMoved)
	}
	if got := readRef(t, sink, generate.MainRef); got != g.Versions[0] {
		t.Errorf("mirror's main = %s, want %s", got, g.Versions[0])
	}
}

func TestSyncRefsSelectsTagsOnly(t *testing.T) {
	_, up, sink := layout(t)
	g := gen(t, up, generate.Options{Versions: 2, Tags: true, FastParquet: true})
	if _, res := syncJSON(t, "--refs", "refs/tags/*", up, sink); res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if readRef(t, sink, generate.MainRef) != "" || readRef(t, sink, "refs/tags/v2") != g.Versions[1] {
		t.Error("a tags-only mirror has main, or lacks the tags")
	}
	if res := run(t, "sync", "--refs", "refs/heads/a**", up, sink); res.code != 2 || !strings.Contains(res.stderr, "refs/heads/a**") {
		t.Errorf("a bad pattern: exit %d, %s", res.code, res.stderr)
	}
}

func TestStatusSaysAFrozenUpstreamIsStale(t *testing.T) {
	parent, up, sink := layout(t)
	gen(t, up, generate.Options{Versions: 1, FastParquet: true})
	if _, res := syncJSON(t, up, sink); res.code != 0 {
		t.Fatalf("sync exit %d: %s", res.code, res.stderr)
	}
	config := func(name, maxAge string) string {
		cfg := filepath.Join(parent, name)
		writeFile(t, cfg, fmt.Sprintf("mirrors:\n  - name: towns\n    source: %s\n    sink: %s\n    max_upstream_age: %s\n", up, sink, maxAge))
		return cfg
	}

	// Current and changed within max_upstream_age: not stale. The age is
	// an hour here, not the 1s below, so a slow machine (or -race) that
	// takes over a second between the sync and this status does not
	// make the fresh mirror stale.
	if res := run(t, "status", "--config", config("fresh.yaml", "1h")); res.code != 0 {
		t.Fatalf("fresh mirror: status exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	cfg := config("fdl-mirror.yaml", "1s")
	time.Sleep(1500 * time.Millisecond) // past max_upstream_age; nothing changes upstream
	res := run(t, "status", "--json", "--config", cfg)
	var out struct {
		Behind             bool      `json:"behind"`
		UpstreamStale      bool      `json:"upstream_stale"`
		UpstreamLastChange time.Time `json:"upstream_last_change"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatal(err, res.stdout)
	}
	if res.code != 1 || !out.UpstreamStale || out.Behind || out.UpstreamLastChange.IsZero() {
		t.Errorf("frozen upstream: exit %d, %+v; want exit 1, stale, not behind", res.code, out)
	}
	if txt := run(t, "status", "--config", cfg); !strings.Contains(txt.stdout, "upstream stale") {
		t.Errorf("status text does not say stale:\n%s", txt.stdout)
	}
}
