package catalog

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// oneVersion is the one-version repository every generatedCatalog starts
// from, generated once per test process: some thirty tests each took
// DuckDB's time to write it again. TestMain removes it.
var oneVersion struct {
	sync.Mutex
	dir, version string
}

// generatedCatalog copies a generated one-version repository and returns
// its catalog after running stmts on it, as a hostile publisher would.
func generatedCatalog(t *testing.T, stmts ...string) string {
	t.Helper()
	oneVersion.Lock()
	if oneVersion.dir == "" {
		parent, err := os.MkdirTemp("", "catalog-test-template-")
		if err != nil {
			oneVersion.Unlock()
			t.Fatal(err)
		}
		dir := filepath.Join(parent, "repo")
		r, err := generate.Generate(context.Background(), dir, generate.Options{Versions: 1, FilesPerVersion: 2, FastParquet: true})
		if err != nil {
			os.RemoveAll(parent)
			oneVersion.Unlock()
			t.Fatal(err)
		}
		oneVersion.dir, oneVersion.version = dir, r.Versions[0]
	}
	src, version := oneVersion.dir, oneVersion.version
	oneVersion.Unlock()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "versions", version, "ducklake.duckdb")
	runSQL(t, "duckdb", p, append(stmts, "CHECKPOINT")...)
	return p
}

// runSQL runs stmts, in order, on the database at path.
func runSQL(t *testing.T, driver, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open(driver, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

const catalogName = "versions/019a0000-0000-7000-8000-000000000000/ducklake.duckdb"

// readHostile reads a hostile catalog and checks the refusal names the
// catalog as the repository does, never its local copy.
func readHostile(t *testing.T, p string, lim Limits, want ...string) error {
	t.Helper()
	_, err := readHostileTimed(t, p, lim, want...)
	return err
}

// readHostileTimed is readHostile, returning as well how long Read took
// (the pooled read after it not counted).
func readHostileTimed(t *testing.T, p string, lim Limits, want ...string) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	_, err := Read(context.Background(), p, catalogName, lim)
	took := time.Since(start)
	if err == nil {
		t.Fatal("a hostile catalog was read")
	}
	msg := err.Error()
	if !strings.Contains(msg, catalogName) || strings.Contains(msg, p) {
		t.Errorf("the refusal must name %s and not the local copy %s: %v", catalogName, p, err)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("the refusal does not say %q: %v", w, err)
		}
	}
	if took > 10*time.Second {
		t.Errorf("refusing took %s", took)
	}
	// A pooled DuckDB refuses it alike, and is not used again after.
	pool := newTestPool(t, lim)
	_, perr := pool.Read(context.Background(), copyInto(t, p, pool.Dir()), catalogName)
	if perr == nil || perr.Error() != msg {
		t.Errorf("a pooled DuckDB read it as %v, not as Read's %v", perr, err)
	}
	if n := pool.idleCount(); n != 0 {
		t.Errorf("after a refusal the pool keeps %d idle instances, want 0", n)
	}
	return took, err
}

// dataFileView is a ducklake_data_file of the right shape that runs the
// given FROM clause.
func dataFileView(from, path string) []string {
	return []string{
		"DROP TABLE ducklake_data_file",
		"CREATE VIEW ducklake_data_file AS SELECT i AS data_file_id, 1::BIGINT AS table_id, 1::BIGINT AS begin_snapshot, NULL::BIGINT AS end_snapshot, " +
			path + " AS path, true AS path_is_relative, 10::BIGINT AS file_size_bytes FROM " + from,
	}
}

func TestReadRefusesViewsAndMacrosNamingThem(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stmts  []string
		object string
	}{
		{"a view over range(1e15)", dataFileView("range(1e15::BIGINT) t(i)", "'f' || i || '.parquet'"), "main.ducklake_data_file is a view"},
		{"a view leaking the mirror's settings", dataFileView("range(1) t(i)", "current_setting('memory_limit')"), "main.ducklake_data_file is a view"},
		{"a view in place of ducklake_metadata", []string{
			"DROP TABLE ducklake_metadata",
			"CREATE VIEW ducklake_metadata AS SELECT 'data_path' AS key, current_setting('threads')::VARCHAR AS value, NULL AS scope",
		}, "main.ducklake_metadata is a view"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readHostile(t, generatedCatalog(t, tc.stmts...), Limits{}, tc.object, "not a table")
		})
	}
}

