package catalog

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// BenchmarkRead reads one generated catalog (400 data files) again and
// again: in this process as before readers, with a reader of its own each
// time (Read) and with a Pool's readers; and starts a reader alone. The
// fixed cost of a catalog (a reader, a DuckDB instance, its lock-down, the
// checks) is most of it, and a mirror pays it once per version.
//
//	go test -run '^$' -bench Read -cpuprofile cpu.out ./internal/catalog/
func BenchmarkRead(b *testing.B) {
	dir := b.TempDir()
	r, err := generate.Generate(context.Background(), dir, generate.Options{Versions: 1, FilesPerVersion: 400, FastParquet: true})
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(dir, "versions", r.Versions[0], "ducklake.duckdb")
	// What a read cost before readers (issue 25): DuckDB in this process,
	// unconfined. Kept to show what the process apart costs.
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			readOK(b, func() (*Catalog, error) { return read(context.Background(), p, "", Limits{}.WithDefaults(), nil) })
		}
	})
	// Starting a reader (exec, rlimits, Landlock, seccomp, hello) and
	// ending it, reading nothing.
	b.Run("reader-start", func(b *testing.B) {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		for b.Loop() {
			proc, err := startReader(context.Background(), f, Limits{}.WithDefaults(), 1)
			if err != nil {
				b.Fatal(err)
			}
			proc.close()
		}
		// A reader's peak resident set (VmHWM), as close reads it.
		b.ReportMetric(float64(readerPeakRSS.Load())/(1<<20), "peak-MiB")
	})
	b.Run("alone", func(b *testing.B) {
		for b.Loop() {
			readOK(b, func() (*Catalog, error) { return Read(context.Background(), p, "", Limits{}) })
		}
	})
	b.Run("pooled", func(b *testing.B) {
		pool, err := NewPool(b.TempDir(), 1, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		in := copyInto(b, p, pool.Dir())
		for b.Loop() {
			readOK(b, func() (*Catalog, error) { return pool.Read(context.Background(), in, "") })
		}
	})
	// A read by a reader started ahead, as a run's reads find theirs
	// (started while the catalog was fetched): its start not timed.
	b.Run("pooled-ahead", func(b *testing.B) {
		pool, err := NewPool(b.TempDir(), 1, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		in := copyInto(b, p, pool.Dir())
		for b.Loop() {
			b.StopTimer()
			pool.ending.Wait()
			pool.mu.Lock()
			pool.unread[in] = true // as Fetch leaves it
			pool.mu.Unlock()
			pool.warm()
			for pool.idleCount() == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond) // its DuckDB, started after its hello
			b.StartTimer()
			readOK(b, func() (*Catalog, error) { return pool.Read(context.Background(), in, "") })
		}
	})
}

func readOK(b *testing.B, read func() (*Catalog, error)) {
	c, err := read()
	if err != nil {
		b.Fatal(err)
	}
	if len(c.Files) != 400 {
		b.Fatalf("read %d files, want 400", len(c.Files))
	}
}

// BenchmarkDiff takes the difference of a child's catalog and its
// parent's list: by default a generated pair (400 files, then 4 more); or the
// catalogs FDL_DIFF_CHILD and FDL_DIFF_PARENT name, such as the bench's
// wide repository (300,000 files, then one more):
//
//	FDL_DIFF_PARENT=bin/bench-cache/wide-300000/versions/<parent>/ducklake.duckdb \
//	FDL_DIFF_CHILD=bin/bench-cache/wide-300000/versions/<child>/ducklake.duckdb \
//	go test -run '^$' -bench Diff -benchtime 10x ./internal/catalog/
func BenchmarkDiff(b *testing.B) {
	child, parent := os.Getenv("FDL_DIFF_CHILD"), os.Getenv("FDL_DIFF_PARENT")
	if child == "" || parent == "" {
		dir := b.TempDir()
		opts := generate.Options{Versions: 1, FilesPerVersion: 400, FastParquet: true}
		r, err := generate.Generate(context.Background(), dir, opts)
		if err != nil {
			b.Fatal(err)
		}
		id, err := generate.AddVersion(context.Background(), dir, 1, opts)
		if err != nil {
			b.Fatal(err)
		}
		parent = filepath.Join(dir, "versions", r.Versions[0], "ducklake.duckdb")
		child = filepath.Join(dir, "versions", id, "ducklake.duckdb")
	}
	// The parent's list, as the mirror keeps it: its catalog read whole.
	p, err := Read(context.Background(), parent, "", Limits{})
	if err != nil {
		b.Fatal(err)
	}
	list := listOf(b, p.Files)
	var files int
	readerPeakRSS.Store(0)
	for b.Loop() {
		d, err := Diff(context.Background(), child, "", list, Limits{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		files = len(d.Files)
	}
	b.ReportMetric(float64(files), "files")
	// The largest of its readers' peak resident sets (VmHWM).
	b.ReportMetric(float64(readerPeakRSS.Load())/(1<<20), "peak-MiB")
}
