package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// sync --config --dry-run is a dry run of each mirror of the config: it
// writes nothing, and a local sink that does not exist stays missing.
func TestSyncConfigDryRunWritesNothing(t *testing.T) {
	_, up, sink := layout(t)
	genCopy(t, up, generate.Options{Versions: 1})
	cfg := filepath.Join(t.TempDir(), "fdl-mirror.yaml")
	writeFile(t, cfg, "mirrors:\n  - name: m\n    source: "+up+"\n    sink: "+sink+"\n")
	res := run(t, "sync", "--config", cfg, "--dry-run")
	if res.code != 0 {
		t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if _, err := os.Stat(sink); !os.IsNotExist(err) {
		t.Errorf("sync --config --dry-run made the sink: %v\n%s", err, res.stdout)
	}
}

// prune --dry-run of a local mirror makes no temporary folder in it.
func TestPruneDryRunMakesNoTemporaryFolder(t *testing.T) {
	_, up, sink := prunedScenario(t)
	if err := os.RemoveAll(filepath.Join(sink, ".fdl-mirror", "tmp")); err != nil {
		t.Fatal(err)
	}
	if res := run(t, "prune", "--dry-run", up, sink); res.code != 0 {
		t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(sink, ".fdl-mirror", "tmp")); !os.IsNotExist(err) {
		t.Errorf("prune --dry-run made .fdl-mirror/tmp: %v", err)
	}
}