// A catalog's macros never run: the reader's queries name the catalog's
// tables in full (cat.main.ducklake_data_file: a table, never a table
// macro, which is called with parentheses) and call DuckDB's own
// functions unqualified, which resolve in the reader's own database and
// DuckDB's system schema, never in an attached catalog. So a catalog may
// hold macros of any name (DuckLake writes none): each of these, named
// as a table read or as a function the reader's queries call, would end
// the read with its error if it ran, and the catalog is read as if it
// had none, whole and as a difference.
func TestReadNeverRunsTheCatalogsMacros(t *testing.T) {
	var stmts []string
	for _, f := range []string{"coalesce", "strlen", "length", "lower", "left", "substr", "starts_with", "count", "min", "max", "sum", "arg_min", "row_number", "current_setting"} {
		stmts = append(stmts, fmt.Sprintf(`CREATE MACRO "%[1]s"(a := NULL, b := NULL, c := NULL) AS error('the catalog''s macro %[1]s ran')`, f))
	}
	for _, table := range append([]string{"ducklake_files", "duckdb_views", "duckdb_columns", "duckdb_functions", "pragma_table_info"}, tablesRead...) {
		stmts = append(stmts, fmt.Sprintf(`CREATE MACRO "%[1]s"() AS TABLE SELECT error('the catalog''s table macro %[1]s ran') AS path`, table))
	}
	clean := generatedCatalog(t)
	want, err := Read(context.Background(), clean, catalogName, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	hostile := changed(t, clean, stmts...)
	got, err := Read(context.Background(), hostile, catalogName, Limits{})
	if err != nil {
		t.Fatalf("a catalog with macros: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("a catalog with macros reads as\n%+v\nwithout them\n%+v", got, want)
	}
	pool, err := NewPool(t.TempDir(), 1, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if got, err := pool.Read(context.Background(), copyInto(t, hostile, pool.Dir()), catalogName); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("pooled: %+v, %v", got, err)
	}
	d, err := Diff(context.Background(), hostile, catalogName, listOf(t, want.Files), Limits{}, nil)
	if err != nil || len(d.Files) != 0 || d.SameRows != d.ChildRows {
		t.Fatalf("against itself without macros: %+v, %v", d, err)
	}
}

func TestReadRefusesAGeneratedColumn(t *testing.T) {
	p := generatedCatalog(t,
		"DROP TABLE ducklake_data_file",
		"CREATE TABLE ducklake_data_file (data_file_id BIGINT, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, path_is_relative BOOLEAN, file_size_bytes BIGINT, path VARCHAR AS (current_setting('memory_limit')))",
		"INSERT INTO ducklake_data_file VALUES (1, 1, 1, NULL, true, 10)",
	)
	readHostile(t, p, Limits{}, "ducklake_data_file.path", "generated")
}

// A column's default is refused as a generated column is, and both are
// found whether the columns are asked for table by table or, where a
// table read is missing (ducklake_table here: that query fails), listed
// for the whole schema.
func TestReadRefusesAColumnsExpressionWhicheverWayColumnsAreListed(t *testing.T) {
	withDefault := []string{
		"DROP TABLE ducklake_delete_file",
		"CREATE TABLE ducklake_delete_file (delete_file_id BIGINT, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, data_file_id BIGINT, path VARCHAR, path_is_relative BOOLEAN, format VARCHAR, file_size_bytes BIGINT DEFAULT (length(current_setting('memory_limit'))))",
	}
	generated := []string{
		"DROP TABLE ducklake_data_file",
		"CREATE TABLE ducklake_data_file (data_file_id BIGINT, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, path_is_relative BOOLEAN, file_size_bytes BIGINT, path VARCHAR AS (current_setting('memory_limit')))",
		"INSERT INTO ducklake_data_file VALUES (1, 1, 1, NULL, true, 10)",
	}
	for _, tc := range []struct {
		name  string
		stmts []string
		want  string
	}{
		{"a default", withDefault, "ducklake_delete_file.file_size_bytes"},
		{"a default, ducklake_table missing", append([]string{"DROP TABLE ducklake_table"}, withDefault...), "ducklake_delete_file.file_size_bytes"},
		{"a generated column, ducklake_table missing", append([]string{"DROP TABLE ducklake_table"}, generated...), "ducklake_data_file.path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readHostile(t, generatedCatalog(t, tc.stmts...), Limits{}, tc.want, "default or generated expression")
		})
	}
	// Without either, the catalog missing ducklake_table reads: its
	// columns listed the second way.
	c, err := Read(context.Background(), generatedCatalog(t, "DROP TABLE ducklake_table"), catalogName, Limits{})
	if err != nil || len(c.Files) == 0 {
		t.Fatalf("a catalog without ducklake_table: %+v, %v", c, err)
	}
}

func TestReadRefusesMoreFilesThanTheLimitBeforeReadingThem(t *testing.T) {
	p := generatedCatalog(t,
		"INSERT INTO ducklake_data_file (data_file_id, table_id, begin_snapshot, path, path_is_relative, file_size_bytes) "+
			"SELECT 1000 + i, 1, 1, 'extra-' || i || '.parquet', true, 10 FROM range(5000) t(i)")
	err := readHostile(t, p, Limits{MaxFiles: 1000}, "5002 rows", "1000 files", KeyMaxFiles)
	var le *LimitError
	if !errors.As(err, &le) || le.Key != KeyMaxFiles {
		t.Errorf("not a LimitError on %s: %#v", KeyMaxFiles, err)
	}
	// The same catalog within the limit reads.
	c, err := Read(context.Background(), p, catalogName, Limits{MaxFiles: 5002})
	if err != nil || len(c.Files) != 5002 {
		t.Fatalf("within the limit: %v", err)
	}
}

func TestReadInterruptsACatalogReadPastItsTimeout(t *testing.T) {
	p := generatedCatalog(t,
		"INSERT INTO ducklake_data_file (data_file_id, table_id, begin_snapshot, path, path_is_relative, file_size_bytes) "+
			"SELECT 1000 + i, 1, 1, 'extra-' || i || '.parquet', true, 10 FROM range(300000) t(i)")
	// Reading 300,000 rows takes far more than 20 ms even on a fast
	// machine; the read must stop at the limit, not at its end, nor at
	// the mirror's kill readerGrace later. The time is Read's alone,
	// the reader's start included: not the pooled read readHostile
	// makes after it (both together came near a second under -race).
	const limit = 20 * time.Millisecond
	// Any bound below readerGrace (the mirror's kill) tells the two
	// apart; Read took 0.2–0.5 s here beside another package's tests.
	took, err := readHostileTimed(t, p, Limits{Timeout: limit}, "longer than 20ms", KeyTimeout)
	t.Logf("Read took %s", took)
	if took > readerGrace*3/4 {
		t.Errorf("a read with a %s limit took %s: not interrupted", limit, took)
	}
	var le *LimitError
	if !errors.As(err, &le) || le.Key != KeyTimeout {
		t.Errorf("not a LimitError on %s: %#v", KeyTimeout, err)
	}
}

func TestReadRefusesACatalogPastTheMemoryLimit(t *testing.T) {
	p := generatedCatalog(t,
		"UPDATE ducklake_data_file SET path = repeat('x', 24 << 20) WHERE data_file_id = (SELECT min(data_file_id) FROM ducklake_data_file)")
	err := readHostile(t, p, Limits{MemoryLimit: 8 << 20}, "memory limit of 8 MiB", KeyMemoryLimit)
	var le *LimitError
	if !errors.As(err, &le) || le.Key != KeyMemoryLimit {
		t.Errorf("not a LimitError on %s: %#v", KeyMemoryLimit, err)
	}
}

// emptySQLiteDatabase is the one page sqlite3 writes for a new database:
// enough for DuckDB to detect the format (and, unlocked, to go looking
// for its sqlite extension).
func emptySQLiteDatabase() []byte {
	b := make([]byte, 4096)
	copy(b, "SQLite format 3\x00")
	binary.BigEndian.PutUint16(b[16:], 4096) // page size
	b[18], b[19] = 1, 1                      // file format versions
	b[21], b[22], b[23] = 64, 32, 32         // payload fractions
	binary.BigEndian.PutUint32(b[24:], 1)    // change counter
	binary.BigEndian.PutUint32(b[28:], 1)    // pages
	binary.BigEndian.PutUint32(b[44:], 4)    // schema format
	binary.BigEndian.PutUint32(b[56:], 1)    // UTF-8
	binary.BigEndian.PutUint32(b[92:], 1)    // version-valid-for
	binary.BigEndian.PutUint32(b[96:], 3045000)
	b[100] = 0x0d                             // leaf table b-tree page
	binary.BigEndian.PutUint16(b[105:], 4096) // cell content start
	return b
}

func TestReadRefusesASQLiteFileWithoutLookingForAnExtension(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	p := filepath.Join(t.TempDir(), "ducklake.duckdb")
	if err := os.WriteFile(p, emptySQLiteDatabase(), 0o644); err != nil {
		t.Fatal(err)
	}
	// SQLite catalogs are read by SQLite (sqlite.go), never by DuckDB's
	// extension: this one has no tables.
	err := readHostile(t, p, Limits{}, "no ducklake_metadata table")
	if strings.Contains(strings.ToLower(err.Error()), "extension") || strings.Contains(strings.ToLower(err.Error()), "sqlite_scanner") {
		t.Errorf("DuckDB went for an extension: %v", err)
	}
	if entries, _ := os.ReadDir(home); len(entries) != 0 {
		t.Errorf("DuckDB wrote into $HOME: %v", entries)
	}
}

func TestFetchRefusesACatalogLargerThanTheLimitAndRemovesItsCopy(t *testing.T) {
	src := t.TempDir()
	name := "versions/019a0000-0000-7000-8000-000000000000/ducklake.duckdb"
	os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755)
	if err := os.WriteFile(filepath.Join(src, name), make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := local.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tmp := t.TempDir()
	_, err = Fetch(context.Background(), store, name, tmp, 1<<20)
	var le *LimitError
	if !errors.As(err, &le) || le.Key != KeyMaxSize || !strings.Contains(err.Error(), "1 MiB") || !strings.Contains(err.Error(), name) {
		t.Fatalf("a 3 MiB catalog against a 1 MiB limit: %v", err)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("the refused copy was left: %v", entries)
	}
	f, err := Fetch(context.Background(), store, name, tmp, 3<<20)
	if err != nil || f.Size != 3<<20 {
		t.Fatalf("a catalog of exactly the limit: %v", err)
	}
	f.Remove()
}

// peakRSS is this process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kib)
			return kib << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// A table path of 8 MB under 200 relative file rows (issue 25: 9.4 GB
// and 104 s when each row's path was joined to it) is refused at its
// first row, before anything is joined: the refusal quotes a short
// excerpt of the path, and neither the reader nor this process grows by
// more than a generous bound.
func TestReadRefusesAnEightMegabytePathBeforeJoiningIt(t *testing.T) {
	p := generatedCatalog(t,
		"UPDATE ducklake_table SET path = repeat('x', 8 << 20) || '/', path_is_relative = true",
		"INSERT INTO ducklake_data_file (data_file_id, table_id, begin_snapshot, path, path_is_relative, file_size_bytes) "+
			"SELECT 1000 + i, (SELECT min(table_id) FROM ducklake_table), 1, 'f-' || i || '.parquet', true, 10 FROM range(200) t(i)")
	// Reset this process's high-water mark, where the kernel lets it:
	// generating the catalog took DuckDB's memory, not the read.
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	before := peakRSS(t)
	readerPeakRSS.Store(0)
	err := readHostile(t, p, Limits{}, "1024 bytes", "object stores' key limit", "8388609 bytes")
	if len(err.Error()) > 1024 {
		t.Errorf("the refusal is %d bytes long: %.200s…", len(err.Error()), err)
	}
	const bound = 150 << 20
	if grew := peakRSS(t) - before; grew > bound {
		t.Errorf("this process's peak resident set grew by %d MiB reading it", grew>>20)
	}
	if r := readerPeakRSS.Load(); r == 0 || r > bound {
		t.Errorf("the readers' peak resident set: %d MiB (0: not measured)", r>>20)
	}
}
