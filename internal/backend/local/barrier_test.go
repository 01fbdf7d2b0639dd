package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// These tests count the fsyncs and syncfs calls of the package through
// its hooks: a write made under backend.WithoutSync costs none, the
// Barrier after it one syncfs (or, where syncfs is refused, an fsync of
// each file and folder written), and a removal fsyncs its folder.

type syncCounter struct {
	mu     sync.Mutex
	fsyncs []string
	syncfs int
	refuse bool // syncfs refused, as by a kernel without it
}

func countSyncs(t *testing.T) *syncCounter {
	t.Helper()
	c := &syncCounter{}
	oldFile, oldFS := syncFile, syncfsFunc
	syncFile = func(f *os.File) error {
		c.mu.Lock()
		c.fsyncs = append(c.fsyncs, f.Name())
		c.mu.Unlock()
		return f.Sync()
	}
	syncfsFunc = func(f *os.File) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.refuse {
			return errors.ErrUnsupported
		}
		c.syncfs++
		return oldFS(f)
	}
	oldMin := syncfsMinFiles
	syncfsMinFiles = 0 // syncfs however few files are owed, unless a test says
	t.Cleanup(func() { syncFile, syncfsFunc, syncfsMinFiles = oldFile, oldFS, oldMin })
	return c
}

func (c *syncCounter) take() (fsyncs []string, syncfs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fsyncs, syncfs = c.fsyncs, c.syncfs
	c.fsyncs, c.syncfs = nil, 0
	return fsyncs, syncfs
}

func newLocal(t *testing.T) *Local {
	t.Helper()
	l, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func put(t *testing.T, ctx context.Context, l *Local, name, content string) {
	t.Helper()
	if err := l.Put(ctx, name, strings.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
}

func TestWritesWithoutSyncWaitForOneBarrier(t *testing.T) {
	c := countSyncs(t)
	l := newLocal(t)
	ctx := context.Background()
	dctx := backend.WithoutSync(ctx)
	names := []string{"data/a/1.parquet", "data/a/2.parquet", "data/b/3.parquet", "versions/v1/catalog.ducklake"}
	for _, n := range names {
		put(t, dctx, l, n, "bytes of "+n)
	}
	if fsyncs, syncfs := c.take(); len(fsyncs) != 0 || syncfs != 0 {
		t.Fatalf("writes under WithoutSync: %d fsyncs %v, %d syncfs; want none", len(fsyncs), fsyncs, syncfs)
	}
	if err := l.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if fsyncs, syncfs := c.take(); len(fsyncs) != 0 || syncfs != 1 {
		t.Fatalf("Barrier: %d fsyncs %v, %d syncfs; want one syncfs", len(fsyncs), fsyncs, syncfs)
	}
	if err := l.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if fsyncs, syncfs := c.take(); len(fsyncs) != 0 || syncfs != 0 {
		t.Fatalf("a Barrier with nothing written since: %d fsyncs, %d syncfs; want none", len(fsyncs), syncfs)
	}

	// A durable write: the file and its folder.
	put(t, ctx, l, "versions/v1/version.json", "{}")
	if fsyncs, _ := c.take(); len(fsyncs) != 2 {
		t.Fatalf("a write durable when it returns: fsyncs %v; want the file's and its folder's", fsyncs)
	}
}

// Where syncfs is refused, the Barrier fsyncs each file written and each
// folder written into, and nothing else.
func TestBarrierWithoutSyncfsFsyncsEachFileAndFolder(t *testing.T) {
	c := countSyncs(t)
	c.refuse = true
	l := newLocal(t)
	ctx := context.Background()
	dctx := backend.WithoutSync(ctx)
	for _, n := range []string{"data/a/1.parquet", "data/a/2.parquet", "data/b/3.parquet"} {
		put(t, dctx, l, n, "x")
	}
	put(t, ctx, l, "refs/heads/main", "durable already\n")
	c.take()
	if err := l.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	fsyncs, _ := c.take()
	got := map[string]int{}
	for _, f := range fsyncs {
		rel, err := filepath.Rel(l.Dir(), f)
		if err != nil {
			t.Fatal(err)
		}
		got[filepath.ToSlash(rel)]++
	}
	want := map[string]int{"data/a/1.parquet": 1, "data/a/2.parquet": 1, "data/b/3.parquet": 1, "data/a": 1, "data/b": 1}
	if len(got) != len(want) {
		t.Fatalf("Barrier without syncfs fsynced %v; want %v", got, want)
	}
	for n, k := range want {
		if got[n] != k {
			t.Fatalf("Barrier without syncfs fsynced %v; want %v", got, want)
		}
	}
}

// A removal is durable when Remove returns (its folder fsynced): a power
// cut must not bring back a ref after its version was removed. Under
// WithoutSync it waits for the Barrier.
func TestRemoveIsDurable(t *testing.T) {
	c := countSyncs(t)
	l := newLocal(t)
	ctx := context.Background()
	put(t, ctx, l, "refs/heads/side", "v\n")
	put(t, ctx, l, "versions/v/version.json", "{}")
	c.take()
	if err := l.Remove(ctx, "refs/heads/side"); err != nil {
		t.Fatal(err)
	}
	if fsyncs, _ := c.take(); len(fsyncs) != 1 || filepath.Base(filepath.Clean(fsyncs[0])) != "heads" {
		t.Fatalf("Remove fsynced %v; want the ref's folder", fsyncs)
	}
	if err := l.Remove(backend.WithoutSync(ctx), "versions/v/version.json"); err != nil {
		t.Fatal(err)
	}
	if fsyncs, syncfs := c.take(); len(fsyncs) != 0 || syncfs != 0 {
		t.Fatalf("Remove under WithoutSync: fsyncs %v, syncfs %d; want none", fsyncs, syncfs)
	}
	if err := l.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if _, syncfs := c.take(); syncfs != 1 {
		t.Fatalf("Barrier after a removal: %d syncfs, want 1", syncfs)
	}
}

// A barrier owing a few files fsyncs them rather than the whole file
// system, whose syncfs would wait for every program's writes.
func TestBarrierOwingFewFilesFsyncsThem(t *testing.T) {
	c := countSyncs(t)
	syncfsMinFiles = 3
	l := newLocal(t)
	ctx := context.Background()
	dctx := backend.WithoutSync(ctx)
	put(t, dctx, l, "data/a/1.parquet", "x")
	put(t, dctx, l, "data/a/2.parquet", "x")
	if err := l.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if fsyncs, syncfs := c.take(); len(fsyncs) != 3 || syncfs != 0 {
		t.Fatalf("two files owed: fsyncs %v, %d syncfs; want the two files and their folder", fsyncs, syncfs)
	}
	for _, n := range []string{"data/a/3.parquet", "data/a/4.parquet", "data/a/5.parquet"} {
		put(t, dctx, l, n, "x")
	}
	if err := l.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if fsyncs, syncfs := c.take(); len(fsyncs) != 0 || syncfs != 1 {
		t.Fatalf("three files owed: fsyncs %v, %d syncfs; want one syncfs", fsyncs, syncfs)
	}
}
