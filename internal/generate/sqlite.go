package generate

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// The values of Options.MetadataDB.
const (
	MetadataDuckDB = "duckdb"
	MetadataSQLite = "sqlite"
)

// CatalogToSQLite writes a SQLite database at dst holding the ducklake_*
// tables of the DuckDB catalog at src, row by row, as a DuckLake catalog
// kept in SQLite holds them: same table and column names, the declared
// types DuckDB gives (SQLite keeps what it is given), booleans as 0 and 1,
// timestamps and UUIDs as text.
func CatalogToSQLite(ctx context.Context, src, dst string) error {
	duck, err := sql.Open("duckdb", "")
	if err != nil {
		return err
	}
	defer duck.Close()
	duck.SetMaxOpenConns(1)
	if _, err := duck.ExecContext(ctx, "ATTACH "+sqlString(src)+" AS src (READ_ONLY)"); err != nil {
		return fmt.Errorf("catalog %s: %w", src, err)
	}
	type column struct{ name, typ string }
	tables := map[string][]column{}
	var order []string
	rows, err := duck.QueryContext(ctx, "SELECT table_name, column_name, data_type FROM duckdb_columns() "+
		"WHERE database_name = 'src' AND schema_name = 'main' AND table_name LIKE 'ducklake%' ORDER BY table_name, column_index")
	if err != nil {
		return fmt.Errorf("catalog %s: %w", src, err)
	}
	for rows.Next() {
		var t string
		var c column
		if err := rows.Scan(&t, &c.name, &c.typ); err != nil {
			rows.Close()
			return err
		}
		if tables[t] == nil {
			order = append(order, t)
		}
		tables[t] = append(tables[t], c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	os.Remove(tmp)
	lite, err := sql.Open("sqlite3", tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	defer lite.Close()
	tx, err := lite.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, t := range order {
		cols := tables[t]
		var defs, sel, marks []string
		for _, c := range cols {
			defs = append(defs, sqlIdent(c.name)+" "+c.typ)
			if keepsItsType(c.typ) {
				sel = append(sel, sqlIdent(c.name))
			} else {
				sel = append(sel, "CAST("+sqlIdent(c.name)+" AS VARCHAR)")
			}
			marks = append(marks, "?")
		}
		if _, err := tx.ExecContext(ctx, "CREATE TABLE "+sqlIdent(t)+" ("+strings.Join(defs, ", ")+")"); err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		insert, err := tx.PrepareContext(ctx, "INSERT INTO "+sqlIdent(t)+" VALUES ("+strings.Join(marks, ", ")+")")
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		rows, err := duck.QueryContext(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM src.main."+sqlIdent(t))
		if err != nil {
			insert.Close()
			return fmt.Errorf("%s: %w", t, err)
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for err == nil && rows.Next() {
			if err = rows.Scan(ptrs...); err == nil {
				_, err = insert.ExecContext(ctx, vals...)
			}
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
		insert.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if err := lite.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// keepsItsType says whether a DuckDB column's values go to SQLite as they
// are read (integers, booleans, floats, text); the rest go as text.
func keepsItsType(t string) bool {
	switch t {
	case "BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UINTEGER", "USMALLINT", "UTINYINT", "BOOLEAN", "DOUBLE", "FLOAT", "VARCHAR":
		return true
	}
	return false
}

// versionCatalogs writes, beside a version's finished ducklake.duckdb,
// the catalogs Options ask for: the alternate catalog, and metadata.db.
// It returns the file whose sha256 the record carries.
func (b *builder) versionCatalogs(ctx context.Context, vid string, now time.Time) (string, error) {
	main := b.local(repo.VersionFile(vid, repo.CatalogFile))
	if v := b.opts.AlternateCatalog; v != "" {
		if err := b.alternateCatalog(ctx, main, b.local(repo.VersionFile(vid, AlternateCatalogFile(v))), v, now); err != nil {
			return "", fmt.Errorf("alternate catalog: %w", err)
		}
	}
	meta := b.local(repo.VersionFile(vid, repo.MetadataFile))
	switch b.opts.MetadataDB {
	case "":
		return main, nil
	case MetadataDuckDB:
		if err := copyFile(meta, main); err != nil {
			return "", err
		}
	case MetadataSQLite:
		if err := CatalogToSQLite(ctx, main, meta); err != nil {
			return "", fmt.Errorf("metadata.db: %w", err)
		}
	}
	b.workingCatalogs = append(b.workingCatalogs, main)
	return meta, nil
}

// AlternateCatalogFile is where a version keeps its alternate catalog for
// DuckLake version v, as the spec's catalog_formats entry names it.
func AlternateCatalogFile(v string) string { return repo.CatalogsDir + "ducklake-" + v + ".duckdb" }

// alternateCatalog writes the alternate catalog: the main one's tables
// plus one snapshot adding a data file only it lists, so that a mirror
// must read it to know every file the version needs.
func (b *builder) alternateCatalog(ctx context.Context, main, path, v string, now time.Time) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	c, err := copyCatalog(ctx, b.e, main, path)
	if err != nil {
		return err
	}
	c.begin()
	if !c.hasTable {
		err = c.createTable(ctx, TableName)
	}
	if err == nil {
		err = b.addFiles(ctx, c, 1, b.opts.RowsPerFile)
	}
	if err == nil {
		err = c.e.exec(ctx, "UPDATE "+c.q("ducklake_metadata")+" SET value = ? WHERE key = 'version'", v)
	}
	if err == nil {
		err = c.commit(ctx, now, "alternate catalog for DuckLake "+v)
	}
	if err != nil {
		c.detach(ctx)
		return err
	}
	return c.close(ctx)
}

// removeWorkingCatalogs removes the ducklake.duckdb files kept while the
// versions were written (the next version starts from its parent's) where
// metadata.db is the catalog.
func (b *builder) removeWorkingCatalogs() error {
	for _, p := range b.workingCatalogs {
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	b.workingCatalogs = nil
	return nil
}

// duckDBMetadata returns the path of a metadata.db a new version can start
// from: a DuckDB one. The generator does not read SQLite catalogs back.
func duckDBMetadata(p string) (string, error) {
	head := make([]byte, 16)
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if n, _ := f.Read(head); string(head[:n]) == "SQLite format 3\x00" {
		return "", fmt.Errorf("%s is a SQLite catalog: the generator adds versions to DuckDB catalogs only", p)
	}
	return p, nil
}
