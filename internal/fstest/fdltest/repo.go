package fdltest

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// What tests of the engine and of the command both do to an upstream on
// disk: generate it, make it hostile, and look at what a mirror published.

// Layout makes an upstream and a mirror path side by side in one parent,
// so that a test can see anything written beside them (Outside).
func Layout(t testing.TB) (parent, up, mirror string) {
	t.Helper()
	parent = t.TempDir()
	return parent, filepath.Join(parent, "upstream"), filepath.Join(parent, "mirror")
}

// Generate writes a repository into dir with DuckDB.
func Generate(t testing.TB, dir string, opts generate.Options) *generate.Repo {
	t.Helper()
	r, err := generate.Generate(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("generating %s: %v", dir, err)
	}
	return r
}

// WriteFile writes content at path, making its folders.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Append adds bytes at the end of a file: the same name, another size and
// another hash.
func Append(t testing.TB, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// ReadRef returns the version a ref file in a local repository names, ""
// when there is no such ref.
func ReadRef(t testing.TB, dir, ref string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(ref)))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Published lists the versions complete (with their version.json) in a
// local mirror.
func Published(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	entries, _ := os.ReadDir(filepath.Join(dir, "versions"))
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, "versions", e.Name(), "version.json")); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// AssertNotPublished fails when version id is complete in a local mirror.
func AssertNotPublished(t testing.TB, mirror, id string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(mirror, "versions", id, "version.json")); err == nil {
		t.Errorf("version %s was published", id)
	}
}

// EditJSON rewrites a JSON object file (fdl.json, a version.json) through
// edit, as a hostile publisher would; it does not fix any hash.
func EditJSON(t testing.TB, path string, edit func(doc map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	edit(doc)
	raw, err = json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// RewriteCatalog changes a version's catalog with DuckDB and fixes its
// record's sha256, as a hostile publisher would.
func RewriteCatalog(t testing.TB, up, id, stmt string) {
	t.Helper()
	cat := filepath.Join(up, "versions", id, "ducklake.duckdb")
	db, err := sql.Open("duckdb", cat)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(stmt); err != nil {
		db.Close()
		t.Fatal(err)
	}
	db.Exec("CHECKPOINT")
	db.Close()
	b, err := os.ReadFile(cat)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	EditJSON(t, filepath.Join(up, "versions", id, "version.json"), func(rec map[string]any) {
		rec["sha256"] = hex.EncodeToString(sum[:])
	})
}

// ReplaceCatalog puts b in place of a version's catalog and fixes its
// record's sha256, as a hostile publisher would.
func ReplaceCatalog(t testing.TB, up, id string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(up, "versions", id, "ducklake.duckdb"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	EditJSON(t, filepath.Join(up, "versions", id, "version.json"), func(rec map[string]any) {
		rec["sha256"] = hex.EncodeToString(sum[:])
	})
}

// CrashingCatalog is one of the catalogs kept in internal/catalog's
// testdata/crash: a generated catalog with bytes changed and DuckDB's
// block checksums mended, which crashes DuckDB as it is read.
func CrashingCatalog(t testing.TB) []byte {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(here), "..", "..", "catalog", "testdata", "crash", "*.duckdb.gz"))
	if len(files) == 0 {
		t.Fatal("no crashing catalog in internal/catalog/testdata/crash")
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FixtureRepo builds a repository in dir around one of the real catalogs
// DuckDB's DuckLake extension wrote (SharedFixtures), adding addFiles
// data files in a new version.
func FixtureRepo(t testing.TB, dir, name string, addFiles int) *generate.Repo {
	t.Helper()
	fx := SharedFixtures(t)
	parquet := ""
	if name == "delete_ignore_extra_columns" {
		parquet = filepath.Join(fx, name)
	}
	r, err := generate.FromFixture(context.Background(), filepath.Join(fx, name+".db.gz"), parquet, dir, addFiles, generate.Options{})
	if err != nil {
		t.Fatalf("building a repository around %s: %v", name, err)
	}
	return r
}
