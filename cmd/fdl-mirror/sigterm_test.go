package main

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// A sync stopped by SIGTERM in the middle of a run, then an upstream
// change: the versions the stopped run had started but not published are
// replaced upstream (new catalog bytes, new sha256), and a version is
// added. The next sync publishes each version with the catalog its record
// names, never the one the stopped run left (issue 10); sync and verify
// agree on the mirror.
func TestSyncAfterSIGTERMAndAnUpstreamChange(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode")
	}
	_, up, sink := layout(t)
	opts := generate.Options{Versions: 6, FilesPerVersion: 120, RowsPerFile: 10, ExtraFiles: true, FastParquet: true}
	gen(t, up, opts)
	start := time.Now()
	if res := run(t, "sync", "--log-level", "error", up, t.TempDir()); res.code != 0 {
		t.Fatalf("timing sync: exit %d", res.code)
	}
	full := time.Since(start)

	// Stop a sync part way, until one leaves a version folder with its
	// catalog but no version.json (what an upstream change makes stale).
	var partial []string
	for attempt := 0; attempt < 6 && len(partial) == 0; attempt++ {
		os.RemoveAll(sink)
		cmd := exec.Command(binary, "sync", "--log-level", "error", "--concurrency", "2", up, sink)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(full * time.Duration(3+attempt) / 10)
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if _, err := os.Stat(filepath.Join(sink, "fdl.json")); err == nil {
			if p := fdltest.Complete(t, sink); len(p) > 0 {
				t.Fatalf("after SIGTERM: %v", p)
			}
		}
		entries, _ := os.ReadDir(filepath.Join(sink, "versions"))
		for _, e := range entries {
			dir := filepath.Join(sink, "versions", e.Name())
			_, errRec := os.Stat(filepath.Join(dir, "version.json"))
			_, errCat := os.Stat(filepath.Join(dir, "ducklake.duckdb"))
			if errRec != nil && errCat == nil {
				partial = append(partial, e.Name())
			}
		}
	}
	if len(partial) == 0 {
		t.Log("no SIGTERM left a catalog without version.json; checking the rest")
	}
	for _, id := range partial {
		cat := filepath.Join(up, "versions", id, "ducklake.duckdb")
		db, err := sql.Open("duckdb", cat)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("UPDATE ducklake_snapshot SET snapshot_time = snapshot_time + INTERVAL 1 SECOND"); err != nil {
			t.Fatal(err)
		}
		db.Exec("CHECKPOINT")
		db.Close()
		rewriteCatalog(t, up, id, "SELECT 1") // fixes the record's sha256
	}
	if _, err := generate.AddVersion(context.Background(), up, 20, opts); err != nil {
		t.Fatal(err)
	}
	if res := run(t, "sync", "--log-level", "error", up, sink); res.code != 0 {
		t.Fatalf("sync after the change: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if res := run(t, "verify", sink); res.code != 0 {
		t.Fatalf("verify after the sync: exit %d\n%s", res.code, res.stdout)
	}
	fdltest.AssertMirrored(t, up, sink, nil)
	t.Logf("versions replaced upstream after the SIGTERM: %v", partial)
}
