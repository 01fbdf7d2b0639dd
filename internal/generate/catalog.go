package generate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // registers the "duckdb" database/sql driver
)

// catalogAlias is the name a catalog file is attached under while it is
// written. One catalog is attached at a time.
const catalogAlias = "fdlcat"

// engine is one in-memory DuckDB instance on a single connection: ATTACH,
// USE and COPY all run on that connection, so no pool can split them.
type engine struct {
	db   *sql.DB
	conn *sql.Conn
}

func openEngine(ctx context.Context) (*engine, error) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, fmt.Errorf("open DuckDB: %w", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open DuckDB connection: %w", err)
	}
	return &engine{db: db, conn: conn}, nil
}

func (e *engine) Close() error {
	err := e.conn.Close()
	if cerr := e.db.Close(); err == nil {
		err = cerr
	}
	return err
}

func (e *engine) exec(ctx context.Context, query string, args ...any) error {
	if _, err := e.conn.ExecContext(ctx, query, args...); err != nil {
		return fmt.Errorf("%s: %w", firstLine(query), err)
	}
	return nil
}

func firstLine(q string) string {
	q = strings.TrimSpace(q)
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		q = q[:i]
	}
	if len(q) > 120 {
		q = q[:120] + "…"
	}
	return q
}

// sqlString quotes s as a SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// sqlIdent quotes s as a SQL identifier.
func sqlIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// column is a top-level column of the table the generator writes to.
type column struct {
	id           int64
	name         string
	ducklakeType string // as ducklake_column stores it: int64, varchar…
	duckType     string // the DuckDB type to cast values to
}

// catalog is an attached DuckLake catalog file and the state the generator
// needs to add one snapshot to it: the target table, its columns and the
// next free IDs. It works on any layout DuckDB's DuckLake extension wrote
// (0.1 to 0.4) by asking the catalog which tables and columns it has.
type catalog struct {
	e        *engine
	path     string
	readOnly bool

	columnsOf map[string]map[string]bool // catalog table -> its columns

	version    string // ducklake_metadata version
	dataPath   string // stored data_path
	hasPaths   bool   // schemas and tables carry paths (0.2 and later)
	fileStats  string // name of the per-file column statistics table
	tableDir   string // the table's directory relative to the data path ("" in 0.1)
	schemaName string
	tableName  string
	schemaID   int64
	tableID    int64
	columns    []column

	// State of the newest snapshot.
	snapshotID    int64
	schemaVersion int64
	nextCatalogID int64
	nextFileID    int64
	nextRowID     int64
	recordCount   int64
	fileSize      int64
	hasTableStats bool
	hasTable      bool

	// Changes of the snapshot being built.
	pending *snapshotChanges
}

type snapshotChanges struct {
	id       int64
	created  []string // created_schema:…, created_table:…
	inserted bool
	deleted  bool
}

