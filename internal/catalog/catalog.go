// Package catalog reads a frozen DuckLake catalog (a DuckDB database file,
// or a SQLite one as newer FDL tools write metadata.db) and says which
// data and delete files it needs, where they sit in an FDL repository, and
// how large they must be.
//
// A catalog is an upstream's bytes, and its database would run the SQL
// stored in it: a DuckDB catalog is attached read-only by a DuckDB locked
// down first (no extensions, no other file, no configuration change), a
// SQLite one is opened read-only and immutable by a connection locked down
// the same way (see sqlite.go); only base tables are read, and every read
// is bounded in rows, time and memory (Limits). The tables are queried
// with the same plain SQL in both, column by column where DuckLake
// versions differ, so DuckLake 0.1 to 1.x catalogs all read.
package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/duckdb/duckdb-go/v2" // also registers the "duckdb" driver

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

// tablesRead are the tables this package reads; each must be a base table
// of the catalog's main schema.
var tablesRead = []string{"ducklake_metadata", "ducklake_schema", "ducklake_table", "ducklake_data_file", "ducklake_delete_file"}

// rowSink takes a catalog's answer as a read makes it: the catalog's
// metadata and its count of file rows first, then each file row as it is
// read and resolved, in the catalog's order, paths repeated where rows
// repeat them. An error a sink returns comes back from the read wrapped
// in errAnswer.
type rowSink interface {
	meta(c *Catalog, rows int64) error
	file(f File) error
}

// readRows is a reader's read of one catalog (child.go), with a DuckDB
// instance of pool's where pool is not nil: each file row goes to out as
// it is read, so that the reader holds no list of the catalog's files
// (the mirror puts them in path order, sort.go).
func readRows(ctx context.Context, file, name string, lim Limits, pool *dbPool, out rowSink) error {
	if name == "" {
		name = file
	}
	lim = lim.WithDefaults()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	r := &reader{ctx: ctx, name: name, lim: lim, file: file, pool: pool}
	sqlite, err := isSQLite(file)
	if err != nil {
		return r.errf("%v", strings.ReplaceAll(err.Error(), file, name))
	}
	switch {
	case sqlite:
		r.sqlite = true
		err = r.openSQLite(file)
	case pool != nil:
		err = r.attachPooled(pool, file)
	default:
		err = r.open(file)
	}
	if err == nil {
		err = r.read(out)
	}
	r.release(err == nil)
	var ea errAnswer
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ea):
		return err
	case parent.Err() != nil:
		return parent.Err()
	case ctx.Err() != nil:
		return &LimitError{Catalog: name, Key: KeyTimeout, Detail: fmt.Sprintf("reading it took longer than %s", lim.Timeout)}
	}
	var de *duckdb.Error
	switch {
	case errors.As(err, &de) && de.Type == duckdb.ErrorTypeOutOfMemory:
		return &LimitError{Catalog: name, Key: KeyMemoryLimit, Detail: fmt.Sprintf("reading it needs more than DuckDB's memory limit of %s", FormatBytes(lim.MemoryLimit))}
	case isSQLiteNoMem(err):
		return &LimitError{Catalog: name, Key: KeyMemoryLimit, Detail: fmt.Sprintf("reading it needs more than SQLite's memory limit of %s", FormatBytes(lim.MemoryLimit))}
	case isSQLiteTooBig(err):
		// Not the operator's to raise: no path of a catalog is near it.
		return r.errf("a value larger than SQLite's length limit of %s (SQLITE_LIMIT_LENGTH)", FormatBytes(sqliteMaxLength))
	}
	// DuckDB's messages name the file it opened: the local copy, whose
	// name means nothing to the operator and changes every run.
	return &renamed{msg: strings.ReplaceAll(err.Error(), file, name), err: err}
}

