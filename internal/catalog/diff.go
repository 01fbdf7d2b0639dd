package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// A difference is a child version's catalog read against its parent's:
// every DuckLake catalog lists every file of its version, current and
// historical, so a child's lists its parent's files again, and reading
// it whole costs what the repository holds, not what the version adds.
// The parent's catalog is the one the mirror published (verified then);
// the child's is the upstream's, which may change any old row. So every
// row of the child is still read and compared, by DuckDB in the reader:
// each file row of both catalogs is resolved to its path below the data
// path (as resolve does: data path, schema path, table path, each where
// relative), and the child's rows that have no row of the parent with the
// same path, size, footer size and kind come out, one per path (the
// first, as read keeps it), in path order. A changed old row is a file
// the parent does not have, so it comes out as a new one. None of the
// comparison happens in the mirror, which holds nothing per file.
//
// Rows are compared before they are made one per path, so that DuckDB
// holds the parent's rows (the join's hash table) and the rows that come
// out, never the child's: at 300,000 files the first way (each catalog's
// paths grouped first) passed the default memory limit of 128 MiB. For a
// catalog with a row per path, as DuckLake writes them, the difference is
// the set difference of the two catalogs read whole. Where a path has
// several rows, one equal to the parent's keeps none of the others out
// (it may come out as read would not keep it: one more file checked),
// and one that differs from the parent's in size comes out and meets the
// parent's file in the mirror, which refuses it as of another size: a
// row is never kept out that read would have needed.

// Difference is a child catalog's files that are not in its parent's.
type Difference struct {
	DuckLakeVersion string // the child's
	DataPath        string // the child's, as stored
	// Files are the child's files not in the parent (path, size,
	// footer, kind), sorted by Path; empty when Diff streamed them.
	Files []File
	// ChildRows and ParentRows are the file rows (ducklake_data_file and
	// ducklake_delete_file) of each catalog; of the child's, SameRows have
	// an equal row in the parent, FoldedRows came out on a path another
	// row came out on first, and the rest are Files. The reader says them
	// first, and the mirror checks they add up and that the files that
	// come are the rest, so that a difference cut short is refused as a
	// read cut short is.
	ChildRows, ParentRows, SameRows, FoldedRows int64
}

// ErrNoDifference is a pair of catalogs Diff does not compare: one of
// them is a SQLite database (metadata.db), which the reader's DuckDB
// cannot attach beside the other (it loads no extension), or the
// parent's catalog is not one the reader can read. The caller reads the
// child whole instead.
var ErrNoDifference = errors.New("a difference is taken between two DuckDB catalogs only")

// Diff reads the catalog at file (named name in the repository, the
// upstream's child version) against parentFile (parentName, the parent's
// catalog as the mirror published it) in a reader of its own, confined to
// those two files, and returns the child's files the parent does not
// have. Each, once checked, goes to each (if not nil) in path order
// instead of into Files. Errors as Read's: a *LimitError, a *ReaderError,
// or the catalog's refusal; ErrNoDifference where either is not a DuckDB
// database.
func Diff(ctx context.Context, file, name, parentFile, parentName string, lim Limits, each func(File) error) (*Difference, error) {
	if name == "" {
		name = file
	}
	if parentName == "" {
		parentName = parentFile
	}
	lim = lim.WithDefaults()
	var fds []*os.File
	defer func() {
		for _, f := range fds {
			f.Close()
		}
	}()
	for _, p := range []struct{ file, name string }{{file, name}, {parentFile, parentName}} {
		f, err := os.Open(p.file)
		if err != nil {
			return nil, fmt.Errorf("catalog %s: %w", p.name, err)
		}
		fds = append(fds, f)
		if err := notSQLite(p.file, p.name); err != nil {
			return nil, err
		}
	}
	p, err := startReader(ctx, fds[0], lim, 1, fds[1])
	if err != nil {
		return nil, rename(err, name)
	}
	d, err := p.readDifference(ctx, request{name: name, parentName: parentName, lim: lim}, each)
	if err != nil {
		return nil, err
	}
	p.close()
	return d, nil
}

