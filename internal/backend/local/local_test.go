package local_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/backendtest"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/powercut"
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

// A power cut under the store (internal/fstest/powercut) takes only what
// no barrier covered: files written under WithoutSync before the Barrier
// and files written durably keep their bytes.
func TestPowerCutTakesOnlyWhatNoBarrierCovered(t *testing.T) {
	dir := t.TempDir()
	l := create(t, dir)
	ctx := context.Background()
	sink := powercut.New(l, dir, 0, func() {})
	dctx := backend.WithoutSync(ctx)
	write := func(ctx context.Context, name string) {
		t.Helper()
		if err := sink.Put(ctx, name, strings.NewReader("content of "+name), int64(len("content of "+name))); err != nil {
			t.Fatal(err)
		}
	}
	write(dctx, "data/before-barrier.parquet")
	barrier, _ := backend.As[backend.Barrier](sink)
	if err := barrier.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	write(dctx, "data/after-barrier.parquet")
	write(ctx, "versions/v/version.json")
	damage, err := sink.Cut(powercut.Zeroed)
	if err != nil {
		t.Fatal(err)
	}
	if len(damage) != 1 || damage["data/after-barrier.parquet"] != powercut.Zeroed {
		t.Fatalf("the cut did %v; want only data/after-barrier.parquet zeroed", damage)
	}
	for _, name := range []string{"data/before-barrier.parquet", "versions/v/version.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != "content of "+name {
			t.Fatalf("%s after the cut: %q, %v", name, b, err)
		}
	}
	if err := sink.Put(ctx, "refs/heads/main", strings.NewReader("x"), 1); !errors.Is(err, powercut.ErrPowerCut) {
		t.Fatalf("a write after the cut: %v", err)
	}
}
