package catalog

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

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

// One pooled DuckDB reads catalog after catalog, each as Read reads it
// alone: nothing of one is left for the next.
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
		got, err := pool.Read(context.Background(), copyInto(t, src, pool.Dir()), "")
		if err != nil {
			t.Fatalf("catalog %d: %v", i, err)
		}
		if !reflect.DeepEqual(got.Files, want.Files) || got.DataPath != want.DataPath {
			t.Fatalf("catalog %d: the pool read %d files, Read %d", i, len(got.Files), len(want.Files))
		}
		if n := pool.idleCount(); n != 1 {
			t.Fatalf("after catalog %d the pool keeps %d idle instances, want 1 (reused)", i, n)
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

// The catalogs waiting in a pool are checked for views and macros with
// the one being read; each is then refused (or read) by its own read as
// when it is checked alone, with the same message.
func TestPoolChecksTheCatalogsWaitingWithTheOneRead(t *testing.T) {
	pool := newTestPool(t, Limits{})
	clean := fetchInto(t, pool, generatedCatalog(t))
	hostile := map[string]string{
		"a macro": generatedCatalog(t, "CREATE MACRO ducklake_files() AS TABLE SELECT * FROM range(1e15::BIGINT)"),
		"a view":  generatedCatalog(t, dataFileView("range(1e15::BIGINT) t(i)", "'f' || i || '.parquet'")...),
	}
	want := map[string]string{}
	waiting := map[string]*Fetched{}
	for kind, p := range hostile {
		_, err := Read(context.Background(), p, catalogName, Limits{})
		if err == nil || !strings.Contains(err.Error(), "is "+kind) {
			t.Fatalf("%s: Read alone gives %v", kind, err)
		}
		want[kind] = err.Error()
		waiting[kind] = fetchInto(t, pool, p)
	}
	other := fetchInto(t, pool, generatedCatalog(t))

	if _, err := pool.Read(context.Background(), clean.Path, catalogName); err != nil {
		t.Fatal(err)
	}
	pool.mu.Lock()
	checked := len(pool.aheadBy)
	pool.mu.Unlock()
	if checked != 3 {
		t.Fatalf("reading one catalog checked %d waiting ones ahead, want 3", checked)
	}
	for kind, f := range waiting {
		_, err := pool.Read(context.Background(), f.Path, catalogName)
		if err == nil || err.Error() != want[kind] {
			t.Errorf("%s checked ahead: read as %v, want %q", kind, err, want[kind])
		}
	}
	if c, err := pool.Read(context.Background(), other.Path, catalogName); err != nil || len(c.Files) == 0 {
		t.Errorf("a clean catalog checked ahead: %v", err)
	}
	// What a read or Remove is done with is forgotten.
	other.Remove()
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if len(pool.aheadBy) != 0 || len(pool.waiting) != 0 {
		t.Errorf("the pool still knows %d checked and %d waiting files", len(pool.aheadBy), len(pool.waiting))
	}
}
