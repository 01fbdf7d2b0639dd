package catalog

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// A difference holds the parent's list as keys, not as paths: its
// memory grows by the list's key and size (16 bytes an entry) and the
// join's table of them, never by the paths of the rows the two share.
// Issue 43: at a million files a reader of two catalogs peaked at 175
// MiB, DuckDB collecting the parent's rows (about 100 bytes each) before
// pairing them; paired as stored (72450fb), 200,000 shared rows fit 8
// MiB. Against the list they fit 24 MiB (not 16: the keys and the join's
// table), and a million fit 96 MiB (not 64), below the default limit of
// 128 MiB.
func TestDiffOfManySharedRowsFitsASmallMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a catalog of 200,000 rows")
	}
	ctx := context.Background()
	dir := t.TempDir()
	opts := generate.Options{Versions: 1, FilesPerVersion: 1, UnwrittenFiles: 200_000, FastParquet: true}
	r, err := generate.Generate(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	child, err := generate.AddVersion(ctx, dir, 1, generate.Options{FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	cat := func(v string) string { return filepath.Join(dir, "versions", v, "ducklake.duckdb") }
	w := wholeReads{}
	d, err := Diff(ctx, cat(child), "", w.list(t, cat(r.Versions[0])), Limits{MemoryLimit: 24 << 20}, nil)
	if err != nil {
		t.Fatalf("a difference of 200,002 rows from 200,001 at a 24 MiB memory limit: %v", err)
	}
	if d.ParentRows != 200_001 || d.ChildRows != 200_002 || d.SameRows != 200_001 || len(d.Files) != 1 {
		t.Fatalf("difference: parent %d rows, child %d, same %d, files %v; want 200001, 200002, 200001 and the one new file",
			d.ParentRows, d.ChildRows, d.SameRows, d.Files)
	}
}
