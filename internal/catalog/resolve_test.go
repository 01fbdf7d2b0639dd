package catalog

import (
	"database/sql"
	"path"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

func nullPlace(p string, relative bool, begin, end int64, parent int64) place {
	pl := place{path: sql.NullString{String: p, Valid: true}, relative: sql.NullBool{Bool: relative, Valid: true}, parent: parent}
	if begin >= 0 {
		pl.begin = sql.NullInt64{Int64: begin, Valid: true}
	}
	if end >= 0 {
		pl.end = sql.NullInt64{Int64: end, Valid: true}
	}
	return pl
}

// fuzzResolver is a catalog of one schema (id 1) holding one table (id 7)
// that was renamed at snapshot 5: its path before and after differ.
func fuzzResolver(dataPath, schemaPath string, schemaRel bool, tablePath string, tableRel bool, renamedPath string) *resolver {
	return &resolver{
		dataPath: dataPath,
		schemas:  map[int64][]place{1: {nullPlace(schemaPath, schemaRel, 0, -1, 0)}},
		tables: map[int64][]place{7: {
			nullPlace(tablePath, tableRel, 0, 5, 1),
			nullPlace(renamedPath, tableRel, 5, -1, 1),
		}},
	}
}

func TestResolveJoinsTheRelativeParts(t *testing.T) {
	r := fuzzResolver("/var/lib/pub/data/", "main/", true, "events/", true, "events2/")
	for _, tc := range []struct {
		begin    int64
		file     string
		relative bool
		want     string
	}{
		{1, "a.parquet", true, "main/events/a.parquet"},
		{6, "a.parquet", true, "main/events2/a.parquet"},
		{1, "/var/lib/pub/data/x/b.parquet", false, "x/b.parquet"},
		// Bases are kept by table and snapshot: asked again, each
		// snapshot's is its own.
		{1, "c.parquet", true, "main/events/c.parquet"},
		{6, "c.parquet", true, "main/events2/c.parquet"},
	} {
		got, err := r.resolve(sql.NullInt64{Int64: 7, Valid: true}, sql.NullInt64{Int64: tc.begin, Valid: true}, tc.file, tc.relative)
		if err != nil || got != tc.want {
			t.Errorf("%d %q: %q, %v; want %q", tc.begin, tc.file, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		r    *resolver
		file string
		rel  bool
		why  string
	}{
		{r, "../../../etc/passwd", true, "clean relative path"},
		{r, "/etc/passwd", false, "outside the catalog's data path"},
		{r, "/var/lib/pub/data", false, "outside the catalog's data path"},
		{fuzzResolver("/d/", "/etc/", false, "", true, ""), "passwd", true, "outside the catalog's data path"},
		{fuzzResolver("/d/", "main/", true, "../../", true, ""), "x", true, "clean relative path"},
		{fuzzResolver("/d/", "main", true, "events/", true, ""), "x", true, ""}, // joins to "/d/mainevents/x": inside, if odd
	} {
		got, err := tc.r.resolve(sql.NullInt64{Int64: 7, Valid: true}, sql.NullInt64{Int64: 1, Valid: true}, tc.file, tc.rel)
		if tc.why == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.file, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%q: %q, %v; want an error saying %q", tc.file, got, err, tc.why)
		}
	}
}

// Whatever the catalog's paths hold, a file it lists resolves to a clean
// relative path below data_dir (no "..", ".", empty segment or leading
// "/"), that is exactly what follows the stored data path, or is refused
// with the file named.
func FuzzResolve(f *testing.F) {
	f.Fuzz(func(t *testing.T, dataPath, schemaPath string, schemaRel bool, tablePath string, tableRel bool, renamedPath string, begin int64, filePath string, fileRel bool) {
		if dataPath == "" || filePath == "" {
			return // refused before resolving: metadata() and read()
		}
		if !strings.HasSuffix(dataPath, "/") {
			dataPath += "/" // as metadata() stores it
		}
		r := fuzzResolver(dataPath, schemaPath, schemaRel, tablePath, tableRel, renamedPath)
		for _, table := range []int64{7, 99} { // known, and unknown to ducklake_table
			rel, err := r.resolve(sql.NullInt64{Int64: table, Valid: true}, sql.NullInt64{Int64: begin, Valid: true}, filePath, fileRel)
			if err != nil {
				if !strings.HasPrefix(err.Error(), "file ") {
					t.Fatalf("error does not name the file: %v", err)
				}
				continue
			}
			if err := backend.CheckName(rel); err != nil {
				t.Fatalf("resolved to %q: %v", rel, err)
			}
			if len(rel) > MaxPathBytes {
				t.Fatalf("resolved to a path of %d bytes, more than %d", len(rel), MaxPathBytes)
			}
			if path.IsAbs(rel) || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Fatalf("resolved to %q, which leaves data_dir", rel)
			}
			for _, seg := range strings.Split(rel, "/") {
				if seg == ".." || seg == "." || seg == "" {
					t.Fatalf("resolved to %q with segment %q", rel, seg)
				}
			}
			// In the mirror the file sits at data_dir + rel: still below it.
			if p := path.Join("data", rel); !strings.HasPrefix(p, "data/") {
				t.Fatalf("resolved to %q, placed at %q", rel, p)
			}
			if !fileRel && filePath != dataPath+rel {
				t.Fatalf("absolute %q resolved to %q, not the part after %q", filePath, rel, dataPath)
			}
		}
	})
}

// A catalog whose rows each begin in a snapshot of their own resolves as
// any other, and its resolver keeps no more than maxBases bases.
func TestResolverKeepsBoundedBases(t *testing.T) {
	r := fuzzResolver("/var/lib/pub/data/", "main/", true, "events/", true, "events2/")
	for i := range 3 * maxBases {
		begin := int64(i)
		want := "main/events/f.parquet"
		if begin >= 5 {
			want = "main/events2/f.parquet"
		}
		got, err := r.resolve(sql.NullInt64{Int64: 7, Valid: true}, sql.NullInt64{Int64: begin, Valid: true}, "f.parquet", true)
		if err != nil || got != want {
			t.Fatalf("snapshot %d: %q, %v; want %q", begin, got, err, want)
		}
	}
	if len(r.bases) > maxBases {
		t.Fatalf("%d bases kept, more than %d", len(r.bases), maxBases)
	}
}
