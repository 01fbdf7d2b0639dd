package local_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/backendtest"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
)

func create(t *testing.T, dir string) *local.Local {
	t.Helper()
	l, err := local.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend { return create(t, t.TempDir()) })
}

func TestConformanceReader(t *testing.T) {
	backendtest.RunReader(t, func(t *testing.T, files map[string][]byte) backend.Reader {
		dir := t.TempDir()
		for name, content := range files {
			p := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		l, err := local.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	})
}

// The folder keeps its own files (temporary files, the lock) under
// backend.ReservedPrefix; they are never listed and cannot be written
// through the store.
func TestReservedFilesNotListedNorWritable(t *testing.T) {
	dir := t.TempDir()
	l := create(t, dir)
	if err := os.WriteFile(filepath.Join(dir, local.TempDir, "left-by-a-killed-run"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".fdl-mirror", "lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var listed []string
	for _, prefix := range []string{"", backend.ReservedPrefix, local.TempDir + "/"} {
		if err := l.List(ctx, prefix, func(fi backend.FileInfo) error {
			listed = append(listed, fi.Name)
			return nil
		}); err != nil {
			t.Fatalf("List %q: %v", prefix, err)
		}
	}
	if len(listed) != 0 {
		t.Fatalf("listed the store's own files: %v", listed)
	}
	err := l.Put(ctx, backend.ReservedPrefix+"lock", nil, 0)
	if err == nil {
		t.Fatalf("Put into %s succeeded", backend.ReservedPrefix)
	}
}
