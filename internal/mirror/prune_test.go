package mirror_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlmirror "github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// A mirror of a repository without id, made from one address, is not
// pruned against another repository without id: every ref of the mirror
// would look withdrawn. Nothing is removed, and the message names both
// addresses.
func TestPruneRefusesAnotherSourceOfAMirrorWithoutID(t *testing.T) {
	parent := t.TempDir()
	a, b, sink := filepath.Join(parent, "a"), filepath.Join(parent, "b"), filepath.Join(parent, "mirror")
	for _, dir := range []string{a, b} {
		if _, err := generate.Generate(context.Background(), dir, generate.Options{Versions: 1, FilesPerVersion: 1, RowsPerFile: 5, FastParquet: true}); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, repo.SettingsFile)
		raw, _ := os.ReadFile(p)
		var doc map[string]any
		json.Unmarshal(raw, &doc)
		delete(doc, "id")
		raw, _ = json.Marshal(doc)
		os.WriteFile(p, raw, 0o644)
	}
	if _, err := fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: a, Sink: sink}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	rep, err := fdlmirror.Prune(context.Background(), fdlmirror.PruneJob{Stores: fdlmirror.Stores{Source: b, Sink: sink}}, nil)
	if err == nil || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) || !strings.Contains(err.Error(), "nothing removed") {
		t.Fatalf("prune against another source: %v", err)
	}
	if rep != nil && len(rep.Removed) > 0 {
		t.Errorf("removed %v", rep.Removed)
	}
	if _, err := os.Stat(filepath.Join(sink, "refs/heads/main")); err != nil {
		t.Errorf("main removed: %v", err)
	}
	if _, err := fdlmirror.Prune(context.Background(), fdlmirror.PruneJob{Stores: fdlmirror.Stores{Source: a, Sink: sink}}, nil); err != nil {
		t.Errorf("prune against the recorded source: %v", err)
	}
}