// read reads a catalog in this process, its files sorted and folded as
// the mirror sorts and folds a reader's (sort.go): this package's tests
// and benchmarks read catalogs so.
func read(ctx context.Context, file, name string, lim Limits, pool *dbPool) (*Catalog, error) {
	if name == "" {
		name = file
	}
	s := &sortingSink{sorter: newFileSorter("", name, sortBudgetOf(lim, file))}
	defer s.sorter.close()
	if err := readRows(ctx, file, name, lim, pool, s); err != nil {
		var ea errAnswer
		if errors.As(err, &ea) {
			return nil, ea.error
		}
		return nil, err
	}
	sorted, err := s.sorter.finish(s.c)
	if err != nil {
		return nil, err
	}
	defer sorted.Close()
	return sorted.Catalog()
}

// sortingSink sorts the rows of a read in this process.
type sortingSink struct {
	c      Catalog
	sorter *fileSorter
}

func (s *sortingSink) meta(c *Catalog, rows int64) error {
	s.c = *c
	return nil
}

func (s *sortingSink) file(f File) error { return s.sorter.add(f) }

// renamed is an error whose message names the catalog as the repository
// does instead of by its local copy.
type renamed struct {
	msg string
	err error
}

func (e *renamed) Error() string { return e.msg }
func (e *renamed) Unwrap() error { return e.err }

type reader struct {
	ctx    context.Context
	name   string
	lim    Limits
	sqlite bool // a SQLite catalog (else DuckDB)
	db     *sql.DB
	conn   *sql.Conn
	cols   map[string]map[string]bool // table → column names present

	file     string    // the local copy read
	attached bool      // the catalog is attached as cat (DuckDB)
	pooled   *instance // the pool's DuckDB the catalog is attached to
	pool     *dbPool
	dirty    bool // the pooled DuckDB holds something it should not: not used again

	fileRows int64  // rows of ducklake_data_file and ducklake_delete_file, as counted
	alias    string // attached under this name; "" is cat
}

// table is how the queries name one of the catalog's tables: the attached
// database's main schema in DuckDB, the main schema in SQLite. Names are
// this package's constants, never the catalog's.
func (r *reader) table(t string) string {
	if r.sqlite {
		return "main." + t
	}
	return r.attachedAs() + ".main." + t
}

// attachedAs is the name the catalog is attached under in DuckDB: cat,
// or the alias a difference gives each of its two catalogs.
func (r *reader) attachedAs() string {
	if r.alias == "" {
		return "cat"
	}
	return r.alias
}

func (r *reader) errf(format string, args ...any) error {
	return fmt.Errorf("catalog %s: "+format, append([]any{r.name}, args...)...)
}

// open starts a private in-memory DuckDB, locked down, that may open the
// catalog (and its WAL name, which DuckDB probes) and no other file, and
// attaches the catalog.
func (r *reader) open(file string) error {
	inst, err := startDuckDB(r.ctx, r.lim, "SET allowed_paths=["+sqlString(file)+", "+sqlString(file+".wal")+"]")
	if err != nil {
		return r.errf("%w", err)
	}
	r.db, r.conn = inst.db, inst.conn
	return r.attach(file)
}

// instance is a DuckDB locked down by startDuckDB, with its one connection.
type instance struct {
	db   *sql.DB
	conn *sql.Conn
}

func (in *instance) close() {
	in.conn.Close()
	in.db.Close()
}

// startDuckDB starts an in-memory DuckDB and locks it down. Every setting
// that keeps a catalog's SQL from reaching anything else is made before
// ATTACH reads a byte of one: no extension can load (ATTACH would load
// one for a SQLite or Postgres file), no file but those allow names
// (a SET of allowed_paths or allowed_directories) can be opened, nothing
// spills to disk, and lock_configuration keeps any statement from undoing
// it.
func startDuckDB(ctx context.Context, lim Limits, allow string) (*instance, error) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, fmt.Errorf("starting DuckDB: %w", err)
	}
	db.SetMaxOpenConns(1) // ATTACH and the queries must share one connection
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("starting DuckDB: %w", err)
	}
	setup := []string{
		"SET autoinstall_known_extensions=false",
		"SET autoload_known_extensions=false",
		"SET allow_community_extensions=false",
		"SET allow_unsigned_extensions=false",
		fmt.Sprintf("SET threads=%d", lim.Threads),
		fmt.Sprintf("SET memory_limit='%dKiB'", max(lim.MemoryLimit>>10, 1)),
		"SET temp_directory=''",
		"SET allowed_directories=[]",
		"SET allowed_paths=[]",
		allow,
		"SET enable_external_access=false",
		"SET lock_configuration=true",
	}
	for _, q := range setup {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			conn.Close()
			db.Close()
			return nil, fmt.Errorf("locking DuckDB down (%s): %w", q, err)
		}
	}
	return &instance{db: db, conn: conn}, nil
}

