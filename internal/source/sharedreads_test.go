package source_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// A fan-out's catalogs are read once: a later read of the same bytes
// under the same name takes the first's files, and is no read at all
// (its copy is gone, and it succeeds); an error is not kept, and other
// bytes are read.

// sharedReadSetup is a generated repository of two versions, a Source of
// it, and a pool; fetch copies one of its catalogs into the pool.
func sharedReadSetup(t *testing.T) (src *source.Source, pool *catalog.Pool, names []string, fetch func(name string) *catalog.Fetched) {
	t.Helper()
	up := filepath.Join(t.TempDir(), "up")
	g := fdltest.Generate(t, up, generate.Options{Versions: 2, FilesPerVersion: 3, FastParquet: true})
	l, err := local.Open(up)
	if err != nil {
		t.Fatal(err)
	}
	pool, err = catalog.NewPool(t.TempDir(), 2, catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	for _, v := range g.Versions {
		names = append(names, repo.VersionFile(v, repo.CatalogFile))
	}
	ctx := context.Background()
	fetch = func(name string) *catalog.Fetched {
		f, err := pool.Fetch(ctx, l, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Remove)
		return f
	}
	return source.New(l, nil, nil), pool, names, fetch
}

func filesOf(t *testing.T, s *catalog.Sorted) []catalog.File {
	t.Helper()
	c, err := s.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	return c.Files
}

func TestAFanOutReadsACatalogOnce(t *testing.T) {
	ctx := context.Background()
	src, pool, names, fetch := sharedReadSetup(t)
	src.Fanout().Share()
	defer src.Fanout().Close()
	parent, child := names[0], names[1]

	// The first read fails (its copy is gone): not kept.
	gone := fetch(child)
	os.Remove(gone.Path)
	if _, err := src.Catalogs().ReadSorted(ctx, pool, gone, child); err == nil {
		t.Fatal("a read of a removed copy succeeded")
	}
	first, err := src.Catalogs().ReadSorted(ctx, pool, fetch(child), child)
	if err != nil {
		t.Fatalf("the read after a failed one: %v", err)
	}
	want := filesOf(t, first)
	if len(want) == 0 {
		t.Fatal("the catalog lists no files")
	}

	// The same bytes again, their copy removed: taken, not read.
	again := fetch(child)
	os.Remove(again.Path)
	s, err := src.Catalogs().ReadSorted(ctx, pool, again, child)
	if err != nil {
		t.Fatalf("a later read of the same bytes was read again: %v", err)
	}
	if got := filesOf(t, s); !slices.Equal(got, want) {
		t.Errorf("a later read lists %v, the first %v", got, want)
	}

	// Other bytes (the parent's catalog) are read.
	other := fetch(parent)
	os.Remove(other.Path)
	if _, err := src.Catalogs().ReadSorted(ctx, pool, other, parent); err == nil {
		t.Error("a catalog of other bytes was served a kept read")
	}
	// Other bytes under the child's name (an earlier sink's copy that is
	// not the upstream's) are read, never served the child's files.
	tampered := fetch(parent)
	os.Remove(tampered.Path)
	if _, err := src.Catalogs().ReadSorted(ctx, pool, tampered, child); err == nil {
		t.Error("other bytes under the same name were served a kept read")
	}
	// The same bytes under another name are read: a refusal names the
	// catalog it read.
	renamed := fetch(child)
	os.Remove(renamed.Path)
	if _, err := src.Catalogs().ReadSorted(ctx, pool, renamed, parent); err == nil {
		t.Error("a catalog under another name was served a kept read")
	}

	// A difference, likewise: the child against a list of the parent's
	// files, shared by the sum of its entries.
	ps, err := pool.ReadSorted(ctx, fetch(parent).Path, parent)
	if err != nil {
		t.Fatal(err)
	}
	parentFiles := filesOf(t, ps)
	ps.Close()
	var lines []byte
	for _, f := range parentFiles {
		lines = catalog.AppendListLine(lines, f)
	}
	listPath := filepath.Join(t.TempDir(), "list.tsv")
	if err := os.WriteFile(listPath, lines, 0o600); err != nil {
		t.Fatal(err)
	}
	list := catalog.ParentList{Rows: int64(len(parentFiles)), Path: listPath}
	sum := func() string { return fmt.Sprintf("%x", sha256.Sum256(lines)) }
	d, err := src.Catalogs().Diff(ctx, pool, fetch(child), child, list, sum)
	if err != nil {
		t.Fatalf("difference: %v", err)
	}
	c := fetch(child)
	os.Remove(c.Path)
	d2, err := src.Catalogs().Diff(ctx, pool, c, child, list, sum)
	if err != nil {
		t.Fatalf("a later difference of the same bytes was read again: %v", err)
	}
	if !slices.Equal(d2.Files, d.Files) || d2.ChildRows != d.ChildRows || d2.SameRows != d.SameRows || len(d.Files) == 0 {
		t.Errorf("a later difference is %+v, the first %+v", d2, d)
	}
}

// A run to one sink keeps nothing: every read is a read.
func TestOneSinkReadsEveryCatalog(t *testing.T) {
	ctx := context.Background()
	src, pool, names, fetch := sharedReadSetup(t)
	if _, err := src.Catalogs().ReadSorted(ctx, pool, fetch(names[1]), names[1]); err != nil {
		t.Fatal(err)
	}
	again := fetch(names[1])
	os.Remove(again.Path)
	if _, err := src.Catalogs().ReadSorted(ctx, pool, again, names[1]); err == nil {
		t.Error("a run to one sink was served a kept read")
	}

	// Nor does it hash a difference's list to name what it would keep:
	// at a million files that is a pass over 77 MB for nothing.
	ps, err := pool.ReadSorted(ctx, fetch(names[0]).Path, names[0])
	if err != nil {
		t.Fatal(err)
	}
	var lines []byte
	for _, f := range filesOf(t, ps) {
		lines = catalog.AppendListLine(lines, f)
	}
	ps.Close()
	listPath := filepath.Join(t.TempDir(), "list.tsv")
	if err := os.WriteFile(listPath, lines, 0o600); err != nil {
		t.Fatal(err)
	}
	hashed := 0
	sum := func() string { hashed++; return fmt.Sprintf("%x", sha256.Sum256(lines)) }
	d, err := src.Catalogs().Diff(ctx, pool, fetch(names[1]), names[1], catalog.ParentList{Rows: int64(bytes.Count(lines, []byte("\n"))), Path: listPath}, sum)
	if err != nil || len(d.Files) == 0 {
		t.Fatalf("difference: %v", err)
	}
	if hashed != 0 {
		t.Errorf("a run to one sink hashed its list %d times", hashed)
	}
}
