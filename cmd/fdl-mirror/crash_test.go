package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// A sync killed with SIGKILL at any moment leaves every ref in the mirror
// pointing at a complete version, never blocks the next run, and a final
// sync finishes the mirror.
func TestSyncKilledAtRandomMomentsLeavesEveryRefComplete(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	_, up, sink := layout(t)
	opts := generate.Options{Versions: 12, FilesPerVersion: 200, RowsPerFile: 10, Tags: true, FastParquet: true}
	gen(t, up, opts)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	t.Logf("upstream has %d files", len(fdltest.Names(t, up)))

	// Kill moments are drawn from a window that starts at half a whole
	// sync's length (measured on a scratch mirror) and halves whenever a
	// run ends before its kill; upstream grows by a new version every few
	// rounds. So nearly every kill lands mid-run, however fast the disk.
	start := time.Now()
	if res := run(t, "sync", "--log-level", "error", "--concurrency", "4", up, t.TempDir()); res.code != 0 {
		t.Fatalf("timing sync: exit %d", res.code)
	}
	full := time.Since(start)
	window := full / 2
	kills := 0
	for i := 0; i < 25; i++ {
		if i%3 == 2 {
			if _, err := generate.AddVersion(context.Background(), up, 150, opts); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(binary, "sync", "--log-level", "error", "--concurrency", "4", up, sink)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		delay := time.Duration(rng.Int64N(int64(window))) + 2*time.Millisecond
		select {
		case <-exited:
			window = max(window/2, 10*time.Millisecond)
		case <-time.After(delay):
			cmd.Process.Kill()
			<-exited
			kills++
		}
		if _, err := os.Stat(filepath.Join(sink, "fdl.json")); err != nil {
			continue // killed before anything was written
		}
		if p := fdltest.Complete(t, sink); len(p) > 0 {
			t.Fatalf("after kill %d (at %s): refs to incomplete versions: %v", i, delay, p)
		}
		assertAncestorsBehind(t, sink)
	}
	t.Logf("%d syncs killed mid-run (a whole sync takes %s)", kills, full)
	if kills < 10 {
		t.Errorf("only %d of 25 syncs were killed mid-run", kills)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if res := runCtx(t, ctx, "sync", up, sink); res.code != 0 {
		t.Fatalf("final sync: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	fdltest.AssertMirrored(t, up, sink, nil)
	if p := fdltest.Complete(t, sink); len(p) > 0 {
		t.Fatalf("final mirror: %v", p)
	}
}

// assertAncestorsBehind checks that every version complete in a mirror has
// its parents complete too: a later run treats a complete version as a
// leaf, so a parent missing now would be missing for good.
func assertAncestorsBehind(t *testing.T, sink string) {
	t.Helper()
	for _, id := range published(t, sink) {
		raw, err := os.ReadFile(filepath.Join(sink, "versions", id, "version.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rec struct{ Parents []string }
		json.Unmarshal(raw, &rec)
		for _, p := range rec.Parents {
			if _, err := os.Stat(filepath.Join(sink, "versions", p, "version.json")); err != nil {
				t.Fatalf("version %s is complete in the mirror but its parent %s is not", id, p)
			}
		}
	}
}
