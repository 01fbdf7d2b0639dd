package sync_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	gosync "sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlmirror "github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

// Issue 15: a version's alternate catalogs (catalogs/<format>.duckdb) and
// the catalog newer FDL tools name metadata.db.

// getCounter serves a folder over HTTP as a static host does and counts
// the GET requests for each path.
type getCounter struct {
	mu   gosync.Mutex
	gets map[string]int
	h    http.Handler
}

func serveCounted(t *testing.T, dir string) (*getCounter, string) {
	g := &getCounter{gets: map[string]int{}, h: http.FileServer(http.Dir(dir))}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv.URL + "/"
}

func (g *getCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		g.mu.Lock()
		g.gets[r.URL.Path]++
		g.mu.Unlock()
	}
	if strings.HasSuffix(r.URL.Path, "/") {
		http.NotFound(w, r) // a static host that lists nothing
		return
	}
	g.h.ServeHTTP(w, r)
}

// altOnly returns the data files an alternate catalog of a version lists
// that its main catalog does not.
func altOnly(t *testing.T, up, id string) []string {
	t.Helper()
	v := filepath.Join(up, "versions", id)
	main, err := catalog.Read(context.Background(), filepath.Join(v, repo.MainCatalog(filesOf(t, v))), "", catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	alt, err := catalog.Read(context.Background(), filepath.Join(v, filepath.FromSlash(generate.AlternateCatalogFile("1.0"))), "", catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	inMain := map[string]bool{}
	for _, f := range main.Files {
		inMain[f.Path] = true
	}
	var out []string
	for _, f := range alt.Files {
		if !inMain[f.Path] {
			out = append(out, "data/"+f.Path)
		}
	}
	if len(out) == 0 {
		t.Fatalf("version %s: the alternate catalog lists no file of its own", id)
	}
	return out
}

func filesOf(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range entries {
		out[e.Name()] = 0
	}
	return out
}

// verifyClean runs verify and verify --deep on a mirror folder: no
// problem may be found.
func verifyClean(t *testing.T, mirror string) {
	t.Helper()
	store, err := local.Open(mirror)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, deep := range []bool{false, true} {
		problems, err := verify.CheckRepository(context.Background(), source.New(store, nil, nil), verify.CheckOptions{Deep: deep})
		if err != nil || len(problems) != 0 {
			t.Errorf("verify (deep %v): %v %v", deep, err, problems)
		}
	}
}

// An alternate catalog's own data files are mirrored with it, from a
// source that lists (a folder) and one that does not (HTTP, where
// catalog_formats names it), and the catalog is fetched once: the bytes
// read are the bytes published.
func TestAlternateCatalogsDataFilesMirrored(t *testing.T) {
	up, _, g := generated(t, generate.Options{Versions: 2, AlternateCatalog: "1.0"})
	var needed []string
	for _, id := range g.Versions {
		needed = append(needed, altOnly(t, up, id)...)
	}
	t.Run("local", func(t *testing.T) {
		mirror := filepath.Join(t.TempDir(), "mirror")
		rep := mustRun(t, up, mirror, fdlsync.Options{})
		if !rep.OK() {
			t.Fatalf("refused: %+v", rep.Refused)
		}
		fdltest.AssertMirrored(t, up, mirror, nil)
		verifyClean(t, mirror)
	})
	t.Run("http", func(t *testing.T) {
		counter, url := serveCounted(t, up)
		mirror := t.TempDir()
		rep, err := fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: url, Sink: mirror}}, nil, nil)
		if err != nil || !rep.OK() {
			t.Fatalf("%v %+v", err, rep)
		}
		fdltest.AssertMirrored(t, up, mirror, nil)
		verifyClean(t, mirror)
		for _, id := range g.Versions {
			p := "/" + repo.VersionFile(id, generate.AlternateCatalogFile("1.0"))
			if n := counter.gets[p]; n != 1 {
				t.Errorf("%s fetched %d times, want once", p, n)
			}
		}
	})
	for _, f := range needed {
		if _, err := os.Stat(filepath.Join(up, filepath.FromSlash(f))); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// A data file only an alternate catalog lists, missing upstream, refuses
// the version naming the file and the catalog; nothing of the version is
// published, the alternate catalog included.
func TestMissingAlternateDataFileRefusesTheVersion(t *testing.T) {
	up, mirror, g := generated(t, generate.Options{Versions: 2, AlternateCatalog: "1.0"})
	last := g.Versions[1]
	gone := altOnly(t, up, last)[0]
	if err := os.Remove(filepath.Join(up, filepath.FromSlash(gone))); err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	msg := refusedOnly(t, rep, last, fdlsync.ReasonMissingFile)
	altName := repo.VersionFile(last, generate.AlternateCatalogFile("1.0"))
	if !strings.Contains(msg, gone) || !strings.Contains(msg, altName) {
		t.Errorf("the refusal does not name %s and %s: %s", gone, altName, msg)
	}
	assertUnpublished(t, mirror, last)
	if _, err := os.Stat(filepath.Join(mirror, filepath.FromSlash(altName))); !os.IsNotExist(err) {
		t.Errorf("the refused version's alternate catalog is in the mirror: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mirror, "versions", g.Versions[0], repo.RecordFile)); err != nil {
		t.Errorf("the version before it was not mirrored: %v", err)
	}
}

// An alternate catalog that is not a catalog, or breaks the rules, refuses
// the version naming it; nothing of the version is published.
func TestBadAlternateCatalogRefusesTheVersion(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spoil  func(t *testing.T, p string)
		reason string
		want   string
	}{
		{"not a database", func(t *testing.T, p string) {
			os.WriteFile(p, []byte("not a catalog at all"), 0o644)
		}, fdlsync.ReasonCatalog, "not a readable DuckDB database"},
		{"a path outside the data path", func(t *testing.T, p string) {
			db, err := sql.Open("duckdb", p)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("UPDATE ducklake_data_file SET path = '../../etc/passwd', path_is_relative = true WHERE data_file_id = (SELECT max(data_file_id) FROM ducklake_data_file)"); err != nil {
				t.Fatal(err)
			}
			db.Exec("CHECKPOINT")
		}, fdlsync.ReasonCatalog, "not a clean relative path"},
		{"past the row limit", func(t *testing.T, p string) {
			db, err := sql.Open("duckdb", p)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("INSERT INTO ducklake_data_file (data_file_id, table_id, begin_snapshot, path, path_is_relative, file_size_bytes) " +
				"SELECT 1000 + i, 1, 1, 'extra-' || i || '.parquet', true, 10 FROM range(100) t(i)"); err != nil {
				t.Fatal(err)
			}
			db.Exec("CHECKPOINT")
		}, fdlsync.ReasonLimit, catalog.KeyMaxFiles},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, mirror, g := generated(t, generate.Options{Versions: 2, AlternateCatalog: "1.0"})
			last := g.Versions[1]
			altName := repo.VersionFile(last, generate.AlternateCatalogFile("1.0"))
			tc.spoil(t, filepath.Join(up, filepath.FromSlash(altName)))
			rep := mustRun(t, up, mirror, fdlsync.Options{CatalogLimits: catalog.Limits{MaxFiles: 50}})
			msg := refusedOnly(t, rep, last, tc.reason)
			if !strings.Contains(msg, altName) || !strings.Contains(msg, tc.want) {
				t.Errorf("the refusal does not name %s or say %q: %s", altName, tc.want, msg)
			}
			for _, r := range rep.Refused {
				if r.Version == last && r.Ref == "" && r.File != altName {
					t.Errorf("refusal's file is %s, want %s", r.File, altName)
				}
			}
			assertUnpublished(t, mirror, last)
			if _, err := os.Stat(filepath.Join(mirror, filepath.FromSlash(altName))); !os.IsNotExist(err) {
				t.Errorf("the refused alternate catalog is in the mirror: %v", err)
			}
		})
	}
}

