package sync_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// lockCounter is an Options.Lock that counts how often the run asks.
type lockCounter struct{ taken, released int }

func (l *lockCounter) lock(ctx context.Context) (context.Context, func(), error) {
	l.taken++
	return ctx, func() { l.released++ }, nil
}

// A run takes the mirror's lock only when it has something to write, and
// releases it at its end.
func TestRunLocksOnlyWhenItHasSomethingToWrite(t *testing.T) {
	ctx := context.Background()
	up, sinkDir := t.TempDir(), t.TempDir()
	if _, err := generate.Generate(ctx, up, generate.Options{Versions: 2}); err != nil {
		t.Fatal(err)
	}
	src, _ := local.Open(up)
	dst, _ := local.Create(sinkDir)
	run := func() *lockCounter {
		t.Helper()
		l := &lockCounter{}
		rep, err := syncStores(ctx, src, dst, fdlsync.Options{Lock: l.lock})
		if err != nil || !rep.OK() {
			t.Fatalf("run: %v %+v", err, rep)
		}
		return l
	}
	if l := run(); l.taken != 1 || l.released != 1 {
		t.Errorf("first mirror: lock taken %d, released %d; want 1, 1", l.taken, l.released)
	}
	if l := run(); l.taken != 0 {
		t.Errorf("a run with nothing new took the lock %d times", l.taken)
	}
	if _, err := generate.AddVersion(ctx, up, 1, generate.Options{}); err != nil {
		t.Fatal(err)
	}
	if l := run(); l.taken != 1 || l.released != 1 {
		t.Errorf("a new version: lock taken %d, released %d; want 1, 1", l.taken, l.released)
	}
	fdltest.AssertMirrored(t, up, sinkDir, nil)
}

// A lock that cannot be had stops the run before anything is written.
func TestRunThatCannotLockWritesNothing(t *testing.T) {
	ctx := context.Background()
	up, sinkDir := t.TempDir(), t.TempDir()
	if _, err := generate.Generate(ctx, up, generate.Options{Versions: 1}); err != nil {
		t.Fatal(err)
	}
	src, _ := local.Open(up)
	dst, _ := local.Create(sinkDir)
	held := errors.New("held by another run")
	_, err := syncStores(ctx, src, dst, fdlsync.Options{Lock: func(context.Context) (context.Context, func(), error) {
		return nil, nil, held
	}})
	if !errors.Is(err, held) {
		t.Fatalf("err %v, want the lock's error", err)
	}
	if files := fdltest.Files(t, sinkDir); len(files) != 0 {
		t.Errorf("wrote %d files without the lock", len(files))
	}
}

// A lock lost mid-run stops it at a safe point, with an error saying so.
func TestRunStopsWhenItLosesTheLock(t *testing.T) {
	ctx := context.Background()
	up, sinkDir := t.TempDir(), t.TempDir()
	if _, err := generate.Generate(ctx, up, generate.Options{Versions: 3, FilesPerVersion: 50, FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	src, _ := local.Open(up)
	dst, _ := local.Create(sinkDir)
	_, err := syncStores(ctx, src, dst, fdlsync.Options{Lock: func(ctx context.Context) (context.Context, func(), error) {
		lost, cancel := context.WithCancel(ctx)
		cancel() // lost at once
		return lost, func() {}, nil
	}})
	if err == nil || !strings.Contains(err.Error(), "lost the mirror's lock") {
		t.Fatalf("err %v, want one saying the lock was lost", err)
	}
	if _, err := os.Stat(filepath.Join(sinkDir, "fdl.json")); err != nil {
		return // stopped before anything was written
	}
	if p := fdltest.Complete(t, sinkDir); len(p) > 0 {
		t.Errorf("refs to incomplete versions after losing the lock: %v", p)
	}
}
