package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// chain generates a repository of a few versions on main (delete files,
// ended data files: historical rows) and one more added as a child, and
// returns their catalogs, oldest first.
func chain(t *testing.T, layout string) []string {
	t.Helper()
	dir := t.TempDir()
	opts := generate.Options{Versions: 3, FilesPerVersion: 4, Layout: layout, DeleteFiles: true, RemoveFiles: true, FastParquet: true}
	r, err := generate.Generate(context.Background(), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	id, err := generate.AddVersion(context.Background(), dir, 3, opts)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range append(r.Versions, id) {
		out = append(out, filepath.Join(dir, "versions", v, "ducklake.duckdb"))
	}
	return out
}

// changed is a copy of the catalog at p with stmts run on it, as a
// hostile upstream would change a child.
func changed(t *testing.T, p string, stmts ...string) string {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(t.TempDir(), "ducklake.duckdb")
	if err := os.WriteFile(c, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	runSQL(t, "duckdb", c, append(stmts, "CHECKPOINT")...)
	return c
}

const parentName = "versions/019a0000-0000-7000-8000-0000000000ff/ducklake.duckdb"

// wholeReads are catalogs read whole, by path, for one test.
type wholeReads map[string]*Catalog

func (w wholeReads) read(t *testing.T, p, name string) *Catalog {
	t.Helper()
	if c := w[p]; c != nil {
		return c
	}
	c, err := Read(context.Background(), p, name, Limits{})
	if err != nil {
		t.Fatalf("reading %s whole: %v", name, err)
	}
	w[p] = c
	return c
}

// setDifference is what a difference must be: the child's files, read
// whole, that the parent's, read whole, does not list exactly so.
func (w wholeReads) setDifference(t *testing.T, child, parent string) []File {
	t.Helper()
	c, p := w.read(t, child, catalogName), w.read(t, parent, parentName)
	in := map[File]bool{}
	for _, f := range p.Files {
		in[f] = true
	}
	var out []File
	for _, f := range c.Files {
		if !in[f] {
			out = append(out, f)
		}
	}
	return out
}

// listOf is a list of files as the mirror gives a difference: a file in
// a folder of t's, in path order, one per path.
func listOf(t testing.TB, files []File) ParentList {
	t.Helper()
	sorted := append([]File(nil), files...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var b []byte
	var n int64
	for i, f := range sorted {
		if i == 0 || sorted[i-1].Path != f.Path {
			b = AppendListLine(b, f)
			n++
		}
	}
	p := filepath.Join(t.TempDir(), "list.tsv")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return ParentList{Rows: n, Path: p}
}

// list is the parent's confirmed list as the mirror would hold it: the
// files of its catalog read whole.
func (w wholeReads) list(t *testing.T, parent string) ParentList {
	t.Helper()
	return listOf(t, w.read(t, parent, parentName).Files)
}

// listFiles is a list's entries, in its order.
func listFiles(t *testing.T, l ParentList) []File {
	t.Helper()
	raw, err := os.ReadFile(l.Path)
	if err != nil {
		t.Fatal(err)
	}
	var out []File
	for _, line := range strings.SplitAfter(string(raw), "\n") {
		if line == "" {
			continue
		}
		f, err := ParseListLine(strings.TrimSuffix(line, "\n"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// removedFrom is what a difference must say removed: the paths of the
// parent's files, read whole, that the child's, read whole, does not
// list exactly so.
func (w wholeReads) removedFrom(t *testing.T, child, parent string) []string {
	t.Helper()
	return pathsOf(w.setDifference(t, parent, child))
}

func pathsOf(files []File) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path)
	}
	sort.Strings(out)
	return out
}

// checkDiff takes the difference of child and parent's list and checks
// it is the set difference of two whole reads, both ways, counts and all.
func (w wholeReads) checkDiff(t *testing.T, child, parent string) *Difference {
	t.Helper()
	d, err := Diff(context.Background(), child, catalogName, w.list(t, parent), Limits{}, nil)
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	want := w.setDifference(t, child, parent)
	if !reflect.DeepEqual(d.Files, want) && len(d.Files)+len(want) > 0 {
		t.Fatalf("the difference is\n%v\nthe set difference of two reads\n%v", d.Files, want)
	}
	entries := listFiles(t, w.list(t, parent))
	var removed []string
	for _, at := range d.Removed {
		removed = append(removed, entries[at].Path)
	}
	if gone := w.removedFrom(t, child, parent); !reflect.DeepEqual(removed, gone) && len(removed)+len(gone) > 0 {
		t.Fatalf("removed\n%v\nthe parent's files the child's read lacks\n%v", removed, gone)
	}
	c, p := w.read(t, child, catalogName), w.read(t, parent, parentName)
	// The generator's catalogs have a row per file.
	if d.ChildRows != int64(len(c.Files)) || d.ParentRows != int64(len(p.Files)) || d.SameRows != int64(len(c.Files)-len(want)) || d.FoldedRows != 0 ||
		d.RemovedRows != int64(len(d.Removed)) {
		t.Errorf("counts %d, %d, %d, %d, %d; the reads have %d and %d files, %d of the child's in the parent",
			d.ChildRows, d.ParentRows, d.SameRows, d.FoldedRows, d.RemovedRows, len(c.Files), len(p.Files), len(c.Files)-len(want))
	}
	if d.DataPath != c.DataPath || d.DuckLakeVersion != c.DuckLakeVersion {
		t.Errorf("data path %q, version %q; the read says %q, %q", d.DataPath, d.DuckLakeVersion, c.DataPath, c.DuckLakeVersion)
	}
	return d
}

// Between any two versions of a chain, either way round, in both layouts
// (DuckLake 0.1 has no schema or table paths), the difference is the set
// difference of the two catalogs read whole.
func TestDiffIsTheSetDifferenceOfTwoReads(t *testing.T) {
	for _, layout := range []string{"0.3", "0.1"} {
		t.Run(layout, func(t *testing.T) {
			cats := chain(t, layout)
			w := wholeReads{}
			for i, child := range cats {
				for j, parent := range cats {
					if i == j {
						continue
					}
					t.Run(fmt.Sprintf("%d-%d", i, j), func(t *testing.T) {
						d := w.checkDiff(t, child, parent)
						if i == j+1 && len(d.Files) == 0 {
							t.Errorf("a child that adds files has none the parent lacks")
						}
					})
				}
			}
			// A catalog against itself: nothing.
			if d := w.checkDiff(t, cats[1], cats[1]); len(d.Files) != 0 || d.SameRows != d.ChildRows {
				t.Errorf("a catalog against itself: %v", d.Files)
			}
		})
	}
}

// A child is the upstream's bytes: one that changes an old row (its size,
// its footer size, its kind, where its table or data path puts it) has
// that row come out as a file the mirror needs, and a row written another
// way that resolves to the same file does not.
func TestDiffGivesAChangedOldRowAsNew(t *testing.T) {
	cats := chain(t, "0.3")
	parent, child := cats[2], cats[3]
	w := wholeReads{}
	base := w.checkDiff(t, child, parent)
	old := func(t *testing.T) string {
		var p string
		db, err := sql.Open("duckdb", parent+"?access_mode=read_only")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRow("SELECT path FROM ducklake_data_file ORDER BY data_file_id LIMIT 1").Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}(t)
	// Where the parent's read puts it, below the data path.
	pc := w.read(t, parent, parentName)
	var oldRel string
	for _, f := range pc.Files {
		if strings.HasSuffix(f.Path, "/"+old) {
			oldRel = f.Path
		}
	}
	if oldRel == "" {
		t.Fatalf("%s is not in the parent's read", old)
	}
	for _, tc := range []struct {
		name  string
		stmts []string
		// more: files beyond the unchanged child's difference; -1: every
		// file of the table.
		more int
	}{
		{"a size", []string{"UPDATE ducklake_data_file SET file_size_bytes = file_size_bytes + 1 WHERE path = '" + old + "'"}, 1},
		{"a footer size", []string{"UPDATE ducklake_data_file SET footer_size = footer_size + 1 WHERE path = '" + old + "'"}, 1},
		{"a size made unknown", []string{"UPDATE ducklake_data_file SET file_size_bytes = NULL WHERE path = '" + old + "'"}, 1},
		{"the table's path", []string{"UPDATE ducklake_table SET path = 'elsewhere/'"}, -1},
		{"the data path", []string{"UPDATE ducklake_metadata SET value = '/var/lib/other/' WHERE key = 'data_path'",
			"UPDATE ducklake_data_file SET path = '/var/lib/other/x/y.parquet', path_is_relative = false WHERE path = '" + old + "'"}, 1},
		{"the same file written absolute", []string{"UPDATE ducklake_data_file SET path = '" + pc.DataPath + oldRel + "', path_is_relative = false WHERE path = '" + old + "'"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hostile := changed(t, child, tc.stmts...)
			d := w.checkDiff(t, hostile, parent)
			switch {
			case tc.more >= 0 && len(d.Files) != len(base.Files)+tc.more:
				t.Errorf("%d files in the difference, want %d: %v", len(d.Files), len(base.Files)+tc.more, d.Files)
			case tc.more < 0 && d.SameRows != 0:
				t.Errorf("%d rows still in the parent after the table moved", d.SameRows)
			}
			if tc.more > 0 && tc.name != "the data path" {
				found := false
				for _, f := range d.Files {
					found = found || strings.HasSuffix(f.Path, "/"+old)
				}
				if !found {
					t.Errorf("the changed row %s is not in the difference %v", old, d.Files)
				}
			}
		})
	}
}

// What a read refuses in a child, a difference refuses: a row without a
// path, one outside the data path, a path too long, a file with two
// sizes, more rows than the limit, a view; and the mirror gets a refusal
// naming the child, not a difference.
func TestDiffRefusesWhatReadRefuses(t *testing.T) {
	cats := chain(t, "0.3")
	parent, child := cats[2], cats[3]
	for _, tc := range []struct {
		name  string
		stmts []string
		lim   Limits
		says  string
	}{
		{"a row without a path", []string{"UPDATE ducklake_data_file SET path = NULL WHERE data_file_id = (SELECT max(data_file_id) FROM ducklake_data_file)"}, Limits{}, "without a path"},
		{"a row outside the data path", []string{"UPDATE ducklake_data_file SET path = '/etc/passwd', path_is_relative = false WHERE data_file_id = (SELECT min(data_file_id) FROM ducklake_data_file)"}, Limits{}, "outside the catalog's data path"},
		{"a path of 8 MB", []string{"UPDATE ducklake_table SET path = repeat('x', 8 << 20)"}, Limits{}, "longer than 1024 bytes"},
		{"a new file with two sizes", []string{"INSERT INTO ducklake_data_file (data_file_id, table_id, begin_snapshot, path, path_is_relative, file_size_bytes) " +
			"SELECT 9990 + i, 1, 1, 'twice.parquet', true, 10 + i FROM range(2) t(i)"}, Limits{}, "two sizes"},
		{"more rows than the limit", nil, Limits{MaxFiles: 5}, KeyMaxFiles},
		{"a view", dataFileView("range(1e15::BIGINT) t(i)", "'f' || i || '.parquet'"), Limits{}, "is a view"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hostile := changed(t, child, tc.stmts...)
			if _, err := Read(context.Background(), hostile, catalogName, tc.lim); err == nil {
				t.Fatalf("Read reads it")
			}
			d, err := Diff(context.Background(), hostile, catalogName, (wholeReads{}).list(t, parent), tc.lim, nil)
			var re *ReaderError
			if d != nil || err == nil || errors.As(err, &re) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), catalogName) || strings.Contains(err.Error(), hostile) {
				t.Fatalf("Diff: %v, %v; want a refusal of %s saying %q", d, err, catalogName, tc.says)
			}
		})
	}
}

// An old file given a second row of another size (read refuses the
// catalog: two sizes) comes out of the difference at that size, where
// the mirror meets the parent's file of the other size and refuses it.
func TestDiffGivesAnOldFileRecordedTwiceAtItsOtherSize(t *testing.T) {
	cats := chain(t, "0.3")
	parent, child := cats[2], cats[3]
	hostile := changed(t, child, "INSERT INTO ducklake_delete_file (delete_file_id, table_id, begin_snapshot, data_file_id, path, path_is_relative, format, delete_count, file_size_bytes, footer_size) "+
		"SELECT 9999, table_id, begin_snapshot, data_file_id, path, path_is_relative, 'parquet', 1, file_size_bytes + 7, footer_size FROM ducklake_data_file ORDER BY data_file_id LIMIT 1")
	if _, err := Read(context.Background(), hostile, catalogName, Limits{}); err == nil || !strings.Contains(err.Error(), "two sizes") {
		t.Fatalf("Read: %v; want it refused for two sizes", err)
	}
	p, err := Read(context.Background(), parent, parentName, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Diff(context.Background(), hostile, catalogName, listOf(t, p.Files), Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	for _, f := range p.Files {
		sizes[f.Path] = f.Size
	}
	found := false
	for _, f := range d.Files {
		if size, ok := sizes[f.Path]; ok && f.Size != size {
			found = found || f.Size == size+7
		}
	}
	if !found {
		t.Fatalf("no file of the parent comes out at its other size: %v", d.Files)
	}
}

// A parent's list that is not what the mirror says (missing, a line
// that does not parse, not of the length it said) refuses nothing of the
// child: the error is ErrParentList, not a refusal nor a reader's
// failure, and the caller reads the child whole. So too where the child
// is one the reader refuses (a view, a row without a path): the list's
// failure is told first, though the reader reads the list as it compares.
func TestDiffOfAListThatFailsRefusesNothing(t *testing.T) {
	cats := chain(t, "0.1")
	children := map[string]string{
		"":                       cats[1],
		", a view":               changed(t, cats[1], dataFileView("range(3) t(i)", "'f' || i || '.parquet'")...),
		", a row without a path": changed(t, cats[1], "UPDATE ducklake_data_file SET path = NULL WHERE data_file_id = (SELECT max(data_file_id) FROM ducklake_data_file)"),
	}
	good := (wholeReads{}).list(t, cats[0])
	raw, err := os.ReadFile(good.Path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(raw), "\n")
	damaged := filepath.Join(t.TempDir(), "damaged.tsv")
	if err := os.WriteFile(damaged, []byte(lines[0]+lines[1]+"x.parquet\tten\t-1\t0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		list ParentList
		says string
	}{
		{"missing", ParentList{Rows: good.Rows, Path: filepath.Join(t.TempDir(), "none.tsv")}, "no such file"},
		{"a line that does not parse", ParentList{Rows: 3, Path: damaged}, "reading its parent's list"},
		{"shorter than it said", ParentList{Rows: good.Rows + 1, Path: good.Path}, fmt.Sprintf("%d entries, where the mirror said %d", good.Rows, good.Rows+1)},
		{"longer than it said", ParentList{Rows: good.Rows - 1, Path: good.Path}, fmt.Sprintf("%d entries, where the mirror said %d", good.Rows, good.Rows-1)},
	} {
		for refused, child := range children {
			t.Run(tc.name+refused, func(t *testing.T) {
				d, err := Diff(context.Background(), child, catalogName, tc.list, Limits{}, nil)
				var re *ReaderError
				if d != nil || !errors.Is(err, ErrParentList) || errors.As(err, &re) || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("%v, %v; want the list's error saying %q", d, err, tc.says)
				}
			})
		}
	}
	// The refused children, with the list as it is: the child's refusal.
	for refused, child := range children {
		if refused == "" {
			continue
		}
		if d, err := Diff(context.Background(), child, catalogName, good, Limits{}, nil); d != nil || err == nil || errors.Is(err, ErrParentList) {
			t.Errorf("the child%s with a good list: %v, %v; want its refusal", refused, d, err)
		}
	}
}

// A difference streamed goes to each in path order, and nothing to Files.
func TestDiffStreamsItsFiles(t *testing.T) {
	cats := chain(t, "0.3")
	var got []File
	d, err := Diff(context.Background(), cats[3], catalogName, (wholeReads{}).list(t, cats[0]), Limits{}, func(f File) error {
		got = append(got, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := (wholeReads{}).setDifference(t, cats[3], cats[0]); len(d.Files) != 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("streamed %v, kept %v; want %v streamed", got, d.Files, want)
	}
}

// diffMisbehaving asks a difference's reader to misbehave first, given a
// list of eight files.
func diffMisbehaving(t *testing.T, child, behaviour string) (*Difference, error) {
	t.Helper()
	lim := Limits{}.WithDefaults()
	var eight []File
	for i := range 8 {
		eight = append(eight, File{Path: fmt.Sprintf("p%d.parquet", i), Size: 10, Footer: -1})
	}
	list := listOf(t, eight)
	dir := t.TempDir()
	for from, to := range map[string]string{child: "child.duckdb", list.Path: listName} {
		if err := linkOrCopy(from, filepath.Join(dir, to)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	proc, err := startReader(context.Background(), f, lim, 1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := proc.readDifference(context.Background(), request{name: catalogName, file: "child.duckdb", lim: lim, test: behaviour}, list, nil)
	if err == nil {
		proc.close()
	}
	return d, err
}

// A reader whose difference does not add up (the files announced are not
// the child's less those in the list, more in the list than the child
// has, the files cut short, a list of another length than was sent,
// entries of the list neither removed nor in the child, removed entries
// announced that do not come) has the child refused as a protocol
// failure.
func TestTheMirrorChecksTheCountsOfADifference(t *testing.T) {
	cats := chain(t, "0.1")
	for _, tc := range []struct{ lie, says string }{
		{"diff-count", "1 files announced, where 8 of the child's 10 rows are in the list and 0 folded"},
		{"diff-same", "where 11 of the child's 10 rows"},
		{"diff-short", "the end says 1 files"},
		{"diff-list", "a list of 9 entries, where 8 were sent"},
		{"diff-kept", "0 of the list's 8 entries removed, where 7 rows of the child are in it"},
		{"diff-removed", "1 removed entries announced, 0 came"},
	} {
		t.Run(tc.lie, func(t *testing.T) {
			d, err := diffMisbehaving(t, cats[1], "lie:"+tc.lie)
			var re *ReaderError
			if d != nil || !errors.As(err, &re) || re.Cause != CauseProtocol || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("%v, %v; want a protocol failure saying %q", d, err, tc.says)
			}
		})
	}
}

// A difference's reader may open its child's catalog and nothing else:
// not /etc/passwd, not a catalog beside its child in the same folder, not
// its parent's catalog (a planted one could take the reader over).
func TestADifferenceReaderOpensItsCatalogOnly(t *testing.T) {
	requireBothLayers(t)
	cats := chain(t, "0.1")
	for _, other := range []string{"/etc/passwd", cats[2], cats[0]} {
		d, err := diffMisbehaving(t, cats[1], "open:"+other)
		if d != nil || err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("a difference's reader opening %s: %v, %v; want permission denied", other, d, err)
		}
	}
	// Its own catalog it may read: the difference is taken.
	(wholeReads{}).checkDiff(t, cats[1], cats[0])
}
