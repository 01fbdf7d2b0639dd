// Package catalog reads a frozen DuckLake catalog (a DuckDB database file)
// and says which data and delete files it needs, where they sit in an FDL
// repository, and how large they must be.
//
// The catalog is opened read-only by DuckDB itself with external access
// disabled, so a hostile catalog cannot make DuckDB read other files. The
// tables are queried with plain SQL, column by column where DuckLake
// versions differ, so DuckLake 0.1 to 1.x catalogs all read.
package catalog

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"

	_ "github.com/duckdb/duckdb-go/v2" // registers the "duckdb" driver

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// File is one Parquet file a catalog references.
type File struct {
	// Path is the file's place below the repository's data_dir: the part of
	// its resolved path after the catalog's stored data_path.
	Path string
	// Size is file_size_bytes as recorded, or -1 where the catalog has none.
	Size int64
	// Footer is footer_size as recorded: the length of a Parquet file's
	// metadata, the 4 bytes before its closing magic; -1 where the catalog
	// has none.
	Footer int64
	// Delete is true for delete files.
	Delete bool
	// Puffin is true for a file whose recorded format is puffin (deletion
	// vectors) rather than Parquet.
	Puffin bool
}

// Catalog is what the mirror needs to know of one catalog.
type Catalog struct {
	DuckLakeVersion string
	DataPath        string // as stored; FDL readers replace it with <root>/<data_dir>
	Files           []File // one per distinct path, sorted by Path
}

type place struct {
	path     sql.NullString
	relative sql.NullBool
	begin    sql.NullInt64
	end      sql.NullInt64
	parent   int64 // table's schema_id
}

// Read opens the catalog at file (a local path) read-only and lists every
// file in ducklake_data_file and ducklake_delete_file, current and
// historical rows alike: a frozen catalog can time-travel to older
// snapshots. Rows of ducklake_files_scheduled_for_deletion are not read:
// those files are on their way out and may already be gone.
func Read(ctx context.Context, file string) (*Catalog, error) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, fmt.Errorf("catalog %s: starting DuckDB: %w", file, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // ATTACH and the queries must share one connection
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: starting DuckDB: %w", file, err)
	}
	defer conn.Close()
	setup := []string{
		"SET threads=1",
		"SET memory_limit='128MB'",
		"SET autoinstall_known_extensions=false",
		"SET autoload_known_extensions=false",
		"ATTACH '" + strings.ReplaceAll(file, "'", "''") + "' AS cat (READ_ONLY)",
		"SET enable_external_access=false",
	}
	for _, q := range setup {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("catalog %s: not a readable DuckDB database: %w", file, err)
		}
	}
	r := &reader{ctx: ctx, conn: conn, file: file}
	return r.read()
}

type reader struct {
	ctx  context.Context
	conn *sql.Conn
	file string
	cols map[string]map[string]bool // table → column names present
}

func (r *reader) errf(format string, args ...any) error {
	return fmt.Errorf("catalog %s: "+format, append([]any{r.file}, args...)...)
}

func (r *reader) read() (*Catalog, error) {
	if err := r.loadColumns(); err != nil {
		return nil, err
	}
	for _, t := range []string{"ducklake_metadata", "ducklake_data_file", "ducklake_delete_file"} {
		if r.cols[t] == nil {
			return nil, r.errf("no %s table: not a DuckLake catalog", t)
		}
	}
	c := &Catalog{}
	if err := r.metadata(c); err != nil {
		return nil, err
	}
	schemas, err := r.places("ducklake_schema", "schema_id", "")
	if err != nil {
		return nil, err
	}
	tables, err := r.places("ducklake_table", "table_id", "schema_id")
	if err != nil {
		return nil, err
	}
	res := &resolver{dataPath: c.DataPath, schemas: schemas, tables: tables}
	seen := map[string]int{}
	for _, kind := range []struct {
		table  string
		delete bool
		format string // its format column
	}{{"ducklake_data_file", false, "file_format"}, {"ducklake_delete_file", true, "format"}} {
		// footer_size and the format are read where the catalog has them:
		// verify --deep checks files against them.
		footer, format := "NULL::BIGINT", "NULL::VARCHAR"
		if r.cols[kind.table]["footer_size"] {
			footer = "footer_size"
		}
		if r.cols[kind.table][kind.format] {
			format = kind.format
		}
		rows, err := r.conn.QueryContext(r.ctx, "SELECT table_id, begin_snapshot, path, path_is_relative, file_size_bytes, "+footer+", "+format+" FROM cat."+kind.table)
		if err != nil {
			return nil, r.errf("reading %s: %w", kind.table, err)
		}
		for rows.Next() {
			var tableID, begin, size, footerSize sql.NullInt64
			var p, fileFormat sql.NullString
			var rel sql.NullBool
			if err := rows.Scan(&tableID, &begin, &p, &rel, &size, &footerSize, &fileFormat); err != nil {
				rows.Close()
				return nil, r.errf("reading %s: %w", kind.table, err)
			}
			if !p.Valid || p.String == "" {
				rows.Close()
				return nil, r.errf("%s has a row without a path", kind.table)
			}
			where, err := res.resolve(tableID, begin, p.String, !rel.Valid || rel.Bool)
			if err != nil {
				rows.Close()
				return nil, r.errf("%s: %w", kind.table, err)
			}
			sz := int64(-1)
			if size.Valid {
				sz = size.Int64
			}
			if i, ok := seen[where]; ok {
				if prev := c.Files[i].Size; prev != sz && prev >= 0 && sz >= 0 {
					rows.Close()
					return nil, r.errf("file %s is recorded with two sizes, %d and %d", where, prev, sz)
				}
				continue
			}
			seen[where] = len(c.Files)
			ft := int64(-1)
			if footerSize.Valid {
				ft = footerSize.Int64
			}
			c.Files = append(c.Files, File{Path: where, Size: sz, Footer: ft, Delete: kind.delete,
				Puffin: strings.EqualFold(fileFormat.String, "puffin")})
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, r.errf("reading %s: %w", kind.table, err)
		}
	}
	sort.Slice(c.Files, func(i, j int) bool { return c.Files[i].Path < c.Files[j].Path })
	return c, nil
}