// Versions whose catalog is metadata.db, in DuckDB's format and in
// SQLite's, are mirrored from a folder and over HTTP (which asks for
// ducklake.duckdb, then metadata.db), and the mirror verifies, deep too.
func TestMetadataDBVersionsMirroredAndVerified(t *testing.T) {
	for _, format := range []string{generate.MetadataDuckDB, generate.MetadataSQLite} {
		t.Run(format, func(t *testing.T) {
			up, mirror, g := generated(t, generate.Options{Versions: 2, DeleteFiles: true, MetadataDB: format})
			rep := mustRun(t, up, mirror, fdlsync.Options{})
			if !rep.OK() || len(rep.VersionsPublished) != 2 || rep.CatalogsRead != 2 {
				t.Fatalf("local: %+v", rep)
			}
			fdltest.AssertMirrored(t, up, mirror, nil)
			verifyClean(t, mirror)

			web := t.TempDir()
			_, url := serveCounted(t, up)
			hrep, err := fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: url, Sink: web}}, nil, nil)
			if err != nil || !hrep.OK() {
				t.Fatalf("http: %v %+v", err, hrep)
			}
			fdltest.AssertMirrored(t, up, web, nil)
			verifyClean(t, web)

			// A data file lost from the mirror is found by verify and
			// copied back by a repair: the catalog it is in is metadata.db.
			lost := filepath.Join(mirror, filepath.FromSlash(g.DataFiles[0]))
			os.Remove(lost)
			store, _ := local.Open(mirror)
			problems, _ := verify.CheckRepository(context.Background(), source.New(store, nil, nil), verify.CheckOptions{})
			store.Close()
			if len(problems) == 0 {
				t.Errorf("verify found nothing with %s removed", g.DataFiles[0])
			}
			rep = mustRun(t, up, mirror, fdlsync.Options{Repair: true})
			if len(rep.Repaired) != 1 || !rep.OK() {
				t.Errorf("repair: %+v", rep)
			}
			verifyClean(t, mirror)
		})
	}
}

