package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
)

// foldAsReadDid is how a read made a catalog's rows one per path before
// the mirror sorted them: the first row of a path kept, a later row whose
// size and the first's are both known and differ refusing the catalog,
// the files in path order. The sort must give what it gave.
func foldAsReadDid(rows []File) ([]File, error) {
	seen := map[string]int{}
	var files []File
	for _, f := range rows {
		if i, ok := seen[f.Path]; ok {
			if prev := files[i].Size; prev != f.Size && prev >= 0 && f.Size >= 0 {
				return nil, fmt.Errorf("file %s is recorded with two sizes, %d and %d", Excerpt(f.Path), prev, f.Size)
			}
			continue
		}
		seen[f.Path] = len(files)
		files = append(files, f)
	}
	sortFiles(files)
	return files, nil
}

func sortFiles(files []File) {
	for i := 1; i < len(files); i++ {
		for j := i; j > 0 && files[j].Path < files[j-1].Path; j-- {
			files[j], files[j-1] = files[j-1], files[j]
		}
	}
}

// sortWith sorts rows with a fileSorter whose memory holds memRows rows
// or so, and returns the files and whether the sort went to disk.
func sortWith(t *testing.T, rows []File, memRows int) ([]File, bool, error) {
	t.Helper()
	defer SetSortMemory(memRows * (rowOverhead + 12))()
	s := newFileSorter(t.TempDir(), catalogName, math.MaxInt64)
	defer s.close()
	for _, f := range rows {
		if err := s.add(f); err != nil {
			return nil, false, err
		}
	}
	if err := s.wait(); err != nil {
		return nil, false, err
	}
	disk := len(s.runs) > 0
	sorted, err := s.finish(Catalog{DataPath: "/data/"})
	if err != nil {
		return nil, disk, err
	}
	defer sorted.Close()
	c, err := sorted.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if sorted.Len() != int64(len(c.Files)) {
		t.Fatalf("Len says %d files, Each gave %d", sorted.Len(), len(c.Files))
	}
	if disk != (sorted.run != nil) {
		t.Fatalf("runs were written: %v; the files are on disk: %v", disk, sorted.run != nil)
	}
	return c.Files, disk, nil
}

// randomRows are n rows over paths paths, some repeated, a few with
// unknown sizes, each path at one size.
func randomRows(rng *rand.Rand, n, paths int) []File {
	rows := make([]File, n)
	for i := range rows {
		p := rng.IntN(paths)
		rows[i] = File{Path: fmt.Sprintf("main/t/f-%06d.parquet", p), Size: int64(100 + p), Footer: int64(i), Delete: rng.IntN(2) == 0}
		if rng.IntN(5) == 0 {
			rows[i].Size = -1
		}
	}
	return rows
}

// Rows in any order, repeated, come out in path order one per path, the
// first row of each kept, whether the sort stays in memory, writes a few
// runs, or writes so many that runs are merged before the end.
func TestSortGivesWhatAReadGave(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name    string
		memRows int
		disk    bool
	}{{"in memory", 1 << 20, false}, {"in runs", 500, true}, {"in runs merged on the way", 20, true}} {
		t.Run(tc.name, func(t *testing.T) {
			rows := randomRows(rng, 5000, 1500)
			want, err := foldAsReadDid(rows)
			if err != nil {
				t.Fatal(err)
			}
			got, disk, err := sortWith(t, rows, tc.memRows)
			if err != nil {
				t.Fatal(err)
			}
			if disk != tc.disk {
				t.Fatalf("the sort went to disk: %v, want %v", disk, tc.disk)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("sorted %d files, a read kept %d; first difference at %s", len(got), len(want), firstDifference(got, want))
			}
		})
	}
}

func firstDifference(a, b []File) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("%d: %+v, want %+v", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("the end (%d, %d)", len(a), len(b))
}

// A path recorded with two known sizes is refused as a read refused it,
// with its rows in different runs; one whose first row has no size is
// kept at that row, as a read kept it, whatever sizes come after.
func TestSortRefusesAPathOfTwoSizesAcrossRuns(t *testing.T) {
	filler := func(from, n int) []File {
		var rows []File
		for i := range n {
			rows = append(rows, File{Path: fmt.Sprintf("z/%05d.parquet", from+i), Size: 1, Footer: -1})
		}
		return rows
	}
	for _, tc := range []struct {
		name  string
		sizes []int64 // of a.parquet's rows, in the order read
		says  string  // "": kept
	}{
		{"two sizes", []int64{10, 11}, "two sizes, 10 and 11"},
		{"unknown then the same", []int64{-1, 10, 10}, ""},
		{"the same, an unknown, another", []int64{10, -1, 10, 12}, "two sizes, 10 and 12"},
		{"unknown first, then two sizes", []int64{-1, 10, 11}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rows []File
			for i, size := range tc.sizes {
				// Each row of a.parquet in a run of its own.
				rows = append(rows, filler(i*100, 50)...)
				rows = append(rows, File{Path: "a.parquet", Size: size, Footer: int64(i)})
			}
			want, wantErr := foldAsReadDid(rows)
			got, disk, err := sortWith(t, rows, 40)
			if !disk {
				t.Fatal("the sort stayed in memory")
			}
			if tc.says != "" {
				if got != nil || err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), catalogName) || wantErr == nil {
					t.Fatalf("sorted as %d files, %v; want a refusal of %s saying %q (a read: %v)", len(got), err, catalogName, tc.says, wantErr)
				}
				return
			}
			if err != nil || wantErr != nil {
				t.Fatalf("refused: %v (a read: %v)", err, wantErr)
			}
			if !reflect.DeepEqual(got, want) || got[0].Path != "a.parquet" || got[0].Size != tc.sizes[0] || got[0].Footer != 0 {
				t.Fatalf("kept %+v, want the first row read, %+v", got[0], want[0])
			}
		})
	}
}