// attachCatalog attaches an existing catalog file and loads its state. The caller detaches it with close.
func attachCatalog(ctx context.Context, e *engine, path string, readOnly bool) (*catalog, error) {
	c := &catalog{e: e, path: path, readOnly: readOnly}
	mode := ""
	if readOnly {
		mode = " (READ_ONLY)"
	}
	if err := e.exec(ctx, fmt.Sprintf("ATTACH %s AS %s%s", sqlString(path), catalogAlias, mode)); err != nil {
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	if err := c.load(ctx); err != nil {
		c.detach(ctx)
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	return c, nil
}

// copyCatalog writes a new catalog file at path holding everything the
// catalog at prev holds, and attaches it. COPY FROM DATABASE writes a
// compact file, where copying the file and changing it would let free
// blocks pile up over a long chain of versions.
func copyCatalog(ctx context.Context, e *engine, prev, path string) (*catalog, error) {
	if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("catalog %s: already exists", path)
	}
	if err := e.exec(ctx, fmt.Sprintf("ATTACH %s AS fdlprev (READ_ONLY)", sqlString(prev))); err != nil {
		return nil, fmt.Errorf("catalog %s: %w", prev, err)
	}
	defer e.exec(ctx, "DETACH fdlprev")
	if err := e.exec(ctx, fmt.Sprintf("ATTACH %s AS %s", sqlString(path), catalogAlias)); err != nil {
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	c := &catalog{e: e, path: path}
	if err := e.exec(ctx, "COPY FROM DATABASE fdlprev TO "+catalogAlias); err != nil {
		c.detach(ctx)
		return nil, fmt.Errorf("catalog %s: copy from %s: %w", path, prev, err)
	}
	if err := c.load(ctx); err != nil {
		c.detach(ctx)
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	return c, nil
}

// createCatalog writes a new, empty catalog of the given layout with its
// first snapshot (0: the schema "main"), like DuckLake's own initialisation.
func createCatalog(ctx context.Context, e *engine, path, layout, dataPath string, now time.Time) (*catalog, error) {
	if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("catalog %s: already exists", path)
	}
	ddl := ddlV03
	if layout == "0.1" {
		ddl = ddlV01
	}
	if err := e.exec(ctx, fmt.Sprintf("ATTACH %s AS %s", sqlString(path), catalogAlias)); err != nil {
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	c := &catalog{e: e, path: path}
	fail := func(err error) (*catalog, error) {
		c.detach(ctx)
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	for _, stmt := range ddl {
		stmt = strings.Replace(stmt, "CREATE TABLE ", "CREATE TABLE "+catalogAlias+".", 1)
		if err := e.exec(ctx, stmt); err != nil {
			return fail(err)
		}
	}
	if err := c.loadColumns(ctx); err != nil {
		return fail(err)
	}
	for _, kv := range [][2]string{
		{"version", layout},
		{"created_by", "fdl-mirror generator (DuckDB " + duckDBVersion(ctx, e) + ")"},
		{"data_path", dataPath},
		{"encrypted", "false"},
	} {
		if err := c.insert(ctx, "ducklake_metadata", []string{"key", "value"}, []any{kv[0], kv[1]}); err != nil {
			return fail(err)
		}
	}
	c.version, c.dataPath, c.hasPaths = layout, dataPath, layout != "0.1"
	c.fileStats = "ducklake_file_column_stats"
	if layout == "0.1" {
		c.fileStats = "ducklake_file_column_statistics"
	}
	c.schemaName = "main"
	c.schemaID = 0
	if c.hasPaths {
		c.tableDir = c.schemaName + "/"
	}
	c.nextCatalogID = 1
	c.snapshotID = -1
	c.begin()
	if err := c.insert(ctx, "ducklake_schema",
		[]string{"schema_id", "schema_uuid", "begin_snapshot", "end_snapshot", "schema_name", "path", "path_is_relative"},
		[]any{c.schemaID, newUUIDv4(), c.pending.id, nil, c.schemaName, c.schemaName + "/", true}); err != nil {
		return fail(err)
	}
	c.pending.created = append(c.pending.created, fmt.Sprintf("created_schema:%q", c.schemaName))
	if err := c.commit(ctx, now, ""); err != nil {
		return fail(err)
	}
	return c, nil
}

func duckDBVersion(ctx context.Context, e *engine) string {
	var v string
	if err := e.conn.QueryRowContext(ctx, "SELECT library_version FROM pragma_version()").Scan(&v); err != nil {
		return "unknown"
	}
	return v
}

// loadColumns records which tables and columns the catalog has, so that
// inserts name only columns its layout knows.
func (c *catalog) loadColumns(ctx context.Context) error {
	rows, err := c.e.conn.QueryContext(ctx,
		"SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = ?", catalogAlias)
	if err != nil {
		return fmt.Errorf("list catalog columns: %w", err)
	}
	defer rows.Close()
	c.columnsOf = map[string]map[string]bool{}
	for rows.Next() {
		var t, col string
		if err := rows.Scan(&t, &col); err != nil {
			return fmt.Errorf("list catalog columns: %w", err)
		}
		if c.columnsOf[t] == nil {
			c.columnsOf[t] = map[string]bool{}
		}
		c.columnsOf[t][col] = true
	}
	return rows.Err()
}

func (c *catalog) has(table, col string) bool { return c.columnsOf[table][col] }

func (c *catalog) q(table string) string { return catalogAlias + "." + table }

func (c *catalog) load(ctx context.Context) error {
	if err := c.loadColumns(ctx); err != nil {
		return err
	}
	if c.columnsOf["ducklake_metadata"] == nil || c.columnsOf["ducklake_snapshot"] == nil {
		return errors.New("not a DuckLake catalog (no ducklake_metadata or ducklake_snapshot table)")
	}
	meta := map[string]string{}
	rows, err := c.e.conn.QueryContext(ctx, "SELECT key, value FROM "+c.q("ducklake_metadata"))
	if err != nil {
		return fmt.Errorf("read ducklake_metadata: %w", err)
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return fmt.Errorf("read ducklake_metadata: %w", err)
		}
		if _, seen := meta[k]; !seen { // scoped rows (0.3+) come after the global ones
			meta[k] = v
		}
	}
	rows.Close()
	c.version, c.dataPath = meta["version"], meta["data_path"]
	if c.dataPath == "" {
		return errors.New("ducklake_metadata has no data_path")
	}
	c.hasPaths = c.has("ducklake_schema", "path") && c.has("ducklake_table", "path")
	c.fileStats = "ducklake_file_column_stats"
	if c.columnsOf[c.fileStats] == nil {
		c.fileStats = "ducklake_file_column_statistics"
	}

	if err := c.e.conn.QueryRowContext(ctx,
		"SELECT snapshot_id, schema_version, next_catalog_id, next_file_id FROM "+c.q("ducklake_snapshot")+
			" ORDER BY snapshot_id DESC LIMIT 1").
		Scan(&c.snapshotID, &c.schemaVersion, &c.nextCatalogID, &c.nextFileID); err != nil {
		return fmt.Errorf("read newest snapshot: %w", err)
	}

	// The table to write to: the first live table. A catalog without one
	// (fresh DuckLake) gets the generator's table in its first snapshot.
	pathCols := "NULL, TRUE, NULL, TRUE"
	if c.hasPaths {
		pathCols = "s.path, s.path_is_relative, t.path, t.path_is_relative"
	}
	var schemaPath, tablePath sql.NullString
	var schemaRel, tableRel sql.NullBool
	err = c.e.conn.QueryRowContext(ctx, `SELECT t.table_id, t.table_name, s.schema_id, s.schema_name, `+pathCols+`
		FROM `+c.q("ducklake_table")+` t JOIN `+c.q("ducklake_schema")+` s ON s.schema_id = t.schema_id AND s.end_snapshot IS NULL
		WHERE t.end_snapshot IS NULL ORDER BY t.table_id LIMIT 1`).
		Scan(&c.tableID, &c.tableName, &c.schemaID, &c.schemaName, &schemaPath, &schemaRel, &tablePath, &tableRel)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		c.hasTable = false
		if err := c.e.conn.QueryRowContext(ctx, `SELECT schema_id, schema_name FROM `+c.q("ducklake_schema")+
			` WHERE end_snapshot IS NULL ORDER BY schema_id LIMIT 1`).Scan(&c.schemaID, &c.schemaName); err != nil {
			return fmt.Errorf("find a live schema: %w", err)
		}
		if c.hasPaths {
			if err := c.e.conn.QueryRowContext(ctx, `SELECT path, path_is_relative FROM `+c.q("ducklake_schema")+
				` WHERE schema_id = ? AND end_snapshot IS NULL`, c.schemaID).Scan(&schemaPath, &schemaRel); err != nil {
				return fmt.Errorf("read schema %s path: %w", c.schemaName, err)
			}
		}
		return c.setTableDir(schemaPath, schemaRel, sql.NullString{}, sql.NullBool{})
	case err != nil:
		return fmt.Errorf("find a live table: %w", err)
	}
	c.hasTable = true
	if err := c.setTableDir(schemaPath, schemaRel, tablePath, tableRel); err != nil {
		return err
	}
	if err := c.loadTableColumns(ctx); err != nil {
		return err
	}
	err = c.e.conn.QueryRowContext(ctx, "SELECT record_count, next_row_id, file_size_bytes FROM "+c.q("ducklake_table_stats")+
		" WHERE table_id = ?", c.tableID).Scan(&c.recordCount, &c.nextRowID, &c.fileSize)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Inlined-only tables (0.4) have no stats row yet; their inlined
		// rows still took row IDs.
		c.hasTableStats = false
		return c.loadInlinedRowIDs(ctx)
	case err != nil:
		return fmt.Errorf("read table stats of %s: %w", c.tableName, err)
	}
	c.hasTableStats = true
	return nil
}

// setTableDir works out where the table's files go relative to the data
// path. Absolute schema or table paths would put new files outside the
// data path, which an FDL repository cannot hold.
func (c *catalog) setTableDir(schemaPath sql.NullString, schemaRel sql.NullBool, tablePath sql.NullString, tableRel sql.NullBool) error {
	c.tableDir = ""
	if !c.hasPaths {
		return nil
	}
	if schemaPath.Valid {
		if schemaRel.Valid && !schemaRel.Bool {
			return fmt.Errorf("schema %s has an absolute path %q: the generator writes only under the data path", c.schemaName, schemaPath.String)
		}
		c.tableDir = schemaPath.String
	}
	if tablePath.Valid {
		if tableRel.Valid && !tableRel.Bool {
			return fmt.Errorf("table %s has an absolute path %q: the generator writes only under the data path", c.tableName, tablePath.String)
		}
		c.tableDir += tablePath.String
	}
	return nil
}

func (c *catalog) loadTableColumns(ctx context.Context) error {
	rows, err := c.e.conn.QueryContext(ctx, `SELECT column_id, column_name, column_type FROM `+c.q("ducklake_column")+`
		WHERE table_id = ? AND end_snapshot IS NULL AND parent_column IS NULL ORDER BY column_order`, c.tableID)
	if err != nil {
		return fmt.Errorf("read columns of %s: %w", c.tableName, err)
	}
	defer rows.Close()
	c.columns = nil
	for rows.Next() {
		var col column
		if err := rows.Scan(&col.id, &col.name, &col.ducklakeType); err != nil {
			return fmt.Errorf("read columns of %s: %w", c.tableName, err)
		}
		dt, err := duckTypeOf(col.ducklakeType)
		if err != nil {
			return fmt.Errorf("table %s column %s: %w", c.tableName, col.name, err)
		}
		col.duckType = dt
		c.columns = append(c.columns, col)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(c.columns) == 0 {
		return fmt.Errorf("table %s has no live columns", c.tableName)
	}
	return nil
}

// loadInlinedRowIDs finds the next row ID of a table whose rows are all
// inlined in the catalog (DuckLake 0.2+ data inlining).
func (c *catalog) loadInlinedRowIDs(ctx context.Context) error {
	if c.columnsOf["ducklake_inlined_data_tables"] == nil {
		return nil
	}
	rows, err := c.e.conn.QueryContext(ctx, "SELECT table_name FROM "+c.q("ducklake_inlined_data_tables")+" WHERE table_id = ?", c.tableID)
	if err != nil {
		return fmt.Errorf("read inlined tables of %s: %w", c.tableName, err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	rows.Close()
	for _, n := range names {
		var next sql.NullInt64
		if err := c.e.conn.QueryRowContext(ctx, "SELECT max(row_id) + 1 FROM "+c.q(sqlIdent(n))).Scan(&next); err != nil {
			return fmt.Errorf("read inlined table %s: %w", n, err)
		}
		if next.Valid && next.Int64 > c.nextRowID {
			c.nextRowID = next.Int64
		}
	}
	return nil
}

// duckTypeOf maps a DuckLake column type to the DuckDB type of generated
// values.
func duckTypeOf(t string) (string, error) {
	switch strings.ToLower(t) {
	case "boolean":
		return "BOOLEAN", nil
	case "int8":
		return "TINYINT", nil
	case "int16":
		return "SMALLINT", nil
	case "int32":
		return "INTEGER", nil
	case "int64":
		return "BIGINT", nil
	case "uint8":
		return "UTINYINT", nil
	case "uint16":
		return "USMALLINT", nil
	case "uint32":
		return "UINTEGER", nil
	case "uint64":
		return "UBIGINT", nil
	case "float32":
		return "FLOAT", nil
	case "float64":
		return "DOUBLE", nil
	case "varchar":
		return "VARCHAR", nil
	case "blob":
		return "BLOB", nil
	case "date":
		return "DATE", nil
	case "timestamp":
		return "TIMESTAMP", nil
	case "timestamptz":
		return "TIMESTAMPTZ", nil
	case "uuid":
		return "UUID", nil
	}
	if strings.HasPrefix(strings.ToLower(t), "decimal(") {
		return strings.ToUpper(t), nil
	}
	return "", fmt.Errorf("column type %q is not one the generator can fill", t)
}

// valueExpr is a deterministic value of the column for row ID rid (a
// BIGINT), varied by seed.
func (col column) valueExpr(seed int64) string {
	switch col.duckType {
	case "BOOLEAN":
		return "(rid % 2 = 0)"
	case "TINYINT":
		return "(rid % 128)::TINYINT"
	case "SMALLINT":
		return "(rid % 32768)::SMALLINT"
	case "INTEGER":
		return "(rid % 2147483648)::INTEGER"
	case "BIGINT":
		return "rid::BIGINT"
	case "UTINYINT":
		return "(rid % 256)::UTINYINT"
	case "USMALLINT":
		return "(rid % 65536)::USMALLINT"
	case "UINTEGER":
		return "(rid % 4294967296)::UINTEGER"
	case "UBIGINT":
		return "rid::UBIGINT"
	case "FLOAT", "DOUBLE":
		return fmt.Sprintf("((hash(rid + %d) %% 100000) / 100.0)::%s", seed, col.duckType)
	case "VARCHAR":
		return "('row-' || rid::VARCHAR)"
	case "BLOB":
		return "('row-' || rid::VARCHAR)::BLOB"
	case "DATE":
		return "(DATE '2024-01-01' + (rid % 3650)::INTEGER)"
	case "TIMESTAMP":
		return "(TIMESTAMP '2024-01-01 00:00:00' + to_seconds(rid))"
	case "TIMESTAMPTZ":
		return "(TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_seconds(rid))"
	case "UUID":
		return fmt.Sprintf("md5((rid + %d)::VARCHAR)::UUID", seed)
	}
	return fmt.Sprintf("(rid %% 10)::%s", col.duckType) // DECIMAL(p,s)
}

// insert adds one row, naming only the columns this catalog's layout has.
func (c *catalog) insert(ctx context.Context, table string, cols []string, vals []any) error {
	return c.insertMany(ctx, table, cols, [][]any{vals})
}

// insertMany adds rows in batches, naming only the columns this catalog's
// layout has (a 0.1 catalog has no mapping_id, no commit_message…).
func (c *catalog) insertMany(ctx context.Context, table string, cols []string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	var keep []int
	var names []string
	for i, col := range cols {
		if c.has(table, col) {
			keep = append(keep, i)
			names = append(names, sqlIdent(col))
		}
	}
	if len(keep) == 0 {
		return fmt.Errorf("catalog has no table %s", table)
	}
	placeholders := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(keep)), ", ") + ")"
	const batch = 256
	for start := 0; start < len(rows); start += batch {
		end := min(start+batch, len(rows))
		var b strings.Builder
		fmt.Fprintf(&b, "INSERT INTO %s (%s) VALUES ", c.q(table), strings.Join(names, ", "))
		args := make([]any, 0, (end-start)*len(keep))
		for r := start; r < end; r++ {
			if r > start {
				b.WriteString(", ")
			}
			b.WriteString(placeholders)
			for _, i := range keep {
				args = append(args, rows[r][i])
			}
		}
		if err := c.e.exec(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("insert into %s: %w", table, err)
		}
	}
	return nil
}

// begin starts a new snapshot.
func (c *catalog) begin() {
	c.pending = &snapshotChanges{id: c.snapshotID + 1}
}

// createTable adds the generator's own table (main.events) in the pending
// snapshot: a 64-bit id, a name and a value.
func (c *catalog) createTable(ctx context.Context, name string) error {
	s := c.pending
	c.tableID = c.nextCatalogID
	c.nextCatalogID++
	c.tableName = name
	c.schemaVersion++
	if err := c.insert(ctx, "ducklake_table",
		[]string{"table_id", "table_uuid", "begin_snapshot", "end_snapshot", "schema_id", "table_name", "path", "path_is_relative"},
		[]any{c.tableID, newUUIDv7(), s.id, nil, c.schemaID, name, name + "/", true}); err != nil {
		return err
	}
	c.columns = []column{
		{id: 1, name: "id", ducklakeType: "int64", duckType: "BIGINT"},
		{id: 2, name: "name", ducklakeType: "varchar", duckType: "VARCHAR"},
		{id: 3, name: "value", ducklakeType: "float64", duckType: "DOUBLE"},
	}
	var rows [][]any
	for i, col := range c.columns {
		rows = append(rows, []any{col.id, s.id, nil, c.tableID, int64(i + 1), col.name, col.ducklakeType, nil, nil, true, nil})
	}
	if err := c.insertMany(ctx, "ducklake_column",
		[]string{"column_id", "begin_snapshot", "end_snapshot", "table_id", "column_order", "column_name", "column_type",
			"initial_default", "default_value", "nulls_allowed", "parent_column"}, rows); err != nil {
		return err
	}
	if c.hasPaths {
		c.tableDir += name + "/"
	}
	c.hasTable = true
	s.created = append(s.created, fmt.Sprintf("created_table:%q.%q", c.schemaName, name))
	return nil
}

// fileStat is what the catalog records of one column in one data file.
type fileStat struct {
	columnID   int64
	sizeBytes  int64
	valueCount int64
	nullCount  int64
	min, max   sql.NullString
	isFloat    bool
}

// dataFile is a data file to record in the pending snapshot.
type dataFile struct {
	name        string // file name, relative to the table's directory
	records     int64
	size        int64
	footer      int64
	stats       []fileStat
	rowIDStart  int64 // set by addDataFiles
	dataFileID  int64 // set by addDataFiles
	deleteCount int64 // delete files only
}

// addDataFiles records new data files in the pending snapshot, giving
// each its file ID and first row ID.
func (c *catalog) addDataFiles(ctx context.Context, files []*dataFile) error {
	if len(files) == 0 {
		return nil
	}
	s := c.pending
	var rows, statRows [][]any
	for _, f := range files {
		f.dataFileID = c.nextFileID
		c.nextFileID++
		f.rowIDStart = c.nextRowID
		c.nextRowID += f.records
		c.recordCount += f.records
		c.fileSize += f.size
		rows = append(rows, []any{f.dataFileID, c.tableID, s.id, nil, nil, f.name, true, "parquet",
			f.records, f.size, f.footer, f.rowIDStart, nil, nil, nil, nil})
		for _, st := range f.stats {
			var nan any
			if st.isFloat {
				nan = false
			}
			statRows = append(statRows, []any{f.dataFileID, c.tableID, st.columnID, st.sizeBytes, st.valueCount, st.nullCount,
				st.min, st.max, nan, nil})
		}
	}
	if err := c.insertMany(ctx, "ducklake_data_file",
		[]string{"data_file_id", "table_id", "begin_snapshot", "end_snapshot", "file_order", "path", "path_is_relative", "file_format",
			"record_count", "file_size_bytes", "footer_size", "row_id_start", "partition_id", "encryption_key", "partial_file_info", "mapping_id"},
		rows); err != nil {
		return err
	}
	if err := c.insertMany(ctx, c.fileStats,
		[]string{"data_file_id", "table_id", "column_id", "column_size_bytes", "value_count", "null_count",
			"min_value", "max_value", "contains_nan", "extra_stats"}, statRows); err != nil {
		return err
	}
	if err := c.mergeTableColumnStats(ctx, files); err != nil {
		return err
	}
	s.inserted = true
	return nil
}

// addUnwrittenFiles records n data files in the pending snapshot, of
// 1,000 bytes and 100 rows each, named as DuckLake names files, that are
// not written: in one statement, so that a catalog of ten million rows
// takes seconds. The table's statistics do not count them.
func (c *catalog) addUnwrittenFiles(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	q := fmt.Sprintf("INSERT INTO %s (data_file_id, table_id, begin_snapshot, path, path_is_relative, file_format, record_count, file_size_bytes, footer_size, row_id_start) "+
		"SELECT %d + i, %d, %d, 'ducklake-' || uuid() || '.parquet', true, 'parquet', 100, 1000, 500, %d + 100 * i FROM range(%d) t(i)",
		c.q("ducklake_data_file"), c.nextFileID, c.tableID, c.pending.id, c.nextRowID, n)
	if err := c.e.exec(ctx, q); err != nil {
		return err
	}
	c.nextFileID += int64(n)
	c.nextRowID += 100 * int64(n)
	c.pending.inserted = true
	return nil
}

// mergeTableColumnStats widens the table's column statistics by the new
// files', comparing values as their column's type.
func (c *catalog) mergeTableColumnStats(ctx context.Context, files []*dataFile) error {
	tcs := "ducklake_table_column_stats"
	for _, col := range c.columns {
		var mins, maxs []string
		var hasNull, isFloat bool
		for _, f := range files {
			for _, st := range f.stats {
				if st.columnID != col.id {
					continue
				}
				if st.min.Valid {
					mins = append(mins, st.min.String)
				}
				if st.max.Valid {
					maxs = append(maxs, st.max.String)
				}
				hasNull = hasNull || st.nullCount > 0
				isFloat = st.isFloat
			}
		}
		var nan any
		if isFloat {
			nan = false
		}
		var exists bool
		if err := c.e.conn.QueryRowContext(ctx, "SELECT count(*) > 0 FROM "+c.q(tcs)+" WHERE table_id = ? AND column_id = ?",
			c.tableID, col.id).Scan(&exists); err != nil {
			return fmt.Errorf("read %s: %w", tcs, err)
		}
		if !exists {
			if err := c.insert(ctx, tcs, []string{"table_id", "column_id", "contains_null", "contains_nan", "min_value", "max_value", "extra_stats"},
				[]any{c.tableID, col.id, hasNull, nan, nil, nil, nil}); err != nil {
				return err
			}
		}
		// least/greatest skip NULLs, so a missing bound takes the new one.
		q := fmt.Sprintf(`UPDATE %s SET
			min_value = (SELECT least(TRY_CAST(min_value AS %[2]s), min(TRY_CAST(v AS %[2]s)))::VARCHAR FROM unnest(?::VARCHAR[]) u(v)),
			max_value = (SELECT greatest(TRY_CAST(max_value AS %[2]s), max(TRY_CAST(v AS %[2]s)))::VARCHAR FROM unnest(?::VARCHAR[]) u(v)),
			contains_null = contains_null OR ?
			WHERE table_id = ? AND column_id = ?`, c.q(tcs), col.duckType)
		if err := c.e.exec(ctx, q, listLiteral(mins), listLiteral(maxs), hasNull, c.tableID, col.id); err != nil {
			return fmt.Errorf("update %s: %w", tcs, err)
		}
	}
	return nil
}

// listLiteral renders strings as a DuckDB list literal, passed as a string
// parameter and cast to VARCHAR[] in SQL.
func listLiteral(vals []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(sqlString(v))
	}
	b.WriteByte(']')
	return b.String()
}

// liveFile is a current data file of the table.
type liveFile struct {
	id        int64
	name      string
	records   int64
	size      int64
	hasDelete bool
}

// liveFiles lists the table's current data files, oldest first.
func (c *catalog) liveFiles(ctx context.Context) ([]liveFile, error) {
	rows, err := c.e.conn.QueryContext(ctx, `SELECT f.data_file_id, f.path, f.record_count, f.file_size_bytes,
		EXISTS (SELECT 1 FROM `+c.q("ducklake_delete_file")+` d WHERE d.data_file_id = f.data_file_id AND d.end_snapshot IS NULL)
		FROM `+c.q("ducklake_data_file")+` f WHERE f.table_id = ? AND f.end_snapshot IS NULL AND f.path_is_relative
		ORDER BY f.data_file_id`, c.tableID)
	if err != nil {
		return nil, fmt.Errorf("list live data files: %w", err)
	}
	defer rows.Close()
	var out []liveFile
	for rows.Next() {
		var f liveFile
		if err := rows.Scan(&f.id, &f.name, &f.records, &f.size, &f.hasDelete); err != nil {
			return nil, fmt.Errorf("list live data files: %w", err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// endDataFile removes a data file from the table in the pending snapshot:
// its row (and its delete file's) stays, with end_snapshot set, so older
// snapshots still read it.
func (c *catalog) endDataFile(ctx context.Context, f liveFile) error {
	s := c.pending
	if err := c.e.exec(ctx, "UPDATE "+c.q("ducklake_data_file")+" SET end_snapshot = ? WHERE data_file_id = ?", s.id, f.id); err != nil {
		return err
	}
	if err := c.e.exec(ctx, "UPDATE "+c.q("ducklake_delete_file")+" SET end_snapshot = ? WHERE data_file_id = ? AND end_snapshot IS NULL", s.id, f.id); err != nil {
		return err
	}
	c.recordCount -= f.records
	c.fileSize -= f.size
	s.deleted = true
	return nil
}

// addDeleteFile records a positional delete file against a data file.
func (c *catalog) addDeleteFile(ctx context.Context, target liveFile, del *dataFile) error {
	s := c.pending
	del.dataFileID = c.nextFileID
	c.nextFileID++
	if err := c.insert(ctx, "ducklake_delete_file",
		[]string{"delete_file_id", "table_id", "begin_snapshot", "end_snapshot", "data_file_id", "path", "path_is_relative", "format",
			"delete_count", "file_size_bytes", "footer_size", "encryption_key"},
		[]any{del.dataFileID, c.tableID, s.id, nil, target.id, del.name, true, "parquet", del.deleteCount, del.size, del.footer, nil}); err != nil {
		return err
	}
	s.deleted = true
	return nil
}

// scheduleForDeletion records a file that a cleanup would remove: such
// files are on their way out and FDL readers must not need them.
func (c *catalog) scheduleForDeletion(ctx context.Context, name string, now time.Time) error {
	id := c.nextFileID
	c.nextFileID++
	return c.insert(ctx, "ducklake_files_scheduled_for_deletion",
		[]string{"data_file_id", "path", "path_is_relative", "schedule_start"}, []any{id, name, true, now})
}

// commit writes the pending snapshot's rows: the snapshot with its
// counters, its change list, the schema version and the table's stats.
func (c *catalog) commit(ctx context.Context, now time.Time, message string) error {
	s := c.pending
	if s == nil {
		return errors.New("no snapshot in progress")
	}
	var changes []string
	changes = append(changes, s.created...)
	if s.inserted {
		changes = append(changes, fmt.Sprintf("inserted_into_table:%d", c.tableID))
	}
	if s.deleted {
		changes = append(changes, fmt.Sprintf("deleted_from_table:%d", c.tableID))
	}
	schemaChanged := len(s.created) > 0
	if err := c.insert(ctx, "ducklake_snapshot",
		[]string{"snapshot_id", "snapshot_time", "schema_version", "next_catalog_id", "next_file_id"},
		[]any{s.id, now, c.schemaVersion, c.nextCatalogID, c.nextFileID}); err != nil {
		return err
	}
	var msg any
	if message != "" {
		msg = message
	}
	if err := c.insert(ctx, "ducklake_snapshot_changes",
		[]string{"snapshot_id", "changes_made", "author", "commit_message", "commit_extra_info"},
		[]any{s.id, strings.Join(changes, ","), nil, msg, nil}); err != nil {
		return err
	}
	if schemaChanged && c.columnsOf["ducklake_schema_versions"] != nil {
		var tableID any
		if c.hasTable {
			tableID = c.tableID
		}
		if err := c.insert(ctx, "ducklake_schema_versions", []string{"begin_snapshot", "schema_version", "table_id"},
			[]any{s.id, c.schemaVersion, tableID}); err != nil {
			return err
		}
	}
	if c.hasTable && (s.inserted || s.deleted) {
		if c.hasTableStats {
			if err := c.e.exec(ctx, "UPDATE "+c.q("ducklake_table_stats")+" SET record_count = ?, next_row_id = ?, file_size_bytes = ? WHERE table_id = ?",
				c.recordCount, c.nextRowID, c.fileSize, c.tableID); err != nil {
				return err
			}
		} else {
			if err := c.insert(ctx, "ducklake_table_stats", []string{"table_id", "record_count", "next_row_id", "file_size_bytes"},
				[]any{c.tableID, c.recordCount, c.nextRowID, c.fileSize}); err != nil {
				return err
			}
			c.hasTableStats = true
		}
	}
	c.snapshotID = s.id
	c.pending = nil
	return nil
}

// close checkpoints and detaches the catalog, so the file is complete on
// its own (no .wal beside it), and checks that no .wal was left.
func (c *catalog) close(ctx context.Context) error {
	if c.readOnly {
		return c.detach(ctx)
	}
	if err := c.e.exec(ctx, "CHECKPOINT "+catalogAlias); err != nil {
		c.detach(ctx)
		return fmt.Errorf("catalog %s: %w", c.path, err)
	}
	if err := c.detach(ctx); err != nil {
		return fmt.Errorf("catalog %s: %w", c.path, err)
	}
	if _, err := os.Stat(c.path + ".wal"); err == nil {
		return fmt.Errorf("catalog %s: a .wal file was left after checkpoint and detach", c.path)
	}
	return nil
}

func (c *catalog) detach(ctx context.Context) error {
	// A failed statement may leave the connection in an aborted
	// transaction; DETACH needs it closed.
	_, _ = c.e.conn.ExecContext(ctx, "ROLLBACK")
	return c.e.exec(ctx, "DETACH "+catalogAlias)
}
