package generate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// catalogFile is a data or delete file as a catalog lists it, resolved by
// the test itself (not by the generator's code).
type catalogFile struct {
	rel        string // path under the stored data path
	size       int64
	footer     int64
	delete     bool
	ended      bool
	scheduled  bool
	records    int64 // record_count, or delete_count for a delete file
	dataFileID int64 // for a delete file: the data file it applies to
}

// readCatalog opens a catalog read-only with DuckDB and lists its files,
// resolving relative paths as DuckLake does.
func readCatalog(t *testing.T, path string) (dataPath string, files []catalogFile, hasPaths bool) {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("ATTACH '" + strings.ReplaceAll(path, "'", "''") + "' AS c (READ_ONLY)"); err != nil {
		t.Fatalf("attach %s: %v", path, err)
	}
	if err := db.QueryRow("SELECT value FROM c.ducklake_metadata WHERE key = 'data_path'").Scan(&dataPath); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM duckdb_columns() WHERE database_name = 'c'
		AND table_name IN ('ducklake_schema', 'ducklake_table') AND column_name IN ('path', 'path_is_relative')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	hasPaths = n == 4
	prefix := "m.value"
	if hasPaths {
		prefix = `CASE WHEN t.path_is_relative THEN CASE WHEN s.path_is_relative THEN m.value || s.path ELSE s.path END || t.path ELSE t.path END`
	}
	q := `WITH m AS (SELECT value FROM c.ducklake_metadata WHERE key = 'data_path'),
		f AS (SELECT table_id, path, path_is_relative, file_size_bytes, footer_size, end_snapshot, FALSE AS del, record_count AS n, data_file_id FROM c.ducklake_data_file
			UNION ALL SELECT table_id, path, path_is_relative, file_size_bytes, footer_size, end_snapshot, TRUE, delete_count, data_file_id FROM c.ducklake_delete_file)
		SELECT CASE WHEN f.path_is_relative THEN ` + prefix + ` || f.path ELSE f.path END, f.file_size_bytes, f.footer_size, f.del, f.end_snapshot IS NOT NULL, f.n, f.data_file_id
		FROM f CROSS JOIN m JOIN c.ducklake_table t ON t.table_id = f.table_id JOIN c.ducklake_schema s ON s.schema_id = t.schema_id`
	rows, err := db.Query(q)
	if err != nil {
		t.Fatalf("list files of %s: %v", path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var full string
		var f catalogFile
		if err := rows.Scan(&full, &f.size, &f.footer, &f.delete, &f.ended, &f.records, &f.dataFileID); err != nil {
			t.Fatal(err)
		}
		rel, ok := strings.CutPrefix(full, dataPath)
		if !ok {
			t.Fatalf("catalog %s: file %s is not under data path %s", path, full, dataPath)
		}
		f.rel = rel
		files = append(files, f)
	}
	srows, err := db.Query("SELECT path FROM c.ducklake_files_scheduled_for_deletion")
	if err != nil {
		t.Fatal(err)
	}
	defer srows.Close()
	for srows.Next() {
		var p string
		if err := srows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		files = append(files, catalogFile{rel: p, scheduled: true})
	}
	return dataPath, files, hasPaths
}

func footerOf(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 12 || string(b[len(b)-4:]) != "PAR1" || string(b[:4]) != "PAR1" {
		t.Fatalf("%s is not a Parquet file", path)
	}
	return int64(binary.LittleEndian.Uint32(b[len(b)-8:]))
}

// checkRepository checks a generated repository against the FDL layout
// without trusting the generator: settings, HEAD, refs, refs.json, every
// version's record, sha256 and catalog, every file the catalogs list.
// It returns the repo-relative paths of the files the catalogs need.
func checkRepository(t *testing.T, r *Repo, dataDir string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(r.Dir, "fdl.json"))
	if err != nil {
		t.Fatal(err)
	}
	settings, err := repo.ParseSettings(raw)
	if err != nil {
		t.Fatal(err)
	}
	if settings.ID != r.ID || settings.DataDir != dataDir {
		t.Fatalf("fdl.json: id %q data_dir %q, want %q and %q", settings.ID, settings.DataDir, r.ID, dataDir)
	}
	if head, err := os.ReadFile(filepath.Join(r.Dir, "HEAD")); err != nil || string(head) != "ref: refs/heads/main\n" {
		t.Fatalf("HEAD = %q, %v", head, err)
	}
	refsJSON, err := os.ReadFile(filepath.Join(r.Dir, "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	listed, bad, err := repo.ParseRefsJSON(refsJSON)
	if err != nil || len(bad) > 0 {
		t.Fatalf("refs.json: %v %v", err, bad)
	}
	onDisk := map[string]string{}
	filepath.WalkDir(filepath.Join(r.Dir, "refs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(r.Dir, p)
			content, _ := os.ReadFile(p)
			id, err := repo.ParseRefFile(filepath.ToSlash(rel), content)
			if err != nil {
				t.Fatal(err)
			}
			onDisk[filepath.ToSlash(rel)] = id
		}
		return nil
	})
	if !mapsEqual(onDisk, listed) || !mapsEqual(onDisk, r.Refs) {
		t.Fatalf("ref files %v, refs.json %v, Repo.Refs %v differ", onDisk, listed, r.Refs)
	}
	if onDisk["refs/heads/main"] != r.Versions[len(r.Versions)-1] {
		t.Fatalf("refs/heads/main = %s, want the newest version %s", onDisk["refs/heads/main"], r.Versions[len(r.Versions)-1])
	}

	needed := map[string]bool{}
	for i, id := range r.Versions {
		if err := repo.CheckVersionID(id); err != nil {
			t.Fatal(err)
		}
		if i > 0 && id <= r.Versions[i-1] {
			t.Errorf("version IDs do not sort oldest first: %s after %s", id, r.Versions[i-1])
		}
		vdir := filepath.Join(r.Dir, "versions", id)
		content, err := os.ReadFile(filepath.Join(vdir, "version.json"))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := repo.ParseRecord(id, content)
		if err != nil {
			t.Fatal(err)
		}
		var wantParents []string
		if i > 0 {
			wantParents = []string{r.Versions[i-1]}
		}
		if !slices.Equal(rec.Parents, wantParents) {
			t.Errorf("version %s: parents %v, want %v", id, rec.Parents, wantParents)
		}
		catalogBytes, err := os.ReadFile(filepath.Join(vdir, "ducklake.duckdb"))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(catalogBytes)
		if hex.EncodeToString(sum[:]) != rec.SHA256 {
			t.Errorf("version %s: sha256 %s, record says %s", id, hex.EncodeToString(sum[:]), rec.SHA256)
		}
		entries, _ := os.ReadDir(vdir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".wal") || strings.HasPrefix(e.Name(), ".") {
				t.Errorf("version %s: stray file %s", id, e.Name())
			}
		}
		_, files, _ := readCatalog(t, filepath.Join(vdir, "ducklake.duckdb"))
		for _, f := range files {
			p := filepath.Join(r.Dir, filepath.FromSlash(dataDir+f.rel))
			if f.scheduled {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("version %s: file scheduled for deletion %s was written", id, f.rel)
				}
				continue
			}
			needed[dataDir+f.rel] = true
			fi, err := os.Stat(p)
			if err != nil {
				t.Errorf("version %s: %v", id, err)
				continue
			}
			if fi.Size() != f.size {
				t.Errorf("version %s: %s is %d bytes, catalog says %d", id, f.rel, fi.Size(), f.size)
			}
			if got := footerOf(t, p); got != f.footer {
				t.Errorf("version %s: %s footer is %d bytes, catalog says %d", id, f.rel, got, f.footer)
			}
		}
	}
	var paths []string
	for p := range needed {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestGenerateWritesTheFDLLayout(t *testing.T) {
	ctx := context.Background()
	signed := func(record []byte) ([]byte, error) {
		sum := sha256.Sum256(record)
		return []byte("test signature " + hex.EncodeToString(sum[:]) + "\n"), nil
	}
	r, err := Generate(ctx, t.TempDir(), Options{
		Versions: 3, FilesPerVersion: 2, DeleteFiles: true, RemoveFiles: true, ScheduledForDeletion: true,
		Tags: true, ExtraFiles: true, Signer: signed,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Versions) != 3 {
		t.Fatalf("%d versions, want 3", len(r.Versions))
	}
	needed := checkRepository(t, r, "data/")
	if !slices.Equal(needed, r.DataFiles) {
		t.Errorf("catalogs need %v, Repo.DataFiles says %v", needed, r.DataFiles)
	}
	for i, id := range r.Versions {
		if got := r.Refs["refs/tags/v"+string(rune('1'+i))]; got != id {
			t.Errorf("tag v%d = %s, want %s", i+1, got, id)
		}
		vdir := filepath.Join(r.Dir, "versions", id)
		record, _ := os.ReadFile(filepath.Join(vdir, "version.json"))
		sig, err := os.ReadFile(filepath.Join(vdir, "version.json.sig"))
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := signed(record); !bytes.Equal(sig, want) {
			t.Errorf("version %s: version.json.sig is not the signer's output over version.json", id)
		}
		for _, name := range []string{"dataset.json", "files.json"} {
			b, err := os.ReadFile(filepath.Join(vdir, name))
			if err != nil || !json.Valid(b) {
				t.Errorf("version %s: %s: %v (valid JSON: %v)", id, name, err, json.Valid(b))
			}
		}
	}
	settings, _ := os.ReadFile(filepath.Join(r.Dir, "fdl.json"))
	if strings.Contains(string(settings), "data_dir") {
		t.Errorf("fdl.json names the default data_dir: %s", settings)
	}
	for _, p := range r.DataFiles {
		if !strings.HasPrefix(p, "data/main/events/ducklake-") || !strings.HasSuffix(p, ".parquet") {
			t.Errorf("data file %s is not at data/<schema>/<table>/ducklake-<uuid>.parquet", p)
		}
	}
}

func TestLaterVersionsKeepHistoricalRows(t *testing.T) {
	ctx := context.Background()
	r, err := Generate(ctx, t.TempDir(), Options{Versions: 4, FilesPerVersion: 2, RowsPerFile: 50, DeleteFiles: true, RemoveFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	checkRepository(t, r, "data/")
	_, tip, _ := readCatalog(t, filepath.Join(r.Dir, "versions", r.Versions[3], "ducklake.duckdb"))
	var data, ended, deletes int
	for _, f := range tip {
		switch {
		case f.delete:
			deletes++
			if f.records != 5 {
				t.Errorf("delete file %s deletes %d rows of 50, want every tenth: 5", f.rel, f.records)
			}
		case f.ended:
			ended++
		default:
			data++
		}
	}
	// 8 files added, 3 ended by versions 2-4, one delete file per later version.
	if data != 5 || ended != 3 || deletes != 3 {
		t.Errorf("tip catalog: %d live data files, %d ended, %d delete files; want 5, 3, 3", data, ended, deletes)
	}
	// Each version's catalog holds the previous one's files.
	_, first, _ := readCatalog(t, filepath.Join(r.Dir, "versions", r.Versions[0], "ducklake.duckdb"))
	for _, f := range first {
		if !slices.ContainsFunc(tip, func(g catalogFile) bool { return g.rel == f.rel }) {
			t.Errorf("file %s of the first version is not in the tip's catalog", f.rel)
		}
	}
}

func TestDataFilesHoldTheirRecordedRows(t *testing.T) {
	ctx := context.Background()
	r, err := Generate(ctx, t.TempDir(), Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 37, DeleteFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	dataPath, files, _ := readCatalog(t, filepath.Join(r.Dir, "versions", r.Versions[1], "ducklake.duckdb"))
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	byID := map[int64]catalogFile{}
	for _, f := range files {
		if !f.delete {
			byID[f.dataFileID] = f
		}
	}
	for _, f := range files {
		p := filepath.Join(r.Dir, "data", filepath.FromSlash(f.rel))
		if f.delete {
			// A delete file names its data file by the catalog's data path.
			var target string
			var n int64
			if err := db.QueryRow("SELECT any_value(file_path), count(*) FROM read_parquet(?)", p).Scan(&target, &n); err != nil {
				t.Fatal(err)
			}
			if want := dataPath + byID[f.dataFileID].rel; target != want || n != f.records {
				t.Errorf("delete file %s: %d rows naming %s, want %d naming %s", f.rel, n, target, f.records, want)
			}
			continue
		}
		var n, ids int64
		if err := db.QueryRow("SELECT count(*), count(DISTINCT id) FROM read_parquet(?)", p).Scan(&n, &ids); err != nil {
			t.Fatal(err)
		}
		if n != f.records || n != 37 || ids != n {
			t.Errorf("data file %s: %d rows (%d distinct ids), catalog says %d", f.rel, n, ids, f.records)
		}
	}
}

func TestLayout01HasNoSchemaOrTablePaths(t *testing.T) {
	ctx := context.Background()
	r, err := Generate(ctx, t.TempDir(), Options{Versions: 2, Layout: "0.1", DataDir: "files/", DeleteFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	checkRepository(t, r, "files/")
	_, _, hasPaths := readCatalog(t, filepath.Join(r.Dir, "versions", r.Versions[1], "ducklake.duckdb"))
	if hasPaths {
		t.Error("a 0.1 catalog has path columns on ducklake_schema or ducklake_table")
	}
	for _, p := range r.DataFiles {
		if strings.Count(p, "/") != 1 || !strings.HasPrefix(p, "files/ducklake-") {
			t.Errorf("0.1 data file %s is not directly under the data_dir", p)
		}
	}
	settings, _ := os.ReadFile(filepath.Join(r.Dir, "fdl.json"))
	if !strings.Contains(string(settings), `"data_dir":"files/"`) {
		t.Errorf("fdl.json does not name the data_dir: %s", settings)
	}
}

func TestAddVersionExtendsMain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r, err := Generate(ctx, dir, Options{Versions: 2, Tags: true, DataDir: "d/"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := AddVersion(ctx, dir, 3, Options{Tags: true, DeleteFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	r.Versions = append(r.Versions, id)
	r.Refs["refs/heads/main"] = id
	r.Refs["refs/tags/v3"] = id
	needed := checkRepository(t, r, "d/")
	if len(needed) != len(r.DataFiles)+3+1 {
		t.Errorf("after AddVersion the catalogs need %d files, want %d (+3 data files, +1 delete file)", len(needed), len(r.DataFiles)+4)
	}
}

func TestLargeFileIsAboutTheAskedSize(t *testing.T) {
	ctx := context.Background()
	const size = 4 << 20
	r, err := Generate(ctx, t.TempDir(), Options{Versions: 1, FilesPerVersion: 1, LargeFiles: []int64{size}})
	if err != nil {
		t.Fatal(err)
	}
	checkRepository(t, r, "data/")
	var largest int64
	for _, p := range r.DataFiles {
		fi, err := os.Stat(filepath.Join(r.Dir, p))
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, fi.Size())
	}
	if largest < size*9/10 || largest > size*11/10 {
		t.Errorf("large file is %d bytes, asked for about %d", largest, size)
	}
}

func TestFastParquetReusesBytesWithExactCatalogSizes(t *testing.T) {
	ctx := context.Background()
	r, err := Generate(ctx, t.TempDir(), Options{Versions: 2, FilesPerVersion: 12, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	checkRepository(t, r, "data/")
	distinct := map[[32]byte]bool{}
	for _, p := range r.DataFiles {
		b, err := os.ReadFile(filepath.Join(r.Dir, p))
		if err != nil {
			t.Fatal(err)
		}
		distinct[sha256.Sum256(b)] = true
	}
	if len(r.DataFiles) != 24 || len(distinct) != fastTemplates {
		t.Errorf("%d data files with %d distinct contents, want 24 with %d", len(r.DataFiles), len(distinct), fastTemplates)
	}
}

func TestGenerateRefusesAnExistingRepository(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r, err := Generate(ctx, dir, Options{Versions: 1})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "fdl.json"))
	if _, err := Generate(ctx, dir, Options{Versions: 1}); err == nil {
		t.Fatal("a second Generate into the same directory succeeded")
	}
	after, _ := os.ReadFile(filepath.Join(dir, "fdl.json"))
	if !bytes.Equal(before, after) || !strings.Contains(string(after), r.ID) {
		t.Errorf("fdl.json changed: %s -> %s", before, after)
	}
}

func TestUUIDv7SortsInCreationOrder(t *testing.T) {
	prev := ""
	for i := 0; i < 20000; i++ {
		id := newUUIDv7()
		if err := repo.CheckVersionID(id); err != nil {
			t.Fatal(err)
		}
		if len(id) != 36 || id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("%s is not a UUIDv7", id)
		}
		if id <= prev {
			t.Fatalf("%s made after %s sorts before it", id, prev)
		}
		prev = id
	}
}

// sharedDir is ../shared beside the repository (FDL_SHARED overrides).
func sharedDir(t *testing.T) string {
	if d := os.Getenv("FDL_SHARED"); d != "" {
		return d
	}
	d, err := filepath.Abs(filepath.Join("..", "..", "..", "shared"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func fixture(t *testing.T, name string) string {
	p := filepath.Join(sharedDir(t), "fixtures", "ducklake", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("fixture %s not available (set FDL_SHARED to the shared folder): %v", p, err)
	}
	return p
}

func TestFromFixtureKeepsTheMismatchedDeleteFile(t *testing.T) {
	ctx := context.Background()
	gz := fixture(t, "delete_ignore_extra_columns.db.gz")
	r, err := FromFixture(ctx, gz, strings.TrimSuffix(gz, ".db.gz"), t.TempDir(), 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Missing) != 0 || len(r.DataFiles) != 2 {
		t.Fatalf("copied %v, missing %v; want the data file and the delete file", r.DataFiles, r.Missing)
	}
	_, files, _ := readCatalog(t, filepath.Join(r.Dir, "versions", r.Versions[0], "ducklake.duckdb"))
	for _, f := range files {
		fi, err := os.Stat(filepath.Join(r.Dir, "data", filepath.FromSlash(f.rel)))
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.Stat(filepath.Join(strings.TrimSuffix(gz, ".db.gz"), filepath.FromSlash(f.rel)))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != src.Size() {
			t.Errorf("%s: copied %d bytes of %d", f.rel, fi.Size(), src.Size())
		}
		if f.delete && fi.Size() == f.size {
			t.Errorf("delete file %s matches its recorded size %d: the fixture's mismatch was lost", f.rel, f.size)
		}
		if !f.delete && fi.Size() != f.size {
			t.Errorf("data file %s is %d bytes, catalog says %d", f.rel, fi.Size(), f.size)
		}
	}
	// The catalog is the fixture's, byte for byte, when nothing is added.
	rec, _ := os.ReadFile(filepath.Join(r.Dir, "versions", r.Versions[0], "version.json"))
	parsed, err := repo.ParseRecord(r.Versions[0], rec)
	if err != nil {
		t.Fatal(err)
	}
	catalogBytes, _ := os.ReadFile(filepath.Join(r.Dir, "versions", r.Versions[0], "ducklake.duckdb"))
	if sum := sha256.Sum256(catalogBytes); hex.EncodeToString(sum[:]) != parsed.SHA256 {
		t.Error("catalog does not match its record's sha256")
	}
}

func TestFromFixtureAddsFilesInTheCatalogsLayout(t *testing.T) {
	for _, tc := range []struct {
		fixture  string
		parquet  bool
		prefix   string // where added files go
		hasPaths bool
	}{
		{"v01.db.gz", false, "data/ducklake-", false},
		{"v04.db.gz", false, "data/main/test/ducklake-", true},
		{"delete_ignore_extra_columns.db.gz", true, "data/main/test/ducklake-", true},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			ctx := context.Background()
			gz := fixture(t, tc.fixture)
			parquetDir := ""
			if tc.parquet {
				parquetDir = strings.TrimSuffix(gz, ".db.gz")
			}
			r, err := FromFixture(ctx, gz, parquetDir, t.TempDir(), 2, Options{Tags: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Missing) != 0 {
				t.Fatalf("missing %v", r.Missing)
			}
			_, files, hasPaths := readCatalog(t, filepath.Join(r.Dir, "versions", r.Versions[0], "ducklake.duckdb"))
			if hasPaths != tc.hasPaths {
				t.Errorf("catalog has schema/table paths: %v, want %v", hasPaths, tc.hasPaths)
			}
			added := 0
			for _, p := range r.DataFiles {
				if strings.HasPrefix(p, tc.prefix) && !strings.Contains(p, "01995275") {
					added++
				}
			}
			if added != 2 {
				t.Errorf("data files %v: want 2 new ones under %s", r.DataFiles, tc.prefix)
			}
			for _, f := range files {
				p := filepath.Join(r.Dir, "data", filepath.FromSlash(f.rel))
				fi, err := os.Stat(p)
				if err != nil {
					t.Error(err)
					continue
				}
				if !f.delete && (fi.Size() != f.size || footerOf(t, p) != f.footer) {
					t.Errorf("%s: %d bytes footer %d, catalog says %d footer %d", f.rel, fi.Size(), footerOf(t, p), f.size, f.footer)
				}
			}
			if r.Refs["refs/tags/v1"] != r.Versions[0] || r.Refs["refs/heads/main"] != r.Versions[0] {
				t.Errorf("refs %v", r.Refs)
			}
		})
	}
}
