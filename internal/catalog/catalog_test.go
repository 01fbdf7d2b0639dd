package catalog

import (
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// sharedFixtures is ../shared/fixtures/ducklake beside the repository, or
// FDL_SHARED/fixtures/ducklake; tests that need it skip when it is absent.
func sharedFixtures(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FDL_SHARED")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared")
	}
	fx := filepath.Join(dir, "fixtures", "ducklake")
	if _, err := os.Stat(fx); err != nil {
		t.Skipf("real DuckLake fixtures not found at %s: interop test skipped", fx)
	}
	return fx
}

func gunzipTo(t *testing.T, src string) string {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "ducklake.duckdb")
	w, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, zr); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return out
}

func TestReadResolvesSchemaAndTablePathsOfDuckLake03(t *testing.T) {
	fx := sharedFixtures(t)
	c, err := Read(context.Background(), gunzipTo(t, filepath.Join(fx, "delete_ignore_extra_columns.db.gz")), "", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if c.DuckLakeVersion != "0.3" || c.DataPath != "delete_ignore_extra_columns/" {
		t.Errorf("version %q data path %q", c.DuckLakeVersion, c.DataPath)
	}
	// The Parquet files beside the fixture are where the catalog says they
	// are: the resolved paths must name exactly those files.
	for _, f := range c.Files {
		st, err := os.Stat(filepath.Join(fx, "delete_ignore_extra_columns", f.Path))
		if err != nil {
			t.Errorf("resolved %s, not beside the fixture: %v", f.Path, err)
			continue
		}
		t.Logf("%s delete=%v recorded %d on disk %d", f.Path, f.Delete, f.Size, st.Size())
	}
	if len(c.Files) != 2 {
		t.Fatalf("want one data and one delete file, got %+v", c.Files)
	}
}

func TestReadAcceptsCatalogsWithoutFiles(t *testing.T) {
	fx := sharedFixtures(t)
	for _, name := range []string{"v01.db.gz", "v04.db.gz"} {
		c, err := Read(context.Background(), gunzipTo(t, filepath.Join(fx, name)), "", Limits{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(c.Files) != 0 || c.DataPath == "" {
			t.Errorf("%s: %+v", name, c)
		}
	}
}

func TestReadRefusesAFileThatIsNotACatalog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ducklake.duckdb")
	os.WriteFile(p, []byte("not a database"), 0o644)
	if _, err := Read(context.Background(), p, "", Limits{}); err == nil {
		t.Fatal("read a non-database as a catalog")
	}
}
