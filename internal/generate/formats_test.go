package generate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// -metadata-db and -alternate-catalog: each version's catalog is
// metadata.db (its sha256 in the record, in the format asked for, no
// ducklake.duckdb left), and its alternate catalog lists one data file
// the main one does not, written like the others.
func TestMetadataDBAndAlternateCatalog(t *testing.T) {
	for _, format := range []string{MetadataDuckDB, MetadataSQLite} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			r, err := Generate(context.Background(), dir, Options{Versions: 2, FastParquet: true, MetadataDB: format, AlternateCatalog: "1.0"})
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := os.ReadFile(filepath.Join(dir, repo.SettingsFile))
			s, err := repo.ParseSettings(raw)
			if err != nil || len(s.CatalogFiles()) == 0 || s.CatalogFiles()[0] != "catalogs/1.0.duckdb" {
				t.Errorf("fdl.json %s: %v", raw, err)
			}
			for _, id := range r.Versions {
				v := filepath.Join(dir, "versions", id)
				if _, err := os.Stat(filepath.Join(v, repo.CatalogFile)); !os.IsNotExist(err) {
					t.Errorf("version %s keeps a ducklake.duckdb: %v", id, err)
				}
				sum, err := fileSHA256(filepath.Join(v, repo.MetadataFile))
				if err != nil {
					t.Fatal(err)
				}
				var rec record
				raw, _ := os.ReadFile(filepath.Join(v, repo.RecordFile))
				json.Unmarshal(raw, &rec)
				if rec.SHA256 != sum {
					t.Errorf("version %s: record sha256 %s, metadata.db has %s", id, rec.SHA256, sum)
				}
				head := make([]byte, 16)
				f, _ := os.Open(filepath.Join(v, repo.MetadataFile))
				f.Read(head)
				f.Close()
				if isSQLite := string(head) == "SQLite format 3\x00"; isSQLite != (format == MetadataSQLite) {
					t.Errorf("version %s: metadata.db starts %q, want format %s", id, head, format)
				}
				if _, err := os.Stat(filepath.Join(v, "catalogs", "ducklake-1.0.duckdb")); err != nil {
					t.Errorf("version %s: no alternate catalog: %v", id, err)
				}
			}
			// 2 versions × 2 files in the main catalogs, 1 more in each
			// alternate.
			if len(r.DataFiles) != 6 {
				t.Errorf("%d data files written, want 6: %v", len(r.DataFiles), r.DataFiles)
			}
		})
	}
}
