package catalog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

func newTestPool(t *testing.T, lim Limits) *Pool {
	t.Helper()
	p, err := NewPool(t.TempDir(), 1, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func (p *Pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// copyInto copies the file src into dir, as Pool.Fetch would fetch it.
func copyInto(t testing.TB, src, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "catalog-*.duckdb")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(raw); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// A pool reads catalog after catalog, each as Read reads it alone, each
// with a reader of its own that is ended after it: nothing of one is
// left for the next.
func TestPoolReadsCatalogsOneAfterAnotherAsReadDoes(t *testing.T) {
	dir := t.TempDir()
	r, err := generate.Generate(context.Background(), dir, generate.Options{Versions: 3, FilesPerVersion: 4, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	pool := newTestPool(t, Limits{})
	for i, id := range append(r.Versions, r.Versions[0]) {
		src := filepath.Join(dir, "versions", id, "ducklake.duckdb")
		want, err := Read(context.Background(), src, "", Limits{})
		if err != nil {
			t.Fatal(err)
		}
		before := readersStarted.Load()
		got, err := pool.Read(context.Background(), copyInto(t, src, pool.Dir()), "")
		if err != nil {
			t.Fatalf("catalog %d: %v", i, err)
		}
		started := readersStarted.Load() - before
		if !reflect.DeepEqual(got.Files, want.Files) || got.DataPath != want.DataPath {
			t.Fatalf("catalog %d: the pool read %d files, Read %d", i, len(got.Files), len(want.Files))
		}
		if started != 1 {
			t.Fatalf("catalog %d read by %d new readers, want 1", i, started)
		}
		pool.ending.Wait() // the reader that answered, ended in the background
		if pids := readerChildren(t); len(pids) != 0 || pool.idleCount() != 0 {
			t.Fatalf("after catalog %d readers %v run, %d idle; want none", i, pids, pool.idleCount())
		}
	}
}

// A pooled DuckDB opens files in the pool's folder only: not a catalog
// beside it, nor one the configuration is asked to let in.
func TestPooledDuckDBOpensNoFileOutsideItsFolder(t *testing.T) {
	outside := generatedCatalog(t)
	pool := newTestPool(t, Limits{})
	// The DuckDB of a pooled reader, as child.go makes it.
	db := &dbPool{dir: pool.Dir(), lim: pool.lim, size: 1}
	in, err := db.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer in.close()
	for _, q := range []string{
		"ATTACH " + sqlString(outside) + " AS other (TYPE duckdb, READ_ONLY)",
		"SELECT * FROM read_blob(" + sqlString(outside) + ")",
		"SET allowed_directories=[" + sqlString(filepath.Dir(outside)+"/") + "]",
		"SET enable_external_access=true",
	} {
		if _, err := in.conn.ExecContext(context.Background(), q); err == nil {
			t.Errorf("a pooled DuckDB ran %s", q)
		}
	}
	// Read of a file outside the folder opens an instance of its own.
	c, err := pool.Read(context.Background(), outside, "")
	if err != nil || len(c.Files) == 0 {
		t.Fatalf("reading a catalog outside the pool's folder: %v", err)
	}
	st, err := os.Stat(pool.Dir())
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the pool's folder: %v, mode %v; want 0700", err, st.Mode())
	}
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pool.Dir()); !os.IsNotExist(err) {
		t.Errorf("Close left the pool's folder: %v", err)
	}
}

// fetchInto fetches the catalog file at path into the pool, as the
// engine fetches an upstream's.
func fetchInto(t *testing.T, pool *Pool, path string) *Fetched {
	t.Helper()
	src, err := local.Open(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	f, err := pool.Fetch(context.Background(), src, filepath.Base(path))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A pool's reader refuses a catalog with a view as a reader of its own
// does, with the same message, and the pool reads the next catalogs
// with another.
func TestPoolRefusesAViewAsAReadAlone(t *testing.T) {
	pool := newTestPool(t, Limits{})
	hostile := generatedCatalog(t, dataFileView("range(1e15::BIGINT) t(i)", "'f' || i || '.parquet'")...)
	_, err := Read(context.Background(), hostile, catalogName, Limits{})
	if err == nil || !strings.Contains(err.Error(), "is a view") {
		t.Fatalf("Read alone gives %v", err)
	}
	want := err.Error()
	for i, p := range []string{generatedCatalog(t), hostile, generatedCatalog(t)} {
		f := fetchInto(t, pool, p)
		c, err := pool.Read(context.Background(), f.Path, catalogName)
		switch {
		case p == hostile && (err == nil || err.Error() != want):
			t.Errorf("the view, pooled: %v, %v; want %q", c, err, want)
		case p != hostile && (err != nil || len(c.Files) == 0):
			t.Errorf("clean catalog %d, pooled: %v, %v", i, c, err)
		}
		f.Remove()
	}
}

// readerChildren lists the pids of this process's catalog readers.
func readerChildren(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(status), fmt.Sprintf("\nPPid:\t%d\n", os.Getpid())) && strings.HasPrefix(string(cmdline), "fdl-mirror-catalog-reader") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A pool starts a reader while a catalog is fetched, where it has none
// idle, so that the read finds it started; it starts no more than it
// keeps, and Close ends one still starting.
func TestPoolStartsAReaderWhileACatalogIsFetched(t *testing.T) {
	if n := len(readerChildren(t)); n != 0 {
		t.Fatalf("%d readers before the test", n)
	}
	p := generatedCatalog(t)
	// A read right after the fetch waits for the reader started ahead.
	before := readersStarted.Load()
	early := newTestPool(t, Limits{})
	if c, err := early.Read(context.Background(), fetchInto(t, early, p).Path, catalogName); err != nil || len(c.Files) == 0 {
		t.Fatalf("%v, %v", c, err)
	}
	if n := readersStarted.Load() - before; n != 1 {
		t.Fatalf("a fetch and a read started %d readers, want 1", n)
	}
	early.Close()
	pool := newTestPool(t, Limits{})
	f := fetchInto(t, pool, p)
	deadline := time.Now().Add(30 * time.Second)
	for pool.idleCount() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pool.idleCount() != 1 {
		t.Fatalf("no reader started while the catalog was fetched")
	}
	pool.mu.Lock()
	warmed := pool.idle[0].proc
	pool.mu.Unlock()
	// A second fetch, one reader waiting already (the pool's size): none
	// more.
	g := fetchInto(t, pool, p)
	if pids := readerChildren(t); len(pids) != 1 || pids[0] != warmed.cmd.Process.Pid {
		t.Fatalf("readers %v after a second fetch, want only %d", pids, warmed.cmd.Process.Pid)
	}
	// The first read takes the reader started ahead and ends it, and
	// the second catalog's reader is started as it does: one more.
	before = readersStarted.Load()
	for _, c := range []*Fetched{f, g} {
		if c, err := pool.Read(context.Background(), c.Path, catalogName); err != nil || len(c.Files) == 0 {
			t.Fatalf("%v, %v", c, err)
		}
		pool.ending.Wait()
		select {
		case <-warmed.exited:
		default:
			t.Fatalf("the reader started ahead still runs after a read")
		}
	}
	if n := readersStarted.Load() - before; n != 1 || pool.idleCount() != 0 {
		t.Errorf("two reads started %d readers beside the one started ahead, %d idle; want 1 and none", n, pool.idleCount())
	}
	// Closed while a reader starts: none is left running.
	other, err := NewPool(t.TempDir(), 2, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	fetchInto(t, other, p)
	pool.Close()
	other.Close()
	if pids := readerChildren(t); len(pids) != 0 {
		t.Fatalf("readers %v left after Close", pids)
	}
}

// A pool takes a difference of a catalog fetched into it and its parent's
// list with one of its readers, and ends the reader: the same
// difference as a reader of its own takes. A child the difference
// refuses ends that reader, and the pool's next read starts another.
func TestPoolTakesADifferenceWithItsReader(t *testing.T) {
	cats := chain(t, "0.3")
	pool := newTestPool(t, Limits{})
	parent := (wholeReads{}).list(t, cats[2])
	child := fetchInto(t, pool, cats[3])
	want, err := Diff(context.Background(), cats[3], catalogName, parent, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := readersStarted.Load()
	got, err := pool.Diff(context.Background(), child.Path, catalogName, parent, nil)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("pooled difference %+v, %v; alone %+v", got, err, want)
	}
	pool.ending.Wait()
	if n := readersStarted.Load() - before; n != 0 || pool.idleCount() != 0 || len(readerChildren(t)) != 0 {
		t.Fatalf("the difference started %d readers beside the one started ahead, left %d idle, %v running; want none", n, pool.idleCount(), readerChildren(t))
	}
	// A catalog fetched starts its reader.
	hostile := fetchInto(t, pool, changed(t, cats[3], "UPDATE ducklake_data_file SET path = '/etc/passwd', path_is_relative = false WHERE data_file_id = 2"))
	deadline := time.Now().Add(30 * time.Second)
	for pool.idleCount() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pool.idleCount() != 1 {
		t.Fatalf("%d readers started ahead for the hostile child, want 1", pool.idleCount())
	}
	pool.mu.Lock()
	first := pool.idle[0].proc
	pool.mu.Unlock()
	d, err := pool.Diff(context.Background(), hostile.Path, catalogName, parent, nil)
	if d != nil || err == nil || !strings.Contains(err.Error(), "outside the catalog's data path") || !strings.Contains(err.Error(), catalogName) {
		t.Fatalf("a hostile child: %v, %v", d, err)
	}
	pool.ending.Wait()
	select {
	case <-first.exited:
	default:
		t.Errorf("the reader that refused the child still runs")
	}
	if c, err := pool.Read(context.Background(), child.Path, catalogName); err != nil || len(c.Files) == 0 {
		t.Fatalf("a read after the refusal: %v, %v", c, err)
	}
	// Catalogs outside the pool's folder: a reader of their own.
	if d, err := pool.Diff(context.Background(), cats[3], catalogName, parent, nil); err != nil || !reflect.DeepEqual(d, want) {
		t.Fatalf("outside the folder: %+v, %v", d, err)
	}
}