// loadColumns learns the columns of the tables this reader queries, which
// DuckLake versions add to: one planned-but-empty query per table, far
// cheaper than scanning duckdb_columns() for the whole catalog.
func (r *reader) loadColumns() error {
	r.cols = map[string]map[string]bool{}
	for _, t := range []string{"ducklake_metadata", "ducklake_schema", "ducklake_table", "ducklake_data_file", "ducklake_delete_file"} {
		rows, err := r.conn.QueryContext(r.ctx, "SELECT * FROM cat."+t+" LIMIT 0")
		if err != nil {
			continue // absent: read() says which table a catalog must have
		}
		names, err := rows.Columns()
		rows.Close()
		if err != nil {
			return r.errf("reading the columns of %s: %w", t, err)
		}
		r.cols[t] = map[string]bool{}
		for _, c := range names {
			r.cols[t][c] = true
		}
	}
	return nil
}

// metadata reads the DuckLake version and the stored data_path, preferring
// rows without a scope (0.3+ can scope settings to a schema or table).
func (r *reader) metadata(c *Catalog) error {
	q := "SELECT key, value, NULL FROM cat.ducklake_metadata"
	if r.cols["ducklake_metadata"]["scope"] {
		q = "SELECT key, value, scope FROM cat.ducklake_metadata"
	}
	rows, err := r.conn.QueryContext(r.ctx, q)
	if err != nil {
		return r.errf("reading ducklake_metadata: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v, scope sql.NullString
		if err := rows.Scan(&k, &v, &scope); err != nil {
			return r.errf("reading ducklake_metadata: %w", err)
		}
		if scope.Valid && scope.String != "" {
			continue
		}
		switch k.String {
		case "version":
			c.DuckLakeVersion = v.String
		case "data_path":
			c.DataPath = v.String
		}
	}
	if err := rows.Err(); err != nil {
		return r.errf("reading ducklake_metadata: %w", err)
	}
	if c.DataPath == "" {
		return r.errf("ducklake_metadata has no data_path")
	}
	if !strings.HasSuffix(c.DataPath, "/") {
		c.DataPath += "/"
	}
	return nil
}

// places reads the path columns of ducklake_schema or ducklake_table, which
// DuckLake 0.1 does not have (there every relative file path hangs off the
// data path directly).
func (r *reader) places(table, idCol, parentCol string) (map[int64][]place, error) {
	out := map[int64][]place{}
	cols := r.cols[table]
	if cols == nil || !cols["path"] || !cols["path_is_relative"] {
		return out, nil
	}
	parent := "0"
	if parentCol != "" {
		parent = parentCol
	}
	q := fmt.Sprintf("SELECT %s, path, path_is_relative, begin_snapshot, end_snapshot, %s FROM cat.%s", idCol, parent, table)
	rows, err := r.conn.QueryContext(r.ctx, q)
	if err != nil {
		return nil, r.errf("reading %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var p place
		var par sql.NullInt64
		if err := rows.Scan(&id, &p.path, &p.relative, &p.begin, &p.end, &par); err != nil {
			return nil, r.errf("reading %s: %w", table, err)
		}
		p.parent = par.Int64
		out[id] = append(out[id], p)
	}
	return out, rows.Err()
}

type resolver struct {
	dataPath string
	schemas  map[int64][]place
	tables   map[int64][]place
}

// at picks the row of a schema or table that was live at snapshot s (a
// table renamed later has several rows), else the first one.
func at(rows []place, s sql.NullInt64) (place, bool) {
	if len(rows) == 0 {
		return place{}, false
	}
	if s.Valid {
		for _, p := range rows {
			if (!p.begin.Valid || p.begin.Int64 <= s.Int64) && (!p.end.Valid || s.Int64 < p.end.Int64) {
				return p, true
			}
		}
	}
	return rows[0], true
}

// join appends a path part to a base: a relative part is joined, an
// absolute one replaces the base.
func join(base string, p place) string {
	if !p.path.Valid || p.path.String == "" {
		return base
	}
	if p.relative.Valid && !p.relative.Bool {
		return p.path.String
	}
	return base + p.path.String
}

// resolve turns a file row into its place below data_dir, as DuckLake
// resolves it: data path + schema path + table path + file path, each
// joined only where its path_is_relative is true. A result that does not
// fall under the stored data path, or that holds "..", breaks the spec.
func (r *resolver) resolve(tableID, begin sql.NullInt64, filePath string, relative bool) (string, error) {
	full := filePath
	if relative {
		base := r.dataPath
		if t, ok := at(r.tables[tableID.Int64], begin); ok {
			if s, ok := at(r.schemas[t.parent], begin); ok {
				base = join(base, s)
			}
			base = join(base, t)
		}
		full = base + filePath
	}
	rel, ok := strings.CutPrefix(full, r.dataPath)
	if !ok {
		return "", fmt.Errorf("file %q is outside the catalog's data path %q", full, r.dataPath)
	}
	if err := backend.CheckName(rel); err != nil {
		return "", fmt.Errorf("file %q: path is not a clean relative path below the data path (no \"..\", \".\" or empty segments)", full)
	}
	return rel, nil
}