// attach attaches the catalog read-only as cat.
func (r *reader) attach(file string) error {
	if _, err := r.conn.ExecContext(r.ctx, "ATTACH "+sqlString(file)+" AS "+r.attachedAs()+" (TYPE duckdb, READ_ONLY)"); err != nil {
		return r.errf("not a readable DuckDB database: %w", err)
	}
	r.attached = true
	return nil
}

// release ends the reader's use of its database: a pooled DuckDB whose
// read went well detaches the catalog and goes back to the pool; any
// other is closed.
func (r *reader) release(ok bool) {
	if r.db == nil {
		return
	}
	pooled := r.pooled
	if pooled == nil {
		if r.conn != nil {
			r.conn.Close()
		}
		r.db.Close()
		r.db, r.conn = nil, nil
		return
	}
	r.db, r.conn, r.pooled = nil, nil, nil
	if r.pool.oneShot && ok && !r.dirty {
		// The reader's one catalog: it ends, and its DuckDB with it.
		return
	}
	if r.attached {
		// A context of its own: the read's may have run out.
		if _, err := pooled.conn.ExecContext(context.Background(), "DETACH cat"); err != nil {
			ok = false
		}
	}
	r.pool.put(pooled, ok && !r.dirty)
}

func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// read reads the catalog and gives out its metadata, then its file
// rows one by one, each resolved and checked (a clean path below the
// data path, within MaxPathBytes, no more rows than counted).
func (r *reader) read(out rowSink) error {
	check, load := r.checkObjects, r.loadColumns
	if r.sqlite {
		check, load = r.checkSQLiteObjects, r.loadSQLiteColumns
	}
	if err := check(); err != nil {
		return err
	}
	if err := load(); err != nil {
		return err
	}
	for _, t := range []string{"ducklake_metadata", "ducklake_data_file", "ducklake_delete_file"} {
		if r.cols[t] == nil {
			return r.errf("no %s table: not a DuckLake catalog", t)
		}
	}
	if err := r.checkRowCounts(); err != nil {
		return err
	}
	c := &Catalog{}
	if err := r.metadata(c); err != nil {
		return err
	}
	schemas, err := r.places("ducklake_schema", "schema_id", "")
	if err != nil {
		return err
	}
	tables, err := r.places("ducklake_table", "table_id", "schema_id")
	if err != nil {
		return err
	}
	if err := out.meta(c, r.fileRows); err != nil {
		return errAnswer{err}
	}
	fr := &fileRows{r: r, res: &resolver{dataPath: c.DataPath, schemas: schemas, tables: tables}, out: out}
	for _, kind := range []fileKind{{"ducklake_data_file", false, "file_format"}, {"ducklake_delete_file", true, "format"}} {
		if err := fr.readTable(kind); err != nil {
			return err
		}
	}
	if fr.rowsRead != r.fileRows {
		return r.errf("%d file rows read where %d were counted: the catalog changed while read", fr.rowsRead, r.fileRows)
	}
	return nil
}

// fileKind is one of the two tables of file rows.
type fileKind struct {
	table  string
	delete bool
	format string // its format column
}

// fileRows reads the file rows of a catalog and gives each out.
type fileRows struct {
	r        *reader
	res      *resolver
	out      rowSink
	rowsRead int64
	// One set of destinations for every row: declared per row, each
	// escaped to the heap, seven allocations a row.
	tableID, begin, size, footerSize nullInt64
	p, fileFormat                    sql.NullString
	rel                              sql.NullBool
}

