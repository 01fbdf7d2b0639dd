package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// Beside --config, a flag the command does not read is refused by name
// before anything runs: each mirror's settings come from the file, and a
// flag dropped without a word would run other settings than asked for.
func TestConfigRefusesFlagsItDoesNotRead(t *testing.T) {
	_, up, sink := layout(t)
	gen(t, up, generate.Options{Versions: 1})
	cfg := filepath.Join(t.TempDir(), "fdl-mirror.yaml")
	writeFile(t, cfg, "mirrors:\n  - name: m\n    source: "+up+"\n    sink: "+sink+"\n")
	for _, tc := range []struct {
		args, unread []string
	}{
		{[]string{"sync", "--config", cfg, "--concurrency", "2", "--http-header", "X-A: b", "--catalog-timeout", "5s"},
			[]string{"--concurrency", "--http-header", "--catalog-timeout"}},
		{[]string{"sync", "--config", cfg, "--dry-run", "--lock-wait", "1s"}, []string{"--lock-wait"}},
		{[]string{"prune", "--config", cfg, "--retries", "3"}, []string{"--retries"}},
		{[]string{"status", "--config", cfg, "--ca-file", "/nonexistent.pem"}, []string{"--ca-file"}},
	} {
		res := run(t, tc.args...)
		if res.code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s%s", tc.args, res.code, exitUsage, res.stdout, res.stderr)
		}
		for _, f := range tc.unread {
			if !strings.Contains(res.stderr, f) {
				t.Errorf("%v: the refusal does not name %s:\n%s", tc.args, f, res.stderr)
			}
		}
		if strings.Contains(res.stderr, "--config,") || strings.Contains(res.stderr, "--dry-run") {
			t.Errorf("%v: the refusal names a flag that is read:\n%s", tc.args, res.stderr)
		}
		if _, err := os.Stat(sink); !os.IsNotExist(err) {
			t.Fatalf("%v: the sink was made: %v", tc.args, err)
		}
	}
}

// sync --config --repair repairs each mirror of the config, as sync
// --repair does one: a refusal that names --repair must work with the
// config the operator runs.
func TestSyncConfigRepairCopiesBackALostDataFile(t *testing.T) {
	_, up, sink := layout(t)
	g := genCopy(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 10, FastParquet: true})
	cfg := filepath.Join(t.TempDir(), "fdl-mirror.yaml")
	writeFile(t, cfg, "mirrors:\n  - name: m\n    source: "+up+"\n    sink: "+sink+"\n")
	if res := run(t, "sync", "--config", cfg); res.code != 0 {
		t.Fatalf("sync --config: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	lost := filepath.Join(sink, g.DataFiles[0])
	if err := os.Remove(lost); err != nil {
		t.Fatal(err)
	}
	if res := run(t, "sync", "--config", cfg, "--repair"); res.code != 0 {
		t.Fatalf("sync --config --repair: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if _, err := os.Stat(lost); err != nil {
		t.Errorf("after sync --config --repair: %v", err)
	}
	if res := run(t, "verify", sink); res.code != 0 {
		t.Errorf("verify: exit %d\n%s", res.code, res.stdout)
	}
}