// Diff is Diff (the function) with one of the pool's readers, where both
// catalogs are in the pool's folder (as Fetch puts them); else with a
// reader of its own.
func (p *Pool) Diff(ctx context.Context, file, name, parentFile, parentName string, each func(File) error) (*Difference, error) {
	if filepath.Dir(file) != p.dir || filepath.Dir(parentFile) != p.dir {
		return Diff(ctx, file, name, parentFile, parentName, p.lim, each)
	}
	for _, c := range []struct{ file, name string }{{file, name}, {parentFile, parentName}} {
		if err := notSQLite(c.file, c.name); err != nil {
			return nil, err
		}
	}
	p.taken(parentFile)
	r, err := p.get(ctx, file)
	if err != nil {
		return nil, rename(err, name)
	}
	// The two catalogs in the reader's folder, for its one request.
	childBase, err := r.link(file)
	var parentBase string
	if err == nil {
		parentBase, err = r.link(parentFile)
	}
	if err != nil {
		p.done(r, false)
		return nil, fmt.Errorf("catalog %s: %w", name, err)
	}
	d, err := r.proc.readDifference(ctx, request{name: name, parentName: parentName, file: childBase, parentFile: parentBase, lim: p.lim}, each)
	p.done(r, err == nil)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// notSQLite refuses a catalog of a difference that is a SQLite database
// (ErrNoDifference), reading its first bytes only, as isSQLite reads
// them: the reader reads the rest.
func notSQLite(file, name string) error {
	if sqlite, err := isSQLite(file); err != nil {
		return fmt.Errorf("catalog %s: %w", name, err)
	} else if sqlite {
		return fmt.Errorf("catalog %s is a SQLite database: %w", name, ErrNoDifference)
	}
	return nil
}

// readDifference asks the reader for a difference and checks the answer
// as readCatalog checks a catalog.
func (p *readerProc) readDifference(ctx context.Context, q request, each func(File) error) (*Difference, error) {
	q.diff = true
	d := &Difference{}
	var files []File
	collect := each
	if collect == nil {
		collect = func(f File) error {
			files = append(files, f)
			return nil
		}
	}
	c, err := p.request(ctx, q, collect, d)
	if err != nil {
		return nil, err
	}
	d.DuckLakeVersion, d.DataPath, d.Files = c.DuckLakeVersion, c.DataPath, files
	return d, nil
}

// diffCounts checks what a reader announces of a difference: counts that
// add up, none above the limit.
func diffCounts(d *Difference, files uint64, lim Limits) error {
	most := uint64(lim.MaxFiles)
	child, parent, same, folded := uint64(d.ChildRows), uint64(d.ParentRows), uint64(d.SameRows), uint64(d.FoldedRows)
	switch {
	case child > most || parent > most:
		return fmt.Errorf("%w: a difference of catalogs of %d and %d rows, more than the %d allowed", errInvalid, child, parent, most)
	case same > child || folded > child || files > child || same+folded+files != child:
		return fmt.Errorf("%w: %d files announced, where %d of the child's %d rows are in the parent and %d folded", errInvalid, files, same, child, folded)
	}
	return nil
}

// The reader's side.

// Names the two catalogs of a difference are attached under.
const (
	childAlias  = "cat"
	parentAlias = "par"
)

// answerDifference takes the difference of the child catalog at file
// and the parent's at parentFile, and writes it to out: a meta frame
// with the counts, the files, the end; or a refusal, at any point.
func answerDifference(out *frameWriter, file, parentFile string, q request, pool *dbPool) error {
	w := &diffWriter{out: out}
	err := difference(context.Background(), file, parentFile, q, w, pool)
	var ea errAnswer
	var pe parentError
	switch {
	case errors.As(err, &ea):
		return ea.error
	case errors.As(err, &pe):
		// The child is not refused for its parent: the mirror reads it
		// whole instead.
		out.begin(frameRefusal)
		out.u8(refusalParent)
		out.str("")
		out.str(truncate(err.Error(), maxMessage))
		if err := out.end(); err != nil {
			return err
		}
		return out.flush()
	case err != nil:
		// Before the meta frame or among the files: the mirror takes a
		// refusal at either.
		return answer(out, err)
	}
	return nil
}

// diffWriter writes a difference's frames as they come.
type diffWriter struct {
	out   *frameWriter
	n     uint64
	total uint64
}

func (w *diffWriter) meta(c *Catalog, d *Difference) error {
	if testMarker != nil {
		if err := testMarker(c.DataPath); err != nil {
			return err
		}
	}
	w.out.begin(frameDiffMeta)
	w.out.str(truncate(c.DuckLakeVersion, 256))
	w.out.str(c.DataPath)
	w.out.u64(uint64(d.ChildRows))
	w.out.u64(uint64(d.ParentRows))
	w.out.u64(uint64(d.SameRows))
	w.out.u64(uint64(d.FoldedRows))
	w.out.u64(uint64(d.ChildRows - d.SameRows - d.FoldedRows))
	return w.out.end()
}

func (w *diffWriter) file(f File) error {
	if err := writeFile(w.out, f); err != nil {
		return err
	}
	w.n++
	if f.Size > 0 {
		w.total += uint64(f.Size)
	}
	return nil
}

func (w *diffWriter) end() error {
	w.out.begin(frameEnd)
	w.out.u64(w.n)
	w.out.u64(w.total)
	if err := w.out.end(); err != nil {
		return err
	}
	return w.out.flush()
}

// difference is a reader's difference of two catalogs: both attached
// read-only to one locked-down DuckDB that may open those two files and
// no other, each checked as read checks one (base tables only, no
// generated column, rows within the limits, a data path), their file
// rows resolved and compared by DuckDB, and the files of the child not
// in the parent written to w in path order.
func difference(ctx context.Context, file, parentFile string, q request, w *diffWriter, pool *dbPool) (err error) {
	lim := q.lim.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	child := &reader{ctx: ctx, name: q.name, lim: lim, file: file, alias: childAlias}
	parent := &reader{ctx: ctx, name: q.parentName, lim: lim, file: parentFile, alias: parentAlias}
	defer func() {
		if err != nil {
			err = child.diffError(err, parent)
		}
	}()
	for _, r := range []*reader{child, parent} {
		if sqlite, err := isSQLite(r.file); err != nil {
			return r.errf("%v", strings.ReplaceAll(err.Error(), r.file, r.name))
		} else if sqlite {
			return r.errf("a SQLite database: %v", ErrNoDifference)
		}
	}
	var inst *instance
	if pool != nil {
		// A pooled reader's one request, its DuckDB started ahead
		// (dbPool), which may open the files of its folder: these two.
		inst, err = pool.get(ctx)
	} else {
		allow := []string{sqlString(file), sqlString(file + ".wal"), sqlString(parentFile), sqlString(parentFile + ".wal")}
		inst, err = startDuckDB(ctx, lim, "SET allowed_paths=["+strings.Join(allow, ", ")+"]")
	}
	if err != nil {
		return child.errf("%w", err)
	}
	if pool == nil || !pool.oneShot {
		defer inst.close()
	}
	// Both attached, the objects of both listed at once.
	for _, r := range []*reader{child, parent} {
		r.db, r.conn = inst.db, inst.conn
		if err := r.attach(r.file); err != nil {
			return asParents(r, parent, err)
		}
	}
	found, err := findObjects(ctx, inst.conn, []string{childAlias, parentAlias})
	if err != nil {
		return child.errf("listing the catalog's objects: %w", err)
	}
	metas := make([]*Catalog, 2)
	for i, r := range []*reader{child, parent} {
		err := r.objectError(found[r.attachedAs()])
		if err == nil {
			err = prepareDiff(r, &metas[i])
		}
		if err != nil {
			return asParents(r, parent, err)
		}
	}
	if err := child.compare(parent, metas[0].DataPath, metas[1].DataPath); err != nil {
		return err
	}
	if err := child.checkResolved(); err != nil {
		return err
	}
	var out, files int64
	if err := inst.conn.QueryRowContext(ctx, "SELECT coalesce(sum(nrows), 0), count(*) FROM "+diffTable).Scan(&out, &files); err != nil {
		return child.errf("comparing with %s: %w", parent.name, err)
	}
	if out > child.fileRows {
		return child.errf("more rows out of the comparison (%d) than the catalog has (%d): it changed while read", out, child.fileRows)
	}
	d := &Difference{ChildRows: child.fileRows, ParentRows: parent.fileRows, SameRows: child.fileRows - out, FoldedRows: out - files}
	if err := w.meta(metas[0], d); err != nil {
		return errAnswer{err}
	}
	rows, err := inst.conn.QueryContext(ctx, "SELECT rel, size, footer, del, puffin FROM "+diffTable+" ORDER BY rel")
	if err != nil {
		return child.errf("comparing with %s: %w", parent.name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var f File
		if err := rows.Scan(&f.Path, &f.Size, &f.Footer, &f.Delete, &f.Puffin); err != nil {
			return child.errf("comparing with %s: %w", parent.name, err)
		}
		// As resolve checks each path it makes; a file of both catalogs
		// passed this when the parent was read.
		if len(f.Path) > MaxPathBytes {
			return child.errf("file %s: its path below the data path is longer than %d bytes, the object stores' key limit", Excerpt(f.Path), MaxPathBytes)
		}
		if backend.CheckName(f.Path) != nil {
			return child.errf("file %s: path is not a clean relative path below the data path (no \"..\", \".\" or empty segments)", Excerpt(metas[0].DataPath+f.Path))
		}
		if err := w.file(f); err != nil {
			return errAnswer{err}
		}
	}
	if err := rows.Err(); err != nil {
		return child.errf("comparing with %s: %w", parent.name, err)
	}
	if err := w.end(); err != nil {
		return errAnswer{err}
	}
	return nil
}

// prepareDiff checks one attached catalog of a difference as read checks
// one: no generated column, rows within the limits, a data path, ids on
// its schemas and tables.
func prepareDiff(r *reader, meta **Catalog) error {
	if err := r.loadColumns(); err != nil {
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
	*meta = &Catalog{}
	if err := r.metadata(*meta); err != nil {
		return err
	}
	return r.checkPlaceIDs()
}

// asParents is err as difference returns it: against the child, or, where
// r is the parent, nothing against the child (parentError).
func asParents(r, parent *reader, err error) error {
	if r == parent {
		return parentError{err}
	}
	return err
}

// Most file rows of a child are its parent's, stored in the same order:
// DuckLake appends a version's rows and ends old ones by setting their
// end snapshot, which is not compared. So the rows are first paired by
// position (DuckDB's POSITIONAL JOIN: both tables scanned side by side,
// no hash table of either), and a child row equal, as stored, to its
// partner (table, snapshot, path, relative, size, footer, format), whose
// table and snapshot resolve to the same base in both catalogs and whose
// resolved path passes read's checks, is the parent's file: resolving it
// would give the parent's row. Only the rest are resolved, and compared
// with the parent's rows of the same size and footer size (resolved for
// that), as a whole comparison would compare them. A hostile child that
// shifts, reorders or rewrites rows loses the pairing for those rows and
// pays for the comparison they need, never less.

// Temporary tables of a difference.
const (
	childBases  = "fdl_child_bases"
	parentBases = "fdl_parent_bases"
	unpaired    = "fdl_unpaired"
)

// compare fills diffTable: the child's file rows (r) with no equal row
// in parent, grouped by path, as checkResolved and the files read them.
func (r *reader) compare(parent *reader, dataPath, parentDataPath string) error {
	steps := []string{
		"CREATE TEMP TABLE " + childBases + " AS " + r.basesSQL(dataPath),
		"CREATE TEMP TABLE " + parentBases + " AS " + parent.basesSQL(parentDataPath),
	}
	// A pair is the same file only where both data paths are the same: a
	// relative path is below its data path, an absolute one is cut by it.
	same := "false"
	if dataPath == parentDataPath {
		limit := len(dataPath) + MaxPathBytes
		same = fmt.Sprintf(`x.prid IS NOT NULL AND x.tid = x.ptid AND x.b IS NOT DISTINCT FROM x.pb AND x.path = x.ppath AND x.relative = x.prelative
		AND x.size = x.psize AND x.footer = x.pfooter AND x.fmt IS NOT DISTINCT FROM x.pfmt AND x.path <> ''
		AND CASE WHEN x.relative THEN ok.blen + strlen(x.path) <= %[1]d ELSE strlen(x.path) <= %[1]d AND starts_with(x.path, %[2]s) END`,
			limit, sqlString(dataPath))
	}
	// The join's two sides are the tables' columns as stored, and each is
	// made what rawSQL makes it above the join: with an expression on a
	// side, DuckDB collects the whole of that side (the parent's rows,
	// paths and all) before pairing, 100 to 130 bytes a row; with the
	// tables alone it scans both side by side and holds a few blocks.
	pairs := func(kind int) string {
		return fmt.Sprintf(`SELECT %d AS kind, %s, %s
	FROM (%s) c POSITIONAL JOIN (%s) p`, kind, r.rowColumns(kind, "c", ""), parent.rowColumns(kind, "p", "p"), r.storedSQL(kind), parent.storedSQL(kind))
	}
	steps = append(steps, fmt.Sprintf(`CREATE TEMP TABLE %[1]s AS
WITH ok AS (
	SELECT c.tid, c.b, strlen(c.base) AS blen FROM %[2]s c JOIN %[3]s p ON c.tid = p.tid AND c.b IS NOT DISTINCT FROM p.b AND c.base = p.base
	WHERE starts_with(c.base, %[4]s))
SELECT x.kind, x.rid, x.tid, x.b, x.path, x.relative, x.size, x.footer, x.fmt
FROM (%[5]s UNION ALL %[6]s) x LEFT JOIN ok ON x.relative AND ok.tid = x.tid AND ok.b IS NOT DISTINCT FROM x.b
WHERE x.rid IS NOT NULL AND NOT coalesce(%[7]s, false)`,
		unpaired, childBases, parentBases, sqlString(dataPath), pairs(0), pairs(1), same))
	candidates := fmt.Sprintf(`SELECT p.* FROM (%s UNION ALL %s) p SEMI JOIN (SELECT DISTINCT size, footer FROM %s) u ON p.size = u.size AND p.footer = u.footer`,
		parent.rawSQL(0), parent.rawSQL(1), unpaired)
	steps = append(steps, fmt.Sprintf(`CREATE TEMP TABLE %s AS
SELECT rel, arg_min(size, ord) AS size, arg_min(footer, ord) AS footer, arg_min(del, ord) AS del, arg_min(puffin, ord) AS puffin, count(*) AS nrows,
	min(size) FILTER (WHERE size >= 0) AS smin, max(size) FILTER (WHERE size >= 0) AS smax,
	arg_min({'err': err, 'del': del, 'path': left(path, 200), 'len': strlen(path)}, ord) FILTER (WHERE err IS NOT NULL) AS bad
FROM (%s) c ANTI JOIN (%s) p ON %s
GROUP BY rel`, diffTable, resolvedSQL("SELECT * FROM "+unpaired, childBases, dataPath), resolvedSQL(candidates, parentBases, parentDataPath), sameFile))
	for _, q := range steps {
		if _, err := r.conn.ExecContext(r.ctx, q); err != nil {
			return r.errf("comparing with %s: %w", parent.name, err)
		}
	}
	return nil
}

// errAnswer is a write to the mirror that failed: the reader has no one
// to answer to.
type errAnswer struct{ error }

// parentError is the parent's catalog failing a check a read makes:
// nothing against the child.
type parentError struct{ error }

func (e parentError) Unwrap() error { return e.error }

// diffError is what difference refuses the child for, as read says it:
// a limit where one was passed, each catalog named as the repository
// names it.
func (r *reader) diffError(err error, parent *reader) error {
	var ea errAnswer
	if errors.As(err, &ea) {
		return err
	}
	if r.ctx.Err() != nil {
		return &LimitError{Catalog: r.name, Key: KeyTimeout, Detail: fmt.Sprintf("comparing it with %s took longer than %s", parent.name, r.lim.Timeout)}
	}
	var de *duckdb.Error
	if errors.As(err, &de) && de.Type == duckdb.ErrorTypeOutOfMemory {
		return &LimitError{Catalog: r.name, Key: KeyMemoryLimit, Detail: fmt.Sprintf("comparing it with %s needs more than DuckDB's memory limit of %s", parent.name, FormatBytes(r.lim.MemoryLimit))}
	}
	var le *LimitError
	if errors.As(err, &le) {
		return err
	}
	msg := strings.ReplaceAll(strings.ReplaceAll(err.Error(), r.file, r.name), parent.file, parent.name)
	return &renamed{msg: msg, err: err}
}

// diffTable is the temporary table of the files of a difference.
const diffTable = "fdl_difference"

// sameFile is when a file of the child (c) is one of the parent (p):
// everything the mirror is told of a file is equal.
const sameFile = "c.rel = p.rel AND c.size = p.size AND c.footer = p.footer AND c.del = p.del AND c.puffin = p.puffin"

// checkPlaceIDs refuses what places refuses: a schema or table row
// without an id.
func (r *reader) checkPlaceIDs() error {
	for _, t := range []struct{ table, id string }{{"ducklake_schema", "schema_id"}, {"ducklake_table", "table_id"}} {
		if !r.hasPaths(t.table) {
			continue
		}
		var n int64
		if err := r.conn.QueryRowContext(r.ctx, "SELECT count(*) FROM "+r.table(t.table)+" WHERE "+t.id+" IS NULL").Scan(&n); err != nil {
			return r.errf("reading %s: %w", t.table, err)
		}
		if n > 0 {
			return r.errf("reading %s: a row without its %s", t.table, t.id)
		}
	}
	return nil
}

// hasPaths says whether a schema or table table has the path columns
// that places reads (DuckLake 0.1's have none).
func (r *reader) hasPaths(table string) bool {
	cols := r.cols[table]
	return cols != nil && cols["path"] && cols["path_is_relative"]
}

// Each file row of a catalog is resolved to its path below the data
// path as resolve does it: data path, schema path, table path, each
// where relative. A relative row's base is worked out once per table and
// snapshot (bases), from the table's row live at the file's snapshot,
// else its first, and that table's schema's row chosen the same way; each
// part is joined only where the joined length stays within the data path
// and MaxPathBytes, so a part of megabytes is never joined to each row
// (the row is refused instead).

// rawSQL is a query of one of the catalog's file tables as stored, each
// row as the comparison needs it: kind (0 data, 1 delete), rid (its
// rowid), tid, b (its begin snapshot), path, relative, size and footer
// (-1 for NULL), fmt (its format as stored): rowColumns of storedSQL.
func (r *reader) rawSQL(kind int) string {
	return fmt.Sprintf("SELECT %d AS kind, %s FROM (%s) t", kind, r.rowColumns(kind, "t", ""), r.storedSQL(kind))
}

// fileTable is the file table of kind (0 data, 1 delete) and the name of
// its format column.
func fileTable(kind int) (table, format string) {
	if kind == 1 {
		return "ducklake_delete_file", "format"
	}
	return "ducklake_data_file", "file_format"
}

// storedSQL is a query of one of the catalog's file tables as stored,
// the columns rawSQL reads and nothing made of them: rid (its rowid),
// table_id, begin_snapshot, path, path_is_relative, file_size_bytes, and
// the footer size and format columns where the table has them.
func (r *reader) storedSQL(kind int) string {
	table, format := fileTable(kind)
	cols := "rowid AS rid, table_id, begin_snapshot, path, path_is_relative, file_size_bytes"
	if r.cols[table]["footer_size"] {
		cols += ", footer_size"
	}
	if r.cols[table][format] {
		cols += ", " + format
	}
	return "SELECT " + cols + " FROM " + r.table(table)
}

// rowColumns are rawSQL's columns but kind, made from storedSQL's row
// named alias, each named prefix and its name (rid, tid, b, path,
// relative, size, footer, fmt).
func (r *reader) rowColumns(kind int, alias, prefix string) string {
	table, format := fileTable(kind)
	footer, fm := "NULL", "NULL"
	if r.cols[table]["footer_size"] {
		footer = alias + ".footer_size"
	}
	if r.cols[table][format] {
		fm = alias + "." + format
	}
	return fmt.Sprintf("%[1]s.rid AS %[2]srid, coalesce(CAST(%[1]s.table_id AS BIGINT), 0) AS %[2]stid, CAST(%[1]s.begin_snapshot AS BIGINT) AS %[2]sb, "+
		"CAST(%[1]s.path AS VARCHAR) AS %[2]spath, coalesce(CAST(%[1]s.path_is_relative AS BOOLEAN), true) AS %[2]srelative, "+
		"coalesce(CAST(%[1]s.file_size_bytes AS BIGINT), -1) AS %[2]ssize, coalesce(CAST(%[3]s AS BIGINT), -1) AS %[2]sfooter, CAST(%[4]s AS VARCHAR) AS %[2]sfmt",
		alias, prefix, footer, fm)
}

// basesSQL is a query of the bases of the catalog's relative rows: tid,
// b and base, the data path joined with the schema's and table's paths
// (NULL where the join would pass the limit).
func (r *reader) basesSQL(dataPath string) string {
	limit := len(dataPath) + MaxPathBytes
	// live says whether row x of a schema or table was live at snapshot
	// b, as at does: NULL bounds are open, and no row is live at a NULL
	// snapshot.
	live := func(x, b string) string {
		return fmt.Sprintf("CASE WHEN %[2]s IS NULL THEN false ELSE coalesce(CAST(%[1]s.begin_snapshot AS BIGINT) <= %[2]s, true) AND coalesce(%[2]s < CAST(%[1]s.end_snapshot AS BIGINT), true) END", x, b)
	}
	// join is join's: an empty or NULL part leaves the base, an absolute
	// one replaces it, a relative one is appended; NULL where the result
	// would pass the limit.
	join := func(base, part, rel string) string {
		return fmt.Sprintf("CASE WHEN %[1]s IS NULL THEN NULL WHEN %[2]s IS NULL OR %[2]s = '' THEN %[1]s "+
			"WHEN %[3]s IS NOT NULL AND NOT %[3]s THEN CASE WHEN strlen(%[2]s) > %[4]d THEN NULL ELSE %[2]s END "+
			"WHEN strlen(%[1]s) + strlen(%[2]s) > %[4]d THEN NULL ELSE %[1]s || %[2]s END", base, part, rel, limit)
	}
	tp := "SELECT NULL::BIGINT AS tid, NULL::BIGINT AS b, NULL::VARCHAR AS tpath, NULL::BOOLEAN AS trel, NULL::BIGINT AS sid WHERE false"
	if r.hasPaths("ducklake_table") {
		tp = fmt.Sprintf("SELECT k.tid, k.b, CAST(t.path AS VARCHAR) AS tpath, CAST(t.path_is_relative AS BOOLEAN) AS trel, coalesce(CAST(t.schema_id AS BIGINT), 0) AS sid "+
			"FROM keys k JOIN %s t ON CAST(t.table_id AS BIGINT) = k.tid "+
			"QUALIFY row_number() OVER (PARTITION BY k.tid, k.b ORDER BY %s DESC, t.rowid) = 1", r.table("ducklake_table"), live("t", "k.b"))
	}
	sp := "SELECT NULL::BIGINT AS tid, NULL::BIGINT AS b, NULL::VARCHAR AS spath, NULL::BOOLEAN AS srel WHERE false"
	if r.hasPaths("ducklake_table") && r.hasPaths("ducklake_schema") {
		sp = fmt.Sprintf("SELECT tp.tid, tp.b, CAST(s.path AS VARCHAR) AS spath, CAST(s.path_is_relative AS BOOLEAN) AS srel "+
			"FROM tp JOIN %s s ON CAST(s.schema_id AS BIGINT) = tp.sid "+
			"QUALIFY row_number() OVER (PARTITION BY tp.tid, tp.b ORDER BY %s DESC, s.rowid) = 1", r.table("ducklake_schema"), live("s", "tp.b"))
	}
	// The bases' keys are read apart from the rows (two columns of each
	// table), so that no query holds the rows.
	keys := func(table string) string {
		return fmt.Sprintf("SELECT coalesce(CAST(table_id AS BIGINT), 0) AS tid, CAST(begin_snapshot AS BIGINT) AS b FROM %s WHERE coalesce(CAST(path_is_relative AS BOOLEAN), true)", r.table(table))
	}
	return fmt.Sprintf(`WITH keys AS (SELECT DISTINCT tid, b FROM (%[1]s UNION ALL %[2]s)),
tp AS (%[3]s),
sp AS (%[4]s)
SELECT k.tid, k.b, %[5]s AS base
FROM keys k LEFT JOIN tp ON tp.tid = k.tid AND tp.b IS NOT DISTINCT FROM k.b
LEFT JOIN sp ON sp.tid = k.tid AND sp.b IS NOT DISTINCT FROM k.b`,
		keys("ducklake_data_file"), keys("ducklake_delete_file"), tp, sp, join(join(sqlString(dataPath), "sp.spath", "sp.srel"), "tp.tpath", "tp.trel"))
}

// resolvedSQL resolves the rows of raw (as rawSQL gives them) with the
// bases of the table bases (as basesSQL gives them): size, footer, del,
// puffin, the raw path, ord (the row's place in read's order: data files
// before delete files, each table in its order, by which read keeps a
// path's first row), err (NULL, or why read refuses the row: 1 no path,
// 2 too long, 3 outside the data path) and rel, the path below the data
// path (NULL where err is not).
func resolvedSQL(raw, bases, dataPath string) string {
	limit := len(dataPath) + MaxPathBytes
	dp := sqlString(dataPath)
	return fmt.Sprintf(`WITH resolved AS (
	SELECT f.kind, f.rid, f.path, f.size, f.footer, coalesce(lower(f.fmt) = 'puffin', false) AS puffin,
		CASE WHEN f.path IS NULL OR f.path = '' THEN NULL
			WHEN NOT f.relative THEN CASE WHEN strlen(f.path) > %[3]d THEN NULL ELSE f.path END
			WHEN bs.base IS NULL OR strlen(bs.base) + strlen(f.path) > %[3]d THEN NULL
			ELSE bs.base || f.path END AS fullpath
	FROM (%[1]s) f LEFT JOIN %[2]s bs ON f.relative AND bs.tid = f.tid AND bs.b IS NOT DISTINCT FROM f.b)
SELECT size, footer, kind = 1 AS del, puffin, path, kind * 4611686018427387904 + rid AS ord,
	CASE WHEN path IS NULL OR path = '' THEN 1 WHEN fullpath IS NULL THEN 2 WHEN NOT starts_with(fullpath, %[4]s) THEN 3 END AS err,
	CASE WHEN fullpath IS NOT NULL AND starts_with(fullpath, %[4]s) THEN substr(fullpath, length(%[4]s) + 1) END AS rel
FROM resolved`, raw, bases, limit, dp)
}

// checkResolved refuses a catalog as read would for its rows: one
// without a path, one whose path is too long or outside the data path,
// a file recorded with two sizes. Such a row has no equal in the parent
// (whose rows passed), so it is among the rows of the difference.
func (r *reader) checkResolved() error {
	var kind, code sql.NullInt64
	var path sql.NullString
	var length sql.NullInt64
	err := r.conn.QueryRowContext(r.ctx, "SELECT bad.err, bad.del::INTEGER, bad.path, bad.len FROM "+diffTable+" WHERE rel IS NULL").Scan(&code, &kind, &path, &length)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return r.errf("resolving its files: %w", err)
	default:
		table := "ducklake_data_file"
		if kind.Int64 == 1 {
			table = "ducklake_delete_file"
		}
		// path is the row's first 200 characters: enough for an
		// Excerpt, which says how long the whole was where it is cut.
		excerpt := Excerpt(path.String)
		if length.Int64 > int64(len(path.String)) {
			excerpt = strconv.Quote(truncate(path.String, excerptBytes)) + fmt.Sprintf("… (%d bytes)", length.Int64)
		}
		switch code.Int64 {
		case 1:
			return r.errf("%s has a row without a path", table)
		case 2:
			return r.errf("%s: file %s: its path below the data path would be longer than %d bytes, the object stores' key limit", table, excerpt, MaxPathBytes)
		default:
			return r.errf("%s: file %s is outside the catalog's data path", table, excerpt)
		}
	}
	var rel string
	var a, b int64
	err = r.conn.QueryRowContext(r.ctx, "SELECT rel, smin, smax FROM "+diffTable+" WHERE smin <> smax LIMIT 1").Scan(&rel, &a, &b)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return r.errf("resolving its files: %w", err)
	}
	return r.errf("file %s is recorded with two sizes, %d and %d", Excerpt(rel), a, b)
}