// rowBatch is how many rows of a DuckDB catalog one query reads: DuckDB's
// Go driver makes a query's whole result (duckdb_execute_pending, not its
// streaming kind) before it gives the first row, so one query of a table
// of 10,000,000 rows held them all, past DuckDB's memory limit (a 1.2 GiB
// peak on the bench's rows10m). Ranges of rowid are read from the table
// scan itself (DuckDB skips the row groups outside them): 8.6 s for those
// 10,000,000 rows in batches of 65,536, 7.1 s in one query. SQLite steps
// through a query row by row, and is read in one.
const rowBatch = 1 << 16

// readTable reads one table's file rows, in batches of rowid where the
// catalog is DuckDB's.
func (fr *fileRows) readTable(kind fileKind) error {
	r := fr.r
	// footer_size and the format are read where the catalog has them:
	// verify --deep checks files against them.
	footer, format := "CAST(NULL AS BIGINT)", "CAST(NULL AS VARCHAR)"
	if r.cols[kind.table]["footer_size"] {
		footer = "footer_size"
	}
	if r.cols[kind.table][kind.format] {
		format = kind.format
	}
	q := "SELECT table_id, begin_snapshot, path, path_is_relative, file_size_bytes, " + footer + ", " + format + " FROM " + r.table(kind.table)
	if r.sqlite {
		return fr.query(kind, q)
	}
	var lo, hi sql.NullInt64
	if err := r.conn.QueryRowContext(r.ctx, "SELECT min(rowid), max(rowid) FROM "+r.table(kind.table)).Scan(&lo, &hi); err != nil {
		return r.errf("reading %s: %w", kind.table, err)
	}
	if !lo.Valid {
		return nil // no rows
	}
	// Each row has one rowid, in one batch: rows the batches miss or
	// read twice make a count other than the one checked at the end.
	for from := lo.Int64; from <= hi.Int64; from += rowBatch {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		to := from + rowBatch - 1
		if to < from { // past the largest int64
			to = hi.Int64
		}
		if err := fr.query(kind, fmt.Sprintf("%s WHERE rowid BETWEEN %d AND %d", q, from, to)); err != nil {
			return err
		}
		if to >= hi.Int64 {
			break
		}
	}
	return nil
}

// query reads the file rows q selects and gives each out.
func (fr *fileRows) query(kind fileKind, q string) error {
	r := fr.r
	rows, err := r.conn.QueryContext(r.ctx, q)
	if err != nil {
		return r.errf("reading %s: %w", kind.table, err)
	}
	defer rows.Close()
	for rows.Next() {
		// The counts were checked before; this bounds a table that
		// grows under us all the same, and notices the deadline in the
		// Go half of the loop.
		if fr.rowsRead++; fr.rowsRead > r.lim.MaxFiles {
			return r.tooManyFiles(fr.rowsRead)
		}
		if fr.rowsRead%4096 == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		if err := rows.Scan(&fr.tableID, &fr.begin, &fr.p, &fr.rel, &fr.size, &fr.footerSize, &fr.fileFormat); err != nil {
			return r.errf("reading %s: %w", kind.table, err)
		}
		if !fr.p.Valid || fr.p.String == "" {
			return r.errf("%s has a row without a path", kind.table)
		}
		where, err := fr.res.resolve(fr.tableID.NullInt64, fr.begin.NullInt64, fr.p.String, !fr.rel.Valid || fr.rel.Bool)
		if err != nil {
			return r.errf("%s: %w", kind.table, err)
		}
		f := File{Path: where, Size: -1, Footer: -1, Delete: kind.delete, Puffin: strings.EqualFold(fr.fileFormat.String, "puffin")}
		if fr.size.Valid {
			f.Size = fr.size.Int64
		}
		if fr.footerSize.Valid {
			f.Footer = fr.footerSize.Int64
		}
		if err := fr.out.file(f); err != nil {
			return errAnswer{err}
		}
	}
	if err := rows.Err(); err != nil {
		return r.errf("reading %s: %w", kind.table, err)
	}
	return nil
}

