package lock_test

import (
	"context"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// A state file written, removed or set aside through a store that writes
// nothing (backend.ReadOnly, as a dry run opens its sink) leaves the disk
// as it was: the write goes to that store, which refuses it, never past it
// to the folder underneath. Reads still reach the folder.
func TestStateWritesThroughAStoreThatWritesNothingChangeNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := localStore(t, dir)
	if err := lock.WriteState(ctx, l, "pending.json", []byte("before")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	ro := backend.ReadOnly(l)
	if err := lock.WriteState(ctx, ro, "pending.json", []byte("after")); err == nil {
		t.Error("WriteState through a read-only store succeeded")
	}
	if err := lock.WriteState(ctx, ro, "unsynced.json", []byte("new")); err == nil {
		t.Error("WriteState of a new file through a read-only store succeeded")
	}
	if err := lock.RemoveState(ctx, ro, "pending.json"); err == nil {
		t.Error("RemoveState through a read-only store succeeded")
	}
	if aside, err := lock.SetAside(ctx, ro, "pending.json"); err == nil {
		t.Errorf("SetAside through a read-only store succeeded: %s", aside)
	}
	if after := snapshot(t, dir); !maps.Equal(before, after) {
		t.Errorf("the folder changed through a read-only store:\nbefore %v\nafter  %v", before, after)
	}
	if got, err := lock.ReadState(ctx, ro, "pending.json", 100); err != nil || string(got) != "before" {
		t.Errorf("ReadState through a read-only store = %q, %v", got, err)
	}
	// Through a store that writes, the same calls change the folder.
	if err := lock.WriteState(ctx, l, "pending.json", []byte("after")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(backend.ReservedPrefix+"pending.json"))); string(got) != "after" {
		t.Errorf("WriteState through the store itself left %q", got)
	}
}

// snapshot is every file under dir with its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(p)
		files[p] = string(raw)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