// A reader that sends rows out of order and repeated (as every reader
// now does) has them put in order and folded; one that sends a path
// twice at two sizes has its catalog refused, not as the reader's
// failure: the catalog could say it.
func TestTheMirrorSortsAndFoldsWhatAReaderSends(t *testing.T) {
	p := generatedCatalog(t)
	c, err := misbehavingRead(t, p, "lie:order", Limits{})
	if err != nil || len(c.Files) != 2 || c.Files[0].Path != "a.parquet" || c.Files[1].Path != "b.parquet" {
		t.Fatalf("read as %+v, %v; want a.parquet then b.parquet", c, err)
	}
	c, err = misbehavingRead(t, p, "lie:twice", Limits{})
	var re *ReaderError
	if c != nil || err == nil || errors.As(err, &re) || !strings.Contains(err.Error(), "two sizes, 10 and 11") {
		t.Fatalf("read as %+v, %v; want a refusal for two sizes", c, err)
	}
}

// A hostile catalog of many rows naming one path, among a few others,
// read through the confined reader with runs of a few rows: one file
// for it, the first row's; the same catalog with one of those rows at
// another size is refused, and nothing of it returned.
func TestACatalogOfManyRowsOfOnePathFoldsToOne(t *testing.T) {
	defer SetSortMemory(64 * rowOverhead)()
	const rows = 100_000
	many := "INSERT INTO ducklake_data_file (data_file_id, table_id, begin_snapshot, path, path_is_relative, file_size_bytes, footer_size) " +
		fmt.Sprintf("SELECT 1000 + i, 1, 1, 'many.parquet', true, 77, i FROM range(%d) t(i)", rows)
	p := generatedCatalog(t, many)
	c, err := Read(context.Background(), p, catalogName, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, f := range c.Files {
		if i > 0 && f.Path <= c.Files[i-1].Path {
			t.Fatalf("%s after %s", f.Path, c.Files[i-1].Path)
		}
		if strings.HasSuffix(f.Path, "many.parquet") {
			n++
			if f.Size != 77 || f.Footer != 0 {
				t.Errorf("kept %+v, want the first row (footer 0)", f)
			}
		}
	}
	if n != 1 || len(c.Files) != 3 {
		t.Fatalf("%d files, %d of them many.parquet; want the 2 generated and many.parquet once", len(c.Files), n)
	}
	hostile := generatedCatalog(t, many, fmt.Sprintf("UPDATE ducklake_data_file SET file_size_bytes = 78 WHERE data_file_id = %d", 1000+rows-1))
	readHostile(t, hostile, Limits{}, "two sizes, 77 and 78", "many.parquet")
}

// A catalog whose rows name far more bytes of distinct paths than the
// catalog holds (DuckDB compresses paths) is refused before its sort
// writes them all to disk; the same rows under a budget that holds them
// are read.
func TestASortRefusesPathsFarBeyondTheCatalogsSize(t *testing.T) {
	defer SetSortMemory(64 << 10)()
	// DuckDB keeps these paths in a third of their bytes; a crafted
	// catalog does far better, so here the sort may write only the
	// catalog's own size (or 256 bytes a file row allowed).
	defer func(old int64) { sortBytesPerCatalogByte = old }(sortBytesPerCatalogByte)
	sortBytesPerCatalogByte = 1
	const rows = 20_000
	long := "INSERT INTO ducklake_data_file (data_file_id, table_id, begin_snapshot, path, path_is_relative, file_size_bytes, footer_size) " +
		fmt.Sprintf("SELECT 1000 + i, 1, 1, repeat('p', 990) || i || '.parquet', true, 77, 8 FROM range(%d) t(i)", rows)
	p := generatedCatalog(t, long)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{MaxFiles: 30_000}
	budget := sortBudget(lim, fi.Size())
	if total := int64(rows) * (1000 + runRowBytes); total <= budget {
		t.Fatalf("the rows' %d bytes fit the budget of %d (catalog of %d bytes): the test needs a catalog that compresses its paths more", total, budget, fi.Size())
	}
	readHostile(t, p, lim, "catalog_max_files", "more than its sort may write to disk")
	c, err := Read(context.Background(), p, catalogName, Limits{MaxFiles: 100_000})
	if err != nil {
		t.Fatalf("under a budget that holds its rows: %v", err)
	}
	if len(c.Files) != rows+2 {
		t.Errorf("%d files, want %d", len(c.Files), rows+2)
	}
}