// A SQLite metadata.db whose ducklake_* objects would run code is refused
// naming the object, its record's sha256 matching all the same; nothing of
// the version is published.
func TestHostileSQLiteMetadataDBRefused(t *testing.T) {
	for _, tc := range []struct{ name, stmt, want string }{
		{"view", "DROP TABLE ducklake_delete_file; CREATE VIEW ducklake_delete_file AS SELECT 1 AS delete_file_id", "ducklake_delete_file is a view"},
		{"trigger", "CREATE TRIGGER t1 AFTER UPDATE ON ducklake_data_file BEGIN SELECT 1; END", "trigger t1 on ducklake_data_file"},
		{"virtual table", "DROP TABLE ducklake_delete_file; CREATE VIRTUAL TABLE ducklake_delete_file USING fts4(path)", "ducklake_delete_file is a virtual table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, mirror, g := generated(t, generate.Options{Versions: 2, MetadataDB: generate.MetadataSQLite})
			last := g.Versions[1]
			p := filepath.Join(up, "versions", last, repo.MetadataFile)
			db, err := sql.Open("sqlite3", p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(tc.stmt); err != nil {
				t.Fatal(err)
			}
			db.Close()
			rehashFile(t, up, last, repo.MetadataFile)
			rep := mustRun(t, up, mirror, fdlsync.Options{})
			msg := refusedOnly(t, rep, last, fdlsync.ReasonCatalog)
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, repo.VersionFile(last, repo.MetadataFile)) {
				t.Errorf("the refusal does not say %q naming the catalog: %s", tc.want, msg)
			}
			assertUnpublished(t, mirror, last)
			if _, err := os.Stat(filepath.Join(mirror, "versions", last, repo.MetadataFile)); !os.IsNotExist(err) {
				t.Errorf("the hostile metadata.db is in the mirror: %v", err)
			}
		})
	}
}

// An alternate catalog that appears upstream in a version the mirror holds
// complete is read and its data files copied before it is written; one
// whose data file is missing is refused naming both and left out, the
// version staying as it was.
func TestAlternateCatalogAddedToACompleteVersion(t *testing.T) {
	up, mirror, g := generated(t, generate.Options{Versions: 2, AlternateCatalog: "1.0"})
	aside := t.TempDir()
	for i, id := range g.Versions {
		from := filepath.Join(up, "versions", id, "catalogs")
		if err := os.Rename(from, filepath.Join(aside, strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() || len(rep.VersionsPublished) != 2 {
		t.Fatalf("first run: %+v", rep)
	}
	for i, id := range g.Versions {
		if err := os.Rename(filepath.Join(aside, strconv.Itoa(i)), filepath.Join(up, "versions", id, "catalogs")); err != nil {
			t.Fatal(err)
		}
	}
	gone := altOnly(t, up, g.Versions[0])[0]
	if err := os.Remove(filepath.Join(up, filepath.FromSlash(gone))); err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	altName := repo.VersionFile(g.Versions[0], generate.AlternateCatalogFile("1.0"))
	msg := refusedOnly(t, rep, g.Versions[0], fdlsync.ReasonMissingFile)
	if !strings.Contains(msg, gone) || !strings.Contains(msg, altName) {
		t.Errorf("the refusal does not name %s and %s: %s", gone, altName, msg)
	}
	if _, err := os.Stat(filepath.Join(mirror, filepath.FromSlash(altName))); !os.IsNotExist(err) {
		t.Errorf("the alternate catalog missing a data file is in the mirror: %v", err)
	}
	// The other version's alternate catalog came with its data file.
	fdltest.AssertMirrored(t, up, mirror, func(name string) bool { return name == altName })
}

// sync --repair copies back a data file only an alternate catalog lists,
// lost from the mirror.
func TestRepairRestoresAnAlternateCatalogsDataFile(t *testing.T) {
	up, mirror, g := generated(t, generate.Options{Versions: 2, AlternateCatalog: "1.0"})
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run: %+v", rep.Refused)
	}
	lost := altOnly(t, up, g.Versions[0])[0]
	if err := os.Remove(filepath.Join(mirror, filepath.FromSlash(lost))); err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{Repair: true})
	if !rep.OK() || len(rep.Repaired) != 1 || rep.Repaired[0] != lost {
		t.Errorf("repair: want %s repaired: %+v", lost, rep)
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
}