// nullInt64 is sql.NullInt64 with the values DuckDB gives a BIGINT column
// (an int64, or nil) taken as they are: sql.NullInt64 sets even those by
// reflection, a sixth of the time of reading a file row. Any other value
// is converted as sql.NullInt64 converts it.
type nullInt64 struct{ sql.NullInt64 }

func (n *nullInt64) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		n.Int64, n.Valid = v, true
		return nil
	case nil:
		n.Int64, n.Valid = 0, false
		return nil
	}
	return n.NullInt64.Scan(src)
}

// maxSizeHint bounds the room made for a catalog's files before they are
// read.
const maxSizeHint = 1 << 16

func (r *reader) tooManyFiles(n int64) error {
	return &LimitError{Catalog: r.name, Key: KeyMaxFiles,
		Detail: fmt.Sprintf("ducklake_data_file and ducklake_delete_file hold %d rows, more than the %d files allowed", n, r.lim.MaxFiles)}
}

// checkObjects refuses a catalog whose ducklake_* names are views:
// reading a view runs whatever query its author stored (a scan of
// range(1e15), current_setting() leaking the mirror's settings into a
// path). The system table listed here describes the catalog without
// running any of it.
//
// A catalog's macros are not looked for: none can run. The queries name
// the catalog's tables in full (cat.main.ducklake_data_file is a table,
// never a table macro, which is called with parentheses) and call
// DuckDB's own functions unqualified, which resolve in the reader's
// in-memory database and DuckDB's system schema, never in an attached
// catalog (TestReadNeverRunsTheCatalogsMacros holds that to every
// function the queries call). Listing them meant listing every function
// DuckDB has (duckdb_functions(), 20-30 ms, whatever the filter): a
// seventh of a first mirror's CPU.
func (r *reader) checkObjects() error {
	found, err := findObjects(r.ctx, r.conn, []string{r.attachedAs()})
	if err != nil {
		return r.errf("listing the catalog's objects: %w", err)
	}
	return r.objectError(found[r.attachedAs()])
}

// objectFound is a ducklake_* object of a catalog that is not a table.
type objectFound struct{ schema, object, kind string }

func (r *reader) objectError(f *objectFound) error {
	if f == nil {
		return nil
	}
	return r.errf("%s.%s is %s, not a table: a catalog is read from base tables only, and a view would run the catalog's own SQL", quoteName(f.schema), quoteName(f.object), f.kind)
}

// findObjects finds, in each of the attached databases named, a
// ducklake_* view; databases without one are not in the map.
func findObjects(ctx context.Context, conn *sql.Conn, databases []string) (map[string]*objectFound, error) {
	var in []string
	for _, d := range databases {
		in = append(in, sqlString(d))
	}
	rows, err := conn.QueryContext(ctx, "SELECT database_name, schema_name, view_name FROM duckdb_views() WHERE database_name IN ("+
		strings.Join(in, ", ")+") AND lower(view_name) LIKE 'ducklake%' ORDER BY database_name, schema_name, view_name")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := map[string]*objectFound{}
	for rows.Next() {
		var db, schema, object string
		if err := rows.Scan(&db, &schema, &object); err != nil {
			return nil, err
		}
		if found[db] == nil {
			found[db] = &objectFound{schema: schema, object: object, kind: "a view"}
		}
	}
	return found, rows.Err()
}

