package catalog

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// sqliteCatalog generates a repository, copies its last version's DuckDB
// catalog into SQLite as newer FDL tools keep metadata.db, runs stmts on
// the SQLite file (a hostile publisher's changes) and returns both paths.
func sqliteCatalog(t *testing.T, opts generate.Options, stmts ...string) (duck, lite string) {
	t.Helper()
	dir := t.TempDir()
	opts.FastParquet = true
	r, err := generate.Generate(context.Background(), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	duck = filepath.Join(dir, "versions", r.Versions[len(r.Versions)-1], "ducklake.duckdb")
	lite = filepath.Join(t.TempDir(), "metadata.db")
	if err := generate.CatalogToSQLite(context.Background(), duck, lite); err != nil {
		t.Fatal(err)
	}
	if len(stmts) > 0 {
		runSQL(t, "sqlite3", lite, stmts...)
	}
	return duck, lite
}

// A SQLite catalog reads to exactly what its DuckDB original reads to:
// the same tables through the same queries, schema and table paths,
// delete files, historical rows and footer sizes included.
func TestReadSQLiteCatalogListsWhatItsDuckDBOriginalLists(t *testing.T) {
	for _, layout := range []string{"0.3", "0.1"} {
		t.Run(layout, func(t *testing.T) {
			duck, lite := sqliteCatalog(t, generate.Options{Versions: 3, Layout: layout, DeleteFiles: true, RemoveFiles: true})
			want, err := Read(context.Background(), duck, "", Limits{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := Read(context.Background(), lite, "versions/x/metadata.db", Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("SQLite catalog reads to\n%+v\nits DuckDB original to\n%+v", got, want)
			}
			deletes := 0
			for _, f := range got.Files {
				if f.Delete {
					deletes++
				}
			}
			if len(got.Files) < 6 || deletes == 0 {
				t.Errorf("%d files, %d delete files: the generated catalog is not what this test needs", len(got.Files), deletes)
			}
		})
	}
}

const sqliteName = "versions/019a0000-0000-7000-8000-000000000000/metadata.db"

func readHostileSQLite(t *testing.T, p string, lim Limits, want ...string) error {
	t.Helper()
	_, err := Read(context.Background(), p, sqliteName, lim)
	if err == nil {
		t.Fatal("a hostile SQLite catalog was read")
	}
	if !strings.Contains(err.Error(), sqliteName) || strings.Contains(err.Error(), p) {
		t.Errorf("the refusal must name %s and not the local copy %s: %v", sqliteName, p, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal does not say %q: %v", w, err)
		}
	}
	return err
}

// Objects that would run code the file chose when the catalog is read are
// refused, naming the object: a view (its query), a virtual table (its
// module), a trigger, a generated column.
func TestReadRefusesSQLiteObjectsThatRunCodeNamingThem(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stmts []string
		want  []string
	}{
		{"a view in place of ducklake_data_file", []string{
			"DROP TABLE ducklake_data_file",
			"CREATE VIEW ducklake_data_file AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n) " +
				"SELECT i AS data_file_id, 1 AS table_id, 1 AS begin_snapshot, NULL AS end_snapshot, 'f' || i AS path, 1 AS path_is_relative, 10 AS file_size_bytes FROM n",
		}, []string{"ducklake_data_file is a view", "not a table"}},
		{"a virtual table in place of ducklake_delete_file", []string{
			"DROP TABLE ducklake_delete_file",
			"CREATE VIRTUAL TABLE ducklake_delete_file USING fts4(path)",
		}, []string{"ducklake_delete_file is a virtual table"}},
		{"a trigger on ducklake_snapshot", []string{
			"CREATE TRIGGER sneaky AFTER INSERT ON ducklake_snapshot BEGIN DELETE FROM ducklake_data_file; END",
		}, []string{"trigger sneaky on ducklake_snapshot"}},
		{"a generated column", []string{
			"DROP TABLE ducklake_delete_file",
			"CREATE TABLE ducklake_delete_file (delete_file_id INTEGER, table_id INTEGER, begin_snapshot INTEGER, end_snapshot INTEGER, " +
				"data_file_id INTEGER, path_is_relative BOOLEAN, file_size_bytes INTEGER, format VARCHAR, path VARCHAR GENERATED ALWAYS AS (format || '.parquet') VIRTUAL)",
			"INSERT INTO ducklake_delete_file (delete_file_id, table_id, begin_snapshot, path_is_relative, file_size_bytes) VALUES (1, 1, 1, 1, 10)",
		}, []string{"column ducklake_delete_file.path", "generated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, lite := sqliteCatalog(t, generate.Options{Versions: 1}, tc.stmts...)
			readHostileSQLite(t, lite, Limits{}, tc.want...)
		})
	}
}

func TestReadSQLiteKeepsTheRowAndTimeLimits(t *testing.T) {
	_, lite := sqliteCatalog(t, generate.Options{Versions: 1},
		"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 300000) "+
			"INSERT INTO ducklake_data_file (data_file_id, table_id, begin_snapshot, path, path_is_relative, file_size_bytes) "+
			"SELECT 1000 + i, 1, 1, 'extra-' || i || '.parquet', 1, 10 FROM n")
	err := readHostileSQLite(t, lite, Limits{MaxFiles: 1000}, "300002 rows", "1000 files", KeyMaxFiles)
	var le *LimitError
	if !errors.As(err, &le) || le.Key != KeyMaxFiles {
		t.Errorf("not a LimitError on %s: %#v", KeyMaxFiles, err)
	}

	// Reading 300,000 rows takes far more than 20 ms; the read must stop
	// at the limit (SQLite is interrupted), not at its end.
	const limit = 20 * time.Millisecond
	start := time.Now()
	err = readHostileSQLite(t, lite, Limits{Timeout: limit}, "longer than 20ms", KeyTimeout)
	if took := time.Since(start); took > time.Second {
		t.Errorf("a read with a %s limit took %s: not interrupted", limit, took)
	}
	if !errors.As(err, &le) || le.Key != KeyTimeout {
		t.Errorf("not a LimitError on %s: %#v", KeyTimeout, err)
	}
}

// A value past the length SQLite may produce for a catalog (a path of
// 24 MiB) is refused naming SQLite's own limit, not DuckDB's memory
// limit (which has nothing to do with it), and is not allocated.
func TestReadSQLiteRefusesAHugeValue(t *testing.T) {
	_, lite := sqliteCatalog(t, generate.Options{Versions: 1},
		"UPDATE ducklake_data_file SET path = hex(zeroblob(12 << 20)) WHERE data_file_id = (SELECT min(data_file_id) FROM ducklake_data_file)")
	err := readHostileSQLite(t, lite, Limits{}, "SQLite's length limit of "+FormatBytes(sqliteMaxLength), "SQLITE_LIMIT_LENGTH")
	if strings.Contains(err.Error(), "DuckDB") || strings.Contains(err.Error(), KeyMemoryLimit) {
		t.Errorf("the refusal names DuckDB's memory limit: %v", err)
	}
}
