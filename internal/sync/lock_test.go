package sync_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
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

// refLists is a store that counts its listings of refs/.
type refLists struct {
	backend.Backend
	n atomic.Int32
}

func (r *refLists) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	if prefix == repo.RefsDir {
		r.n.Add(1)
	}
	return r.Backend.List(ctx, prefix, fn)
}

func (r *refLists) Unwrap() backend.Reader { return r.Backend }

// A run whose upstream's refs.json says refs moved since the mirror last
// saw them takes the lock first and lists refs/ once on each side, under
// the lock, instead of once before it and again under it (issue 43: each
// is 21 requests and a second of the gateway's CPU at 20,000 refs). A run
// with nothing new lists each side once and takes no lock; where
// refs.json is stale, the ref files still decide, read before the lock
// and again under it.
func TestRunWithRefsMovedListsRefsOnceEachSide(t *testing.T) {
	ctx := context.Background()
	up, sinkDir := t.TempDir(), t.TempDir()
	if _, err := generate.Generate(ctx, up, generate.Options{Versions: 2}); err != nil {
		t.Fatal(err)
	}
	srcStore, _ := local.Open(up)
	dstStore, _ := local.Create(sinkDir)
	type result struct {
		rep                *fdlsync.Report
		srcLists, dstLists int32
		taken              int
	}
	run := func() result {
		t.Helper()
		src, dst := &refLists{Backend: srcStore}, &refLists{Backend: dstStore}
		l := &lockCounter{}
		rep, err := syncStores(ctx, src, dst, fdlsync.Options{Lock: l.lock})
		if err != nil || !rep.OK() {
			t.Fatalf("run: %v %+v", err, rep)
		}
		if l.released != l.taken {
			t.Errorf("lock taken %d times, released %d", l.taken, l.released)
		}
		return result{rep, src.n.Load(), dst.n.Load(), l.taken}
	}
	// The first mirror: no state yet, and an empty sink.
	if r := run(); r.taken != 1 || r.srcLists != 1 || r.dstLists != 1 {
		t.Errorf("first mirror: lock taken %d, refs/ listed %d upstream and %d in the sink; want 1, 1, 1", r.taken, r.srcLists, r.dstLists)
	}
	if r := run(); r.taken != 0 || r.srcLists != 1 || r.dstLists != 1 {
		t.Errorf("no-op: lock taken %d, refs/ listed %d upstream and %d in the sink; want 0, 1, 1", r.taken, r.srcLists, r.dstLists)
	}
	id, err := generate.AddVersion(ctx, up, 1, generate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := run()
	if r.taken != 1 || r.srcLists != 1 || r.dstLists != 1 {
		t.Errorf("a new version: lock taken %d, refs/ listed %d upstream and %d in the sink; want 1, 1, 1", r.taken, r.srcLists, r.dstLists)
	}
	if len(r.rep.RefsMoved) != 1 || r.rep.RefsMoved[0].To != id {
		t.Errorf("a new version: refs moved %+v, want main to %s", r.rep.RefsMoved, id)
	}
	fdltest.AssertMirrored(t, up, sinkDir, nil)

	// refs.json left as it was while refs/heads/main moves: the hint says
	// nothing moved, and the listings find the move, before the lock and
	// again under it.
	stale, err := os.ReadFile(filepath.Join(up, repo.RefsFile))
	if err != nil {
		t.Fatal(err)
	}
	if id, err = generate.AddVersion(ctx, up, 1, generate.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(up, repo.RefsFile), stale, 0o644); err != nil {
		t.Fatal(err)
	}
	r = run()
	if r.taken != 1 || r.srcLists != 2 || r.dstLists != 2 {
		t.Errorf("stale refs.json: lock taken %d, refs/ listed %d upstream and %d in the sink; want 1, 2, 2", r.taken, r.srcLists, r.dstLists)
	}
	if len(r.rep.RefsMoved) != 1 || r.rep.RefsMoved[0].To != id {
		t.Errorf("stale refs.json: refs moved %+v, want main to %s", r.rep.RefsMoved, id)
	}
}

// refGoesAfterListing is a mirror in which, once armed, another run
// removes a tag and refs.json just after this run has listed refs/ and
// before it reads the ref files: what a prune of a withdrawn tag by a
// second daemon replica, holding the lock, did to a replica's run reading
// the mirror without it (TestTwoDaemonReplicasPruneObjectStoreMirrorsAndEndClean,
// on fake-gcs-server, failed so).
type refGoesAfterListing struct {
	backend.Backend
	tag   string
	armed atomic.Bool
	went  atomic.Bool
}

func (r *refGoesAfterListing) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	err := r.Backend.List(ctx, prefix, fn)
	if err == nil && prefix == repo.RefsDir && r.armed.CompareAndSwap(true, false) {
		for _, name := range []string{r.tag, repo.RefsFile} {
			if err := r.Backend.Remove(ctx, name); err != nil {
				return err
			}
		}
		r.went.Store(true)
	}
	return err
}

func (r *refGoesAfterListing) Unwrap() backend.Reader { return r.Backend }

// A file of the mirror that goes between the listing and the read of a
// run reading without the lock is another run's write, which the lock
// orders: the run takes the lock and reads the mirror again under it,
// instead of failing.
func TestRunReadsTheMirrorAgainUnderTheLockWhereAFileWent(t *testing.T) {
	ctx := context.Background()
	up, _ := manyRefs(t, 3)
	sinkDir := t.TempDir()
	dst, err := local.Create(sinkDir)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	mirror := &refGoesAfterListing{Backend: dst, tag: "refs/tags/t0001"}
	src := mustOpen(t, up)
	if rep, err := syncStores(ctx, src, mirror, fdlsync.Options{Lock: (&lockCounter{}).lock}); err != nil || !rep.OK() {
		t.Fatalf("first mirror: %v %+v", err, rep)
	}
	// Withdrawn upstream (its refs.json, which lists no tag, unchanged:
	// the run reads both sides before it takes the lock), and removed
	// from the mirror by another run while this one reads it.
	if err := os.Remove(filepath.Join(up, filepath.FromSlash(mirror.tag))); err != nil {
		t.Fatal(err)
	}
	mirror.armed.Store(true)
	l := &lockCounter{}
	rep, err := syncStores(ctx, src, mirror, fdlsync.Options{Lock: l.lock})
	if !mirror.went.Load() {
		t.Fatal("the tag was not removed between the run's listing and its read")
	}
	if err != nil || !rep.OK() {
		t.Fatalf("a run whose mirror lost a tag while it read it: %v %+v", err, rep)
	}
	if l.taken != 1 || l.released != 1 {
		t.Errorf("lock taken %d, released %d; want 1, 1 (the mirror read again under it)", l.taken, l.released)
	}
	upRefs, _, err := repo.ReadRefs(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	mirRefs, _, err := repo.ReadRefs(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mirRefs[mirror.tag]; ok || len(mirRefs) != len(upRefs) {
		t.Errorf("the mirror's refs %v, want upstream's %v", mirRefs, upRefs)
	}
}
