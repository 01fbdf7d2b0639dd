package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
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
// each file row of both catalogs resolved to its path below the data
// path (as resolve does: data path, schema path, table path, each where
// relative), one row per path (the first, as read keeps it), and the
// child's files that are not in the parent, with the same path, size,
// footer size and kind, come out in path order. A changed old row is a
// file the parent does not have, so it comes out as a new one. None of
// the comparison happens in the mirror, which holds nothing per file.

// Difference is a child catalog's files that are not in its parent's.
type Difference struct {
	DuckLakeVersion string // the child's
	DataPath        string // the child's, as stored
	// Files are the child's files not in the parent (path, size,
	// footer, kind), sorted by Path; empty when Diff streamed them.
	Files []File
	// ChildFiles and ParentFiles are the files (distinct paths) of each
	// catalog, SameFiles those of the child that are in the parent: the
	// reader says them first, and the mirror checks that the files that
	// came are ChildFiles − SameFiles, so that a difference cut short is
	// refused as a read cut short is.
	ChildFiles, ParentFiles, SameFiles int64
}

// ErrNoDifference is a pair of catalogs Diff does not compare: one of
// them is a SQLite database (metadata.db), which the reader's DuckDB
// cannot attach beside the other (it loads no extension). The caller
// reads the child whole instead.
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
		// The first bytes only, as isSQLite reads them; the reader reads
		// the rest.
		if sqlite, err := isSQLite(p.file); err != nil {
			return nil, fmt.Errorf("catalog %s: %w", p.name, err)
		} else if sqlite {
			return nil, fmt.Errorf("catalog %s is a SQLite database: %w", p.name, ErrNoDifference)
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
	child, parent, same := uint64(d.ChildFiles), uint64(d.ParentFiles), uint64(d.SameFiles)
	switch {
	case child > most || parent > most:
		return fmt.Errorf("%w: a difference of catalogs of %d and %d files, more than the %d allowed", errInvalid, child, parent, most)
	case same > child || same > parent:
		return fmt.Errorf("%w: %d files said to be in both catalogs, of %d and %d", errInvalid, same, child, parent)
	case files != child-same:
		return fmt.Errorf("%w: a difference of %d files announced, where %d of the child's %d are not in the parent", errInvalid, files, child-same, child)
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
func answerDifference(out *frameWriter, file, parentFile string, q request) error {
	w := &diffWriter{out: out}
	err := difference(context.Background(), file, parentFile, q, w)
	var ea errAnswer
	switch {
	case errors.As(err, &ea):
		return ea.error
	case err != nil:
		// Before the meta frame or among the files: the mirror takes a
		// refusal at either.
		return answer(out, nil, err)
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
	w.out.begin(frameDiffMeta)
	w.out.str(truncate(c.DuckLakeVersion, 256))
	w.out.str(c.DataPath)
	w.out.u64(uint64(d.ChildFiles))
	w.out.u64(uint64(d.ParentFiles))
	w.out.u64(uint64(d.SameFiles))
	w.out.u64(uint64(d.ChildFiles - d.SameFiles))
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
func difference(ctx context.Context, file, parentFile string, q request, w *diffWriter) (err error) {
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
	allow := []string{sqlString(file), sqlString(file + ".wal"), sqlString(parentFile), sqlString(parentFile + ".wal")}
	inst, err := startDuckDB(ctx, lim, "SET allowed_paths=["+strings.Join(allow, ", ")+"]")
	if err != nil {
		return child.errf("%w", err)
	}
	defer inst.close()
	metas := make([]*Catalog, 2)
	for i, r := range []*reader{child, parent} {
		r.db, r.conn = inst.db, inst.conn
		if err := r.attach(r.file); err != nil {
			return err
		}
		if err := r.checkObjects(); err != nil {
			return err
		}
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
		metas[i] = &Catalog{}
		if err := r.metadata(metas[i]); err != nil {
			return err
		}
		if err := r.checkPlaceIDs(); err != nil {
			return err
		}
		if err := r.resolvedFiles(diffTable(r), metas[i].DataPath); err != nil {
			return err
		}
	}
	if err := child.checkResolved(); err != nil {
		return err
	}
	d := &Difference{}
	same := fmt.Sprintf("%s c SEMI JOIN %s p ON %s", diffTable(child), diffTable(parent), sameFile)
	if err := inst.conn.QueryRowContext(ctx, fmt.Sprintf("SELECT (SELECT count(*) FROM %s), (SELECT count(*) FROM %s WHERE rel IS NOT NULL), (SELECT count(*) FROM %s)",
		diffTable(child), diffTable(parent), same)).Scan(&d.ChildFiles, &d.ParentFiles, &d.SameFiles); err != nil {
		return child.errf("comparing with %s: %w", parent.name, err)
	}
	if d.ChildFiles > lim.MaxFiles {
		return child.tooManyFiles(d.ChildFiles)
	}
	if err := w.meta(metas[0], d); err != nil {
		return errAnswer{err}
	}
	rows, err := inst.conn.QueryContext(ctx, fmt.Sprintf("SELECT c.rel, c.size, c.footer, c.del, c.puffin FROM %s c ANTI JOIN %s p ON %s ORDER BY c.rel",
		diffTable(child), diffTable(parent), sameFile))
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

// errAnswer is a write to the mirror that failed: the reader has no one
// to answer to.
type errAnswer struct{ error }

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

// diffTable is the temporary table of a catalog's resolved files.
func diffTable(r *reader) string { return "fdl_files_" + r.attachedAs() }

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

// resolvedFiles makes the temporary table name of the catalog's files,
// one row per resolved path, as read lists them: rel (the path below
// the data path; NULL for the rows that read refuses, whose first is in
// bad), size and footer (-1 for NULL), del, puffin, of the path's first
// row (data files before delete files, each table in its order), and the
// least and largest known size its rows give the path.
//
// The resolution is resolve's, in SQL: a relative row's base is worked
// out once per table and snapshot (bases), from the table's row live at
// the file's snapshot, else its first, and that table's schema's row
// chosen the same way; each part is joined only where the joined length
// stays within the data path and MaxPathBytes, so a part of megabytes is
// never joined to each row (the row is refused instead).
func (r *reader) resolvedFiles(name, dataPath string) error {
	limit := len(dataPath) + MaxPathBytes
	dp := sqlString(dataPath)
	files := func(table string, kind int, format string) string {
		footer, fm := "NULL", "NULL"
		if r.cols[table]["footer_size"] {
			footer = "footer_size"
		}
		if r.cols[table][format] {
			fm = format
		}
		return fmt.Sprintf("SELECT %d AS kind, rowid AS rid, coalesce(CAST(table_id AS BIGINT), 0) AS tid, CAST(begin_snapshot AS BIGINT) AS b, "+
			"CAST(path AS VARCHAR) AS path, coalesce(CAST(path_is_relative AS BOOLEAN), true) AS relative, "+
			"coalesce(CAST(file_size_bytes AS BIGINT), -1) AS size, coalesce(CAST(%s AS BIGINT), -1) AS footer, CAST(%s AS VARCHAR) AS fmt FROM %s",
			kind, footer, fm, r.table(table))
	}
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
	q := fmt.Sprintf(`CREATE TEMP TABLE %[1]s AS
WITH files AS (%[2]s UNION ALL %[3]s),
keys AS (SELECT DISTINCT tid, b FROM files WHERE relative),
tp AS (%[4]s),
sp AS (%[5]s),
bases AS (
	SELECT k.tid, k.b, %[6]s AS base
	FROM keys k LEFT JOIN tp ON tp.tid = k.tid AND tp.b IS NOT DISTINCT FROM k.b
	LEFT JOIN sp ON sp.tid = k.tid AND sp.b IS NOT DISTINCT FROM k.b),
resolved AS (
	SELECT f.kind, f.rid, f.path, f.size, f.footer, coalesce(lower(f.fmt) = 'puffin', false) AS puffin,
		CASE WHEN f.path IS NULL OR f.path = '' THEN NULL
			WHEN NOT f.relative THEN CASE WHEN strlen(f.path) > %[7]d THEN NULL ELSE f.path END
			WHEN bs.base IS NULL OR strlen(bs.base) + strlen(f.path) > %[7]d THEN NULL
			ELSE bs.base || f.path END AS fullpath
	FROM files f LEFT JOIN bases bs ON f.relative AND bs.tid = f.tid AND bs.b IS NOT DISTINCT FROM f.b),
checked AS (
	SELECT kind, size, footer, puffin, path, kind * 4611686018427387904 + rid AS ord,
		CASE WHEN path IS NULL OR path = '' THEN 1 WHEN fullpath IS NULL THEN 2 WHEN NOT starts_with(fullpath, %[8]s) THEN 3 END AS err,
		CASE WHEN fullpath IS NOT NULL AND starts_with(fullpath, %[8]s) THEN substr(fullpath, length(%[8]s) + 1) END AS rel
	FROM resolved)
SELECT rel, arg_min(size, ord) AS size, arg_min(footer, ord) AS footer, arg_min(kind, ord) = 1 AS del, arg_min(puffin, ord) AS puffin,
	min(size) FILTER (WHERE size >= 0) AS smin, max(size) FILTER (WHERE size >= 0) AS smax,
	arg_min({'err': err, 'kind': kind, 'path': left(path, 200), 'len': strlen(path)}, ord) FILTER (WHERE err IS NOT NULL) AS bad
FROM checked GROUP BY rel`,
		name, files("ducklake_data_file", 0, "file_format"), files("ducklake_delete_file", 1, "format"), tp, sp,
		join(join(dp, "sp.spath", "sp.srel"), "tp.tpath", "tp.trel"), limit, dp)
	if _, err := r.conn.ExecContext(r.ctx, q); err != nil {
		return r.errf("resolving its files: %w", err)
	}
	return nil
}

// checkResolved refuses a catalog as read would for its rows: one
// without a path, one whose path is too long or outside the data path,
// a file recorded with two sizes.
func (r *reader) checkResolved() error {
	var kind, code sql.NullInt64
	var path sql.NullString
	var length sql.NullInt64
	err := r.conn.QueryRowContext(r.ctx, "SELECT bad.err, bad.kind, bad.path, bad.len FROM "+diffTable(r)+" WHERE rel IS NULL").Scan(&code, &kind, &path, &length)
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
	err = r.conn.QueryRowContext(r.ctx, "SELECT rel, smin, smax FROM "+diffTable(r)+" WHERE smin <> smax LIMIT 1").Scan(&rel, &a, &b)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return r.errf("resolving its files: %w", err)
	}
	return r.errf("file %s is recorded with two sizes, %d and %d", Excerpt(rel), a, b)
}
