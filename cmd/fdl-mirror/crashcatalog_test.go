package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// A catalog crafted to crash DuckDB (issue 25: bytes changed, block
// checksums and the record's sha256 mended) costs one version's refusal:
// sync exits 1 naming catalog-reader-failed, and mirrors the other refs.
func TestSyncRefusesAVersionWhoseCatalogCrashesItsReader(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, FastParquet: true})
	good, evil := repo.Versions[0], repo.Versions[1]
	writeFile(t, filepath.Join(up, "refs", "heads", "good"), good+"\n")
	fdltest.ReplaceCatalog(t, up, evil, fdltest.CrashingCatalog(t))

	rep, res := syncJSON(t, up, sink)
	if res.code != 1 {
		t.Fatalf("sync exited %d, want 1\n%s", res.code, res.stderr)
	}
	var refused *fdlsync.Refusal
	for i, r := range rep.Refused {
		if r.Reason == catalog.ReasonReaderFailed && r.Version == evil {
			refused = &rep.Refused[i]
		}
	}
	if refused == nil || !strings.Contains(refused.Message, "versions/"+evil+"/ducklake.duckdb") || !strings.Contains(refused.Message, "SIG") {
		t.Fatalf("no catalog-reader-failed refusal of %s naming its catalog and the signal: %+v", evil, rep.Refused)
	}
	assertNotPublished(t, sink, evil)
	if got := readRef(t, sink, "refs/heads/good"); got != good {
		t.Errorf("refs/heads/good is %q in the mirror, want %s", got, good)
	}
	if got := readRef(t, sink, generate.MainRef); got != "" {
		t.Errorf("main was published to %s", got)
	}
}

// The daemon serving an upstream whose catalog crashes its reader and a
// good one stays up, keeps the good one current, and shows the readers'
// layers in /metrics and /status.json.
func TestDaemonOutlivesACatalogThatCrashesItsReader(t *testing.T) {
	parent := t.TempDir()
	evil := testMirror{"evil", filepath.Join(parent, "up-evil"), filepath.Join(parent, "mirror-evil")}
	good := testMirror{"good", filepath.Join(parent, "up-good"), filepath.Join(parent, "mirror-good")}
	repoEvil := gen(t, evil.up, generate.Options{Versions: 1, FilesPerVersion: 2, FastParquet: true})
	fdltest.ReplaceCatalog(t, evil.up, repoEvil.Versions[0], fdltest.CrashingCatalog(t))
	optsGood := generate.Options{Versions: 1, FilesPerVersion: 2, FastParquet: true, Seed: 5}
	gen(t, good.up, optsGood)
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, addr, evil, good)

	d := startDaemon(t, configPath, addr)
	waitUntil(t, "a refused run of the evil mirror", 60*time.Second, func() bool {
		return scrape(t, addr)[`fdl_mirror_runs_total{mirror="evil",result="refused"}`] >= 2
	})
	// The good mirror follows a new upstream version while the evil one
	// keeps crashing a reader at every tick.
	id, err := generate.AddVersion(context.Background(), good.up, 2, optsGood)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the good mirror current", 60*time.Second, func() bool {
		return readRef(t, good.sink, generate.MainRef) == id
	})
	select {
	case <-d.exited:
		t.Fatalf("the daemon exited (%d)", d.code)
	default:
	}
	m := scrape(t, addr)
	for _, layer := range []string{"landlock", "seccomp"} {
		if v, ok := m[fmt.Sprintf(`fdl_mirror_catalog_sandbox{layer="%s"}`, layer)]; !ok || v != 1 {
			t.Errorf("fdl_mirror_catalog_sandbox{layer=%q} is %v (present %v), want 1 on this kernel", layer, v, ok)
		}
	}
	if v, ok := m["fdl_mirror_catalog_sandbox_landlock_abi"]; !ok || int(v) != catalog.ProbeSandbox().LandlockABI {
		t.Errorf("fdl_mirror_catalog_sandbox_landlock_abi is %v (present %v), want %d", v, ok, catalog.ProbeSandbox().LandlockABI)
	}
	_, body := httpGet("http://" + addr + "/status.json")
	var st struct {
		Mirrors []struct {
			Mirror  string                `json:"mirror"`
			Sandbox catalog.SandboxStatus `json:"catalog_sandbox"`
			LastRun *struct {
				Refused []fdlsync.Refusal `json:"refused"`
			} `json:"last_run"`
		} `json:"mirrors"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status.json: %v", err)
	}
	found := false
	for _, ms := range st.Mirrors {
		if !ms.Sandbox.Landlock || !ms.Sandbox.Seccomp || len(ms.Sandbox.Missing) != 0 || ms.Sandbox.LandlockABI < 1 || ms.Sandbox.LandlockNeeded != 1 {
			t.Errorf("/status.json catalog_sandbox of %s: %+v", ms.Mirror, ms.Sandbox)
		}
		// The readers run the reader binary built beside the mirror's
		// (TestMain).
		if want, _ := filepath.EvalSymlinks(filepath.Join(filepath.Dir(binary), catalog.ReaderProgram)); ms.Sandbox.Reader != want || ms.Sandbox.ReaderNote != "" {
			t.Errorf("/status.json catalog_sandbox of %s: readers run %q (%s), want %s", ms.Mirror, ms.Sandbox.Reader, ms.Sandbox.ReaderNote, want)
		}
		if ms.Mirror == "evil" && ms.LastRun != nil {
			for _, r := range ms.LastRun.Refused {
				found = found || r.Reason == catalog.ReasonReaderFailed
			}
		}
	}
	if !found {
		t.Errorf("/status.json shows no catalog-reader-failed refusal of the evil mirror: %s", body)
	}
	assertNotPublished(t, evil.sink, repoEvil.Versions[0])
	if code, _ := d.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
}