// loadColumns learns the columns of the tables this reader queries, which
// DuckLake versions add to, from the catalog's description of itself. A
// table missing from the main schema is left out (read says which a
// catalog must have). A column with an expression is refused: DuckLake
// writes none, and a generated column computes its value (any SQL its
// author chose) on every read.
func (r *reader) loadColumns() error {
	r.cols = map[string]map[string]bool{}
	read := map[string]bool{}
	for _, t := range tablesRead {
		read[t] = true
	}
	rows, err := r.columnsOfTablesRead()
	if err != nil {
		return r.errf("reading the columns of its tables: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var table, col string
		var expr bool
		if err := rows.Scan(&table, &col, &expr); err != nil {
			return r.errf("reading the columns of its tables: %w", err)
		}
		table, col = strings.ToLower(table), strings.ToLower(col)
		if !read[table] {
			continue
		}
		if col == "rowid" {
			// The file rows are read by ranges of DuckDB's rowid, which
			// a column of that name would stand in for.
			return r.errf("column %s.rowid: DuckLake writes no column of that name, and it would hide the row ids its rows are read by", quoteName(table))
		}
		if expr {
			return r.errf("column %s.%s has a default or generated expression; DuckLake catalogs have none, and a generated column runs the catalog's own SQL", quoteName(table), quoteName(col))
		}
		if r.cols[table] == nil {
			r.cols[table] = map[string]bool{}
		}
		r.cols[table][col] = true
	}
	if err := rows.Err(); err != nil {
		return r.errf("reading the columns of its tables: %w", err)
	}
	// duckdb_columns() also lists views' columns; checkObjects refused
	// ducklake_* views already, so these are base tables.
	return nil
}

// columnsOfTablesRead lists the columns of the tables read: each table,
// its column and whether the column has an expression. The tables are
// asked for by name (pragma_table_info, 1.6 ms for the five); where one
// is missing, which fails that query, the schema's columns are listed
// whole (duckdb_columns(), 7.4 ms: it lists every column of every
// database first). A first mirror reads a catalog per version.
func (r *reader) columnsOfTablesRead() (*sql.Rows, error) {
	var q []string
	for _, t := range tablesRead {
		q = append(q, "SELECT "+sqlString(t)+", name, dflt_value IS NOT NULL FROM pragma_table_info("+sqlString(r.table(t))+")")
	}
	if rows, err := r.conn.QueryContext(r.ctx, strings.Join(q, " UNION ALL ")); err == nil || r.ctx.Err() != nil {
		return rows, err
	}
	// Names are matched by the caller, not in SQL: DuckDB resolves names
	// without regard to case, and a lower() in the query costs six times
	// the plain listing of the schema's columns.
	return r.conn.QueryContext(r.ctx, "SELECT table_name, column_name, column_default IS NOT NULL FROM duckdb_columns() "+
		"WHERE database_name = "+sqlString(r.attachedAs())+" AND schema_name = 'main'")
}

// checkRowCounts refuses a catalog with more rows than the limit before
// reading any of them; counting a base table's rows reads its metadata,
// not its rows. The tables are counted in one statement: a statement's
// own cost (parse, bind, plan, the driver's round trip) was most of each
// of the five counts (0.66 ms each, 2.1 ms the five at once, in a warm
// DuckDB), and a first mirror reads a catalog per version.
func (r *reader) checkRowCounts() error {
	var present, counts []string
	for _, t := range tablesRead {
		if r.cols[t] != nil {
			present = append(present, t)
			counts = append(counts, "(SELECT count(*) FROM "+r.table(t)+")")
		}
	}
	if len(present) == 0 {
		return nil
	}
	ns := make([]int64, len(present))
	dest := make([]any, len(present))
	for i := range ns {
		dest[i] = &ns[i]
	}
	if err := r.conn.QueryRowContext(r.ctx, "SELECT "+strings.Join(counts, ", ")).Scan(dest...); err != nil {
		return r.errf("counting the rows of %s: %w", strings.Join(present, ", "), err)
	}
	var files int64
	for i, t := range present {
		n := ns[i]
		switch t {
		case "ducklake_data_file", "ducklake_delete_file":
			if files += n; files > r.lim.MaxFiles {
				return r.tooManyFiles(files)
			}
			r.fileRows = files
		default:
			if n > r.lim.MaxFiles {
				return &LimitError{Catalog: r.name, Key: KeyMaxFiles,
					Detail: fmt.Sprintf("%s holds %d rows, more than the %d allowed", t, n, r.lim.MaxFiles)}
			}
		}
	}
	return nil
}

// metadata reads the DuckLake version and the stored data_path, preferring
// rows without a scope (0.3+ can scope settings to a schema or table).
func (r *reader) metadata(c *Catalog) error {
	q := "SELECT key, value, NULL FROM " + r.table("ducklake_metadata")
	if r.cols["ducklake_metadata"]["scope"] {
		q = "SELECT key, value, scope FROM " + r.table("ducklake_metadata")
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
	if len(c.DataPath) >= maxDataPath {
		return r.errf("ducklake_metadata's data_path is %d bytes, longer than a path may be (%d): %s", len(c.DataPath), maxDataPath, Excerpt(c.DataPath))
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
	q := fmt.Sprintf("SELECT %s, path, path_is_relative, begin_snapshot, end_snapshot, %s FROM %s", idCol, parent, r.table(table))
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
	bases    map[baseKey]string // base of relative file paths, by table and snapshot
}

// maxBases bounds the bases a resolver keeps: a catalog has a few per
// table (one per snapshot that added files), and one whose rows each name
// a snapshot of their own must not double what reading it holds.
const maxBases = 4096

// baseKey is what a relative file path's base depends on: its table and
// the snapshot it began in.
type baseKey struct {
	table int64
	begin sql.NullInt64
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
// absolute one replaces the base. A result longer than limit bytes is
// not made: ok is false, and too is the part that made it too long.
func join(base string, p place, limit int) (joined string, too string, ok bool) {
	if !p.path.Valid || p.path.String == "" {
		return base, "", true
	}
	if p.relative.Valid && !p.relative.Bool {
		if len(p.path.String) > limit {
			return "", p.path.String, false
		}
		return p.path.String, "", true
	}
	if len(base)+len(p.path.String) > limit {
		return "", p.path.String, false
	}
	return base + p.path.String, "", true
}

// resolve turns a file row into its place below data_dir, as DuckLake
// resolves it: data path + schema path + table path + file path, each
// joined only where its path_is_relative is true. A result that does not
// fall under the stored data path, or that holds "..", breaks the spec;
// one longer than MaxPathBytes below the data path is refused before it
// is made, so a path part of megabytes is never joined to each row.
func (r *resolver) resolve(tableID, begin sql.NullInt64, filePath string, relative bool) (string, error) {
	limit := len(r.dataPath) + MaxPathBytes
	tooLong := func(part string) error {
		return fmt.Errorf("file %s: its path below the data path would be longer than %d bytes, the object stores' key limit (a path part of %d bytes: %s)",
			Excerpt(filePath), MaxPathBytes, len(part), Excerpt(part))
	}
	full := filePath
	if relative {
		// The files of a table and snapshot share a base: worked out
		// once, not for each of them.
		key := baseKey{tableID.Int64, begin}
		base, ok := r.bases[key]
		if !ok {
			base = r.dataPath
			if t, ok := at(r.tables[tableID.Int64], begin); ok {
				if s, ok := at(r.schemas[t.parent], begin); ok {
					var too string
					if base, too, ok = join(base, s, limit); !ok {
						return "", tooLong(too)
					}
				}
				var too string
				if base, too, ok = join(base, t, limit); !ok {
					return "", tooLong(too)
				}
			}
			if r.bases == nil {
				r.bases = map[baseKey]string{}
			}
			if len(r.bases) < maxBases {
				r.bases[key] = base
			}
		}
		if len(base)+len(filePath) > limit {
			return "", tooLong(filePath)
		}
		full = base + filePath
	} else if len(filePath) > limit {
		return "", tooLong(filePath)
	}
	rel, ok := strings.CutPrefix(full, r.dataPath)
	if !ok {
		return "", fmt.Errorf("file %s is outside the catalog's data path %s", Excerpt(full), Excerpt(r.dataPath))
	}
	if err := backend.CheckName(rel); err != nil {
		return "", fmt.Errorf("file %s: path is not a clean relative path below the data path (no \"..\", \".\" or empty segments)", Excerpt(full))
	}
	return rel, nil
}
