package verify

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// Issue 15: verify checks the data files of a version's alternate
// catalogs, and reads metadata.db where it is the catalog; from a store
// that lists (a folder) and one that does not (HTTP).

func generateRepo(t *testing.T, opts generate.Options) (string, *generate.Repo) {
	t.Helper()
	dir := t.TempDir()
	opts.FastParquet = true
	r, err := generate.Generate(context.Background(), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return dir, r
}

// stores opens dir as a folder and over HTTP.
func stores(t *testing.T, dir string) map[string]backend.Reader {
	t.Helper()
	out := map[string]backend.Reader{}
	for kind, addr := range map[string]string{"local": dir, "http": testserver.HTTP(t, dir).URL} {
		r, closer, err := location.Open(context.Background(), addr, location.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closer() })
		out[kind] = r
	}
	return out
}

func check(t *testing.T, r backend.Reader, deep bool) []Problem {
	t.Helper()
	problems, err := CheckRepository(context.Background(), source.New(r, nil, nil), CheckOptions{Deep: deep})
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// altOnly is a data file the alternate catalog of a version lists and its
// main catalog does not.
func altOnly(t *testing.T, dir, id string) string {
	t.Helper()
	v := filepath.Join(dir, "versions", id)
	main, err := catalog.Read(context.Background(), filepath.Join(v, repo.CatalogFile), "", catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	alt, err := catalog.Read(context.Background(), filepath.Join(v, filepath.FromSlash(generate.AlternateCatalogFile("1.0"))), "", catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for _, f := range main.Files {
		in[f.Path] = true
	}
	for _, f := range alt.Files {
		if !in[f.Path] {
			return "data/" + f.Path
		}
	}
	t.Fatal("the alternate catalog lists no file of its own")
	return ""
}

func TestVerifyChecksAlternateCatalogsDataFiles(t *testing.T) {
	dir, r := generateRepo(t, generate.Options{Versions: 2, AlternateCatalog: "1.0"})
	for kind, s := range stores(t, dir) {
		if p := check(t, s, true); len(p) != 0 {
			t.Fatalf("%s: a sound repository has problems: %v", kind, p)
		}
	}
	id := r.Versions[1]
	altName := repo.VersionFile(id, generate.AlternateCatalogFile("1.0"))
	missing := altOnly(t, dir, id)
	os.Remove(filepath.Join(dir, filepath.FromSlash(missing)))
	damaged := altOnly(t, dir, r.Versions[0])
	p := filepath.Join(dir, filepath.FromSlash(damaged))
	b, _ := os.ReadFile(p)
	copy(b[len(b)-4:], "XXXX")
	os.WriteFile(p, b, 0o644)
	for kind, s := range stores(t, dir) {
		problems := check(t, s, false)
		if len(problems) != 1 || problems[0].File != missing || !strings.Contains(problems[0].Message, "missing") || !strings.Contains(problems[0].Message, altName) {
			t.Errorf("%s: want one problem, %s missing, naming %s: %v", kind, missing, altName, problems)
		}
		problems = check(t, s, true)
		found := false
		for _, pr := range problems {
			if pr.File == damaged && strings.Contains(pr.Message, "damaged") {
				found = true
			}
		}
		if len(problems) != 2 || !found {
			t.Errorf("%s --deep: want %s missing and %s damaged: %v", kind, missing, damaged, problems)
		}
	}
	// An alternate catalog that cannot be read is a problem naming it.
	os.WriteFile(filepath.Join(dir, filepath.FromSlash(altName)), []byte("garbage"), 0o644)
	for kind, s := range stores(t, dir) {
		found := false
		for _, pr := range check(t, s, false) {
			if pr.File == altName {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: the unreadable alternate catalog %s is not reported", kind, altName)
		}
	}
}

func TestVerifyReadsMetadataDB(t *testing.T) {
	for _, format := range []string{generate.MetadataDuckDB, generate.MetadataSQLite} {
		t.Run(format, func(t *testing.T) {
			dir, r := generateRepo(t, generate.Options{Versions: 2, MetadataDB: format})
			for kind, s := range stores(t, dir) {
				if p := check(t, s, true); len(p) != 0 {
					t.Fatalf("%s: a sound repository has problems: %v", kind, p)
				}
			}
			os.Remove(filepath.Join(dir, filepath.FromSlash(r.DataFiles[0])))
			for kind, s := range stores(t, dir) {
				if p := check(t, s, false); len(p) != 2 || p[0].File != r.DataFiles[0] {
					t.Errorf("%s: want %s missing in both versions: %v", kind, r.DataFiles[0], p)
				}
			}
			// metadata.db's sha256 is the one the record carries.
			meta := filepath.Join(dir, "versions", r.Versions[1], repo.MetadataFile)
			f, _ := os.OpenFile(meta, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte{0})
			f.Close()
			for kind, s := range stores(t, dir) {
				found := false
				for _, pr := range check(t, s, false) {
					if pr.File == repo.VersionFile(r.Versions[1], repo.MetadataFile) && strings.Contains(pr.Message, "sha256 mismatch") {
						found = true
					}
				}
				if !found {
					t.Errorf("%s: a metadata.db that does not match its record is not reported", kind)
				}
			}
		})
	}
}
