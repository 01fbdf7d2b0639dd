package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// A difference is a child version's catalog read against its parent's
// confirmed list: the files the mirror itself confirmed present when it
// published the parent (path below the data path, size, footer size,
// kind; one per path, in path order), kept as the mirror's state. Every
// DuckLake catalog lists every file of its version, current and
// historical, so a child's lists its parent's files again, and reading
// it whole costs what the repository holds, not what the version adds.
//
// The reader is given the child's catalog and the list, never the
// parent's catalog: a parent's catalog that took its own reader over
// (and so was published) may take over any reader that opens it, and
// then say anything of the child. The list is the mirror's own record of
// files it checked, so whatever a child's reader says against it costs
// that child only. The list is a file of the mirror's (listfile.go),
// linked into the reader's folder beside the catalog: the reader may
// read it (Landlock allows it read_file below its folder, nothing more;
// it can write no byte), and DuckDB reads it as it is, with its CSV
// reader, as it compares the child's rows with it; where the difference
// fails before the list is read whole, the list is read again alone, so
// that a failure of the list is told as the list's, as though it had
// been read first. Nothing of it is taken from the reader's answer but
// what the answer says of the child; the mirror makes the child's list
// from its own copies (sink.FileListWriter.Merge).
//
// Every file row of the child is resolved to its path below the data
// path (as resolve does: data path, schema path, table path, each where
// relative) and compared, by DuckDB in the reader, with the list (one
// join, holding the list's keys as its hash table): the child's rows with
// no entry of the same path, size, footer size and kind come out, one per
// path (the first, as read keeps it), in path order (the new files); and
// so do the list's entries no row of the child equals (the removed
// ones). A changed old row is a file the parent does not have, so it
// comes out as a new one (and the old entry as removed). None of the
// comparison happens in the mirror, which holds nothing per file but
// what comes out.

// Difference is a child catalog's files that are not in its parent's
// list, and the list's that are not in the child.
type Difference struct {
	DuckLakeVersion string // the child's
	DataPath        string // the child's, as stored
	// Files are the child's files not in the list (path, size, footer,
	// kind), sorted by Path; empty when Diff streamed them.
	Files []File
	// Removed are the list's entries that no row of the child equals,
	// each by its place in the list (from 0), in order.
	Removed []int64
	// ChildRows are the child's file rows (ducklake_data_file and
	// ducklake_delete_file) and ParentRows the list's entries; of the
	// child's rows, SameRows equal an entry of the list, FoldedRows came
	// out on a path another row came out on first, and the rest are
	// Files; RemovedRows of the list's entries are Removed. The reader
	// says them first, and the mirror checks they add up and that what
	// comes is the rest, so that a difference cut short is refused as a
	// read cut short is.
	ChildRows, ParentRows, SameRows, FoldedRows, RemovedRows int64
}

// ParentList is a parent's confirmed list as the mirror gives it to a
// difference: the file at Path, of Rows entries, one line each in path
// order, one per path (AppendListLine), which the mirror checked as it
// made it.
type ParentList struct {
	Rows int64
	Path string
}

// ErrNoDifference is a catalog Diff does not compare: a SQLite database
// (metadata.db), which the reader's DuckDB cannot attach (it loads no
// extension). The caller reads the child whole instead.
var ErrNoDifference = errors.New("a difference is taken of a DuckDB catalog only")

// ErrParentList is a parent's list that a difference could not read as
// the mirror said it is (missing, of another length, a line that does
// not parse). The caller reads the child whole instead: the list is the
// mirror's, not the child's. A reader taken over may say it of a good
// list; it then costs the child a whole read, in a reader of its own.
var ErrParentList = errors.New("the parent's list is unusable")

// listName is the list's name in a difference's reader's folder; the
// catalog's is its own, a version's catalog name (never this one).
const listName = "parent-list.tsv"

// Diff reads the catalog at file (named name in the repository, the
// upstream's child version) against parent (the list of the parent's
// files the mirror confirmed) in a reader of its own, confined to a
// folder of its own that holds the catalog and the list, and returns the
// child's files the list lacks, and the list's the child no longer has.
// Each new file, once checked, goes to each (if not nil) in path order
// instead of into Files. Errors as Read's: a *LimitError, a
// *ReaderError, or the catalog's refusal; ErrNoDifference where it is not
// a DuckDB database; ErrParentList where the list is not what it says.
func Diff(ctx context.Context, file, name string, parent ParentList, lim Limits, each func(File) error) (*Difference, error) {
	if name == "" {
		name = file
	}
	lim = lim.WithDefaults()
	if err := notSQLite(file, name); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "catalog-diff-")
	if err != nil {
		return nil, fmt.Errorf("catalog %s: a folder for its reader: %w", name, err)
	}
	defer os.RemoveAll(dir)
	base := filepath.Base(file)
	if base == listName {
		base = "catalog"
	}
	if err := linkOrCopy(file, filepath.Join(dir, base)); err != nil {
		return nil, fmt.Errorf("catalog %s: %w", name, err)
	}
	if err := linkOrCopy(parent.Path, filepath.Join(dir, listName)); err != nil {
		return nil, fmt.Errorf("catalog %s: %w: %w", name, ErrParentList, err)
	}
	fd, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", name, err)
	}
	p, err := startReader(ctx, fd, lim, 1)
	fd.Close()
	if err != nil {
		return nil, rename(err, name)
	}
	d, err := p.readDifference(ctx, request{name: name, file: base, lim: lim}, parent, each)
	if err != nil {
		return nil, err
	}
	p.close()
	return d, nil
}

// Diff is Diff (the function) with one of the pool's readers, where the
// catalog is in the pool's folder (as Fetch puts it); else with a reader
// of its own.
func (p *Pool) Diff(ctx context.Context, file, name string, parent ParentList, each func(File) error) (*Difference, error) {
	if filepath.Dir(file) != p.dir || filepath.Base(file) == listName {
		return Diff(ctx, file, name, parent, p.lim, each)
	}
	if err := notSQLite(file, name); err != nil {
		return nil, err
	}
	r, err := p.get(ctx, file)
	if err != nil {
		return nil, rename(err, name)
	}
	// The catalog and the list in the reader's folder, for its one
	// request.
	base, err := r.link(file)
	if err != nil {
		p.done(r, false)
		return nil, fmt.Errorf("catalog %s: %w", name, err)
	}
	if err := linkOrCopy(parent.Path, filepath.Join(r.dir, listName)); err != nil {
		p.done(r, false)
		return nil, fmt.Errorf("catalog %s: %w: %w", name, ErrParentList, err)
	}
	d, err := r.proc.readDifference(ctx, request{name: name, file: base, lim: p.lim}, parent, each)
	p.done(r, err == nil)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// linkOrCopy makes to the file from: a hard link where it can (the
// pool's files are on one file system), else a copy.
func linkOrCopy(from, to string) error {
	if err := os.Link(from, to); err == nil {
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
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

// readDifference asks the reader for a difference of its folder's
// catalog and list, and checks the answer as readCatalog checks a
// catalog.
func (p *readerProc) readDifference(ctx context.Context, q request, parent ParentList, each func(File) error) (*Difference, error) {
	q.diff = true
	q.parentRows = parent.Rows
	q.list = listName
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

// listRefusal is a reader's refusal of a difference for its list: the
// mirror's, not the child's fault.
type listRefusal struct{ error }

func (e listRefusal) Unwrap() error { return e.error }

// diffCounts checks what a reader announces of a difference: counts that
// add up, none above the limit, the list's as the mirror sent it.
func diffCounts(d *Difference, files, sent uint64, lim Limits) error {
	most := uint64(lim.MaxFiles)
	child, parent, same, folded, removed := uint64(d.ChildRows), uint64(d.ParentRows), uint64(d.SameRows), uint64(d.FoldedRows), uint64(d.RemovedRows)
	switch {
	case child > most:
		return fmt.Errorf("%w: a difference of a catalog of %d rows, more than the %d allowed", errInvalid, child, most)
	case parent != sent:
		return fmt.Errorf("%w: a difference against a list of %d entries, where %d were sent", errInvalid, parent, sent)
	case same > child || folded > child || files > child || same+folded+files != child:
		return fmt.Errorf("%w: %d files announced, where %d of the child's %d rows are in the list and %d folded", errInvalid, files, same, child, folded)
	case removed > parent || same < parent-removed:
		// Each entry not removed is equalled by a row of the child.
		return fmt.Errorf("%w: %d of the list's %d entries removed, where %d rows of the child are in it", errInvalid, removed, parent, same)
	}
	return nil
}

// The reader's side.

// childAlias is the name the child's catalog is attached under.
const childAlias = "cat"

// answerDifference takes the difference of the child catalog at file and
// the parent's list at list, and writes it to out: a meta frame with the
// counts, the new files, the removed entries, the end; or a refusal, at
// any point. An error is one the reader cannot answer: a write failed.
func answerDifference(out *frameWriter, file, list string, q request, pool *dbPool) error {
	w := &diffWriter{out: out}
	err := difference(context.Background(), file, list, q, w, pool)
	var ea errAnswer
	if errors.As(err, &ea) {
		return ea.error
	}
	if err != nil {
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
	w.out.begin(frameDiffMeta)
	w.out.str(truncate(c.DuckLakeVersion, 256))
	w.out.str(c.DataPath)
	w.out.u64(uint64(d.ChildRows))
	w.out.u64(uint64(d.ParentRows))
	w.out.u64(uint64(d.SameRows))
	w.out.u64(uint64(d.FoldedRows))
	w.out.u64(uint64(d.RemovedRows))
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

func (w *diffWriter) removed(at int64) error {
	w.out.begin(frameRemoved)
	w.out.u64(uint64(at))
	return w.out.end()
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

// Temporary tables of a difference.
const (
	childBases = "fdl_child_bases"
	unmatched  = "fdl_unmatched" // the child's rows and the list's entries with no equal on the other side
)

// difference is a reader's difference of a catalog and a list: the
// catalog attached read-only to a locked-down DuckDB, which may open the
// files of the reader's folder and no other, checked as read checks one
// (base tables only, no generated column, rows within the limits, a data
// path), its file rows resolved and compared by DuckDB with the list as
// DuckDB reads it, and the files of the child not in the list, then the
// list's entries the child lacks, written to w in path order. The list
// is the mirror's, so its failures come first, as though it had been read
// before the catalog was opened: where the difference fails before the
// list has been read whole and counted, the list is read again, alone
// (listError), and its failure is the answer if it has one. An errAnswer
// is one the reader cannot answer.
func difference(ctx context.Context, file, list string, q request, w *diffWriter, pool *dbPool) (err error) {
	lim := q.lim.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	child := &reader{ctx: ctx, name: q.name, lim: lim, file: file, alias: childAlias}
	defer func() {
		if err != nil {
			err = child.diffError(err)
		}
	}()
	if q.parentRows > lim.MaxFiles {
		return &LimitError{Catalog: q.name, Key: KeyMaxFiles, Detail: fmt.Sprintf("its parent's list has %d files, more than the %d allowed", q.parentRows, lim.MaxFiles)}
	}
	var inst *instance
	if pool != nil {
		// The reader's DuckDB started ahead (dbPool), which may open
		// the files of its folder.
		inst, err = pool.get(ctx)
	} else {
		allow := []string{sqlString(file), sqlString(file + ".wal"), sqlString(list)}
		inst, err = startDuckDB(ctx, lim, "SET allowed_paths=["+strings.Join(allow, ", ")+"]")
	}
	if err != nil {
		return child.errf("%w", err)
	}
	closed := false
	closeInst := func() {
		if !closed {
			closed = true
			inst.close()
		}
	}
	if pool == nil || !pool.oneShot {
		defer closeInst()
	}
	listRead := false
	defer func() {
		var ea errAnswer
		if err != nil && !listRead && ctx.Err() == nil && !errors.As(err, &ea) {
			// The list read alone, by a DuckDB of its own: this one may
			// be unusable after its failure (a fatal error), and
			// holds the child's tables.
			closeInst()
			if lerr := listError(ctx, err, list, q.parentRows, lim); lerr != nil {
				err = lerr
			}
		}
	}()
	if sqlite, err := isSQLite(file); err != nil {
		return child.errf("%v", strings.ReplaceAll(err.Error(), file, q.name))
	} else if sqlite {
		return child.errf("a SQLite database: %v", ErrNoDifference)
	}
	child.db, child.conn = inst.db, inst.conn
	if err := child.attach(child.file); err != nil {
		return err
	}
	found, err := findObjects(ctx, inst.conn, []string{childAlias})
	if err != nil {
		return child.errf("listing the catalog's objects: %w", err)
	}
	var meta *Catalog
	if err := child.objectError(found[child.attachedAs()]); err != nil {
		return err
	}
	if err := prepareDiff(child, &meta); err != nil {
		return err
	}
	if err := child.compare(meta.DataPath, list, q.parentRows); err != nil {
		return err
	}
	listRead = true
	if err := child.checkResolved(); err != nil {
		return err
	}
	var out, files, removed int64
	if err := inst.conn.QueryRowContext(ctx, "SELECT coalesce(sum(nrows), 0), count(*) FROM "+diffTable).Scan(&out, &files); err != nil {
		return child.errf("comparing with its parent's list: %w", err)
	}
	if err := inst.conn.QueryRowContext(ctx, "SELECT count(*) FROM "+unmatched+" WHERE ord IS NULL").Scan(&removed); err != nil {
		return child.errf("comparing with its parent's list: %w", err)
	}
	if out > child.fileRows {
		return child.errf("more rows out of the comparison (%d) than the catalog has (%d): it changed while read", out, child.fileRows)
	}
	d := &Difference{ChildRows: child.fileRows, ParentRows: q.parentRows, SameRows: child.fileRows - out, FoldedRows: out - files, RemovedRows: removed}
	if testLieDiff {
		// A reader taken over (tests only): every new file left out,
		// counted among those in the list.
		d.SameRows += files
	}
	if err := w.meta(meta, d); err != nil {
		return errAnswer{err}
	}
	if !testLieDiff {
		if err := child.writeFiles(w, meta.DataPath); err != nil {
			return err
		}
	}
	rows, err := inst.conn.QueryContext(ctx, "SELECT lord FROM "+unmatched+" WHERE ord IS NULL ORDER BY lord")
	if err != nil {
		return child.errf("comparing with its parent's list: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var at int64
		if err := rows.Scan(&at); err != nil {
			return child.errf("comparing with its parent's list: %w", err)
		}
		if err := w.removed(at); err != nil {
			return errAnswer{err}
		}
	}
	if err := rows.Err(); err != nil {
		return child.errf("comparing with its parent's list: %w", err)
	}
	if err := w.end(); err != nil {
		return errAnswer{err}
	}
	return nil
}

// writeFiles writes the new files of a difference (diffTable), in path
// order, each checked as resolve checks a path it makes.
func (r *reader) writeFiles(w *diffWriter, dataPath string) error {
	rows, err := r.conn.QueryContext(r.ctx, "SELECT rel, size, footer, del, puffin FROM "+diffTable+" ORDER BY rel")
	if err != nil {
		return r.errf("comparing with its parent's list: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var f File
		if err := rows.Scan(&f.Path, &f.Size, &f.Footer, &f.Delete, &f.Puffin); err != nil {
			return r.errf("comparing with its parent's list: %w", err)
		}
		if len(f.Path) > MaxPathBytes {
			return r.errf("file %s: its path below the data path is longer than %d bytes, the object stores' key limit", Excerpt(f.Path), MaxPathBytes)
		}
		if backend.CheckName(f.Path) != nil {
			return r.errf("file %s: path is not a clean relative path below the data path (no \"..\", \".\" or empty segments)", Excerpt(dataPath+f.Path))
		}
		if err := w.file(f); err != nil {
			return errAnswer{err}
		}
	}
	if err := rows.Err(); err != nil {
		return r.errf("comparing with its parent's list: %w", err)
	}
	return nil
}

// listSQL is a query of the list at path as DuckDB reads it, which the
// comparison joins with the child's rows: each entry's key (lkey, as
// rowKey makes a row's), its size (lsize) and its place in the list
// (lord, from 0), not its path, so that the join's table of a list of a
// million files holds some 24 bytes each, not a path each (DuckDB has no
// disk to spill to, and a memory limit of 128 MiB by default). DuckDB
// reads the file itself (its CSV reader, one pass, the columns' types
// given) as the join builds its table, keeping nothing else of it: its
// reader, of one thread, gives the lines in the file's order, and
// row_number() of an empty window numbers them as they come.
func listSQL(path string) string {
	// Its buffer of 1 MiB, not DuckDB's 32 (max_line_size's 16 times),
	// which would take a quarter of the reader's memory limit; a line is
	// at most some 10 KiB (a quoted path of MaxPathBytes).
	csv := fmt.Sprintf("read_csv(%s, delim='\\t', quote='', escape='', header=false, auto_detect=false, max_line_size=%d, buffer_size=%d, "+
		"columns={'path': 'VARCHAR', 'size': 'BIGINT', 'footer': 'BIGINT', 'flags': 'UTINYINT'})", sqlString(path), 64<<10, 1<<20)
	return fmt.Sprintf("SELECT %s AS lkey, size AS lsize, row_number() OVER () - 1 AS lord FROM %s", listKey("path", "size", "footer", "flags"), csv)
}

// errListCount is a list the comparison found not of the rows the
// mirror said; listError says how many it has.
var errListCount = errors.New("the parent's list is not of the entries the mirror said")

// listError is the list's failure, where a difference failed (err)
// before its list was read whole and counted: the list at path read
// again, by a DuckDB of its own, and counted. A list that does not read,
// or not of the rows the mirror said, is a listRefusal; nil where it
// reads as it should (the failure is the child's), or where it cannot be
// told.
func listError(ctx context.Context, err error, path string, rows int64, lim Limits) error {
	inst, serr := startDuckDB(ctx, lim, "SET allowed_paths=["+sqlString(path)+"]")
	if serr != nil {
		if errors.Is(err, errListCount) {
			return listRefusal{fmt.Errorf("its parent's list is not of the %d entries the mirror said", rows)}
		}
		return nil
	}
	defer inst.close()
	// Each entry read whole, as the comparison reads it (its key): a
	// count alone would not convert a column.
	var n int64
	var key any
	if qerr := inst.conn.QueryRowContext(ctx, "SELECT count(*), max(lkey) FROM ("+listSQL(path)+")").Scan(&n, &key); qerr != nil {
		if ctx.Err() != nil {
			return nil
		}
		return listRefusal{fmt.Errorf("reading its parent's list: %w", qerr)}
	}
	if n != rows || errors.Is(err, errListCount) {
		return listRefusal{fmt.Errorf("its parent's list has %d entries, where the mirror said %d", n, rows)}
	}
	return nil
}

// listKey is the key of a file by its path, size, footer size and
// flags (fileDelete, filePuffin; UTINYINT), as DuckDB hashes them: a row
// of the child and an entry of the list are the same file where their
// keys and sizes are equal. The key is the reader's DuckDB's own hash,
// made on both sides in one process, so it need match nothing outside;
// 64 bits and the size, against a list and a child of a million files
// each, leave honest files about one chance in 10^7 of a false match
// among files of one size. A match a hostile child makes is a lie about
// itself, which costs the child, as its reader's lies do; and a hostile
// parent that plants an entry equal to a future file of the child must
// know that file's path, size and footer, with which it could plant the
// file itself, hash or none.
func listKey(path, size, footer, flags string) string {
	return fmt.Sprintf("hash(%s, %s, %s, %s)", path, size, footer, flags)
}

// rowKey is a child's resolved row x's key (listKey), NULL where it has
// no path below the data path, or one that begins with '"', which the
// list writes quoted (listfile.go) and so never as it is.
func rowKey(x string) string {
	return fmt.Sprintf("CASE WHEN %[1]s.rel IS NULL OR starts_with(%[1]s.rel, '\"') THEN NULL ELSE %[2]s END", x,
		listKey(x+".rel", x+".size", x+".footer", fmt.Sprintf("CAST(CASE WHEN %[1]s.del THEN %[2]d ELSE 0 END + CASE WHEN %[1]s.puffin THEN %[3]d ELSE 0 END AS UTINYINT)", x, fileDelete, filePuffin)))
}

// prepareDiff checks the attached catalog of a difference as read checks
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
	if testMarker != nil {
		// Each catalog a difference's reader opens (tests only).
		if err := testMarker((*meta).DataPath); err != nil {
			return err
		}
	}
	return r.checkPlaceIDs()
}

// compare fills unmatched and diffTable: each file row of the catalog
// (r) resolved and joined with the entries of the list at list by their
// keys and sizes (rowKey, listKey: everything the mirror is told of a
// file; one hash join, the list its table, as DuckDB reads it); the rows
// and entries without an equal kept (unmatched), and the rows grouped by
// path (diffTable), as checkResolved and the files read them. Rows are
// compared before they are made one per path, so that DuckDB holds the
// list's keys and what comes out, never the child's rows grouped: at
// 300,000 files grouping them first passed the default memory limit of
// 128 MiB. The list is counted in the same pass: its entries rows-1 and
// rows are kept (unmatched) whether or not a row equals them, and the
// list has rows entries where the first is there and the second is not
// (errListCount where not). Such a kept entry with a row equal to it is
// neither removed nor new: it has both an ord and a lord.
func (r *reader) compare(dataPath, list string, count int64) error {
	rows := resolvedSQL(r.rawSQL(0)+" UNION ALL "+r.rawSQL(1), childBases, dataPath)
	steps := []string{
		"CREATE TEMP TABLE " + childBases + " AS " + r.basesSQL(dataPath),
		fmt.Sprintf(`CREATE TEMP TABLE %s AS
SELECT c.*, p.lord FROM (SELECT r.*, %s AS ckey FROM (%s) r) c FULL OUTER JOIN (%s) p ON c.ckey = p.lkey AND c.size = p.lsize
WHERE c.ord IS NULL OR p.lord IS NULL OR p.lord IN (%d, %d)`, unmatched, rowKey("r"), rows, listSQL(list), count-1, count),
		fmt.Sprintf(`CREATE TEMP TABLE %s AS
SELECT rel, arg_min(size, ord) AS size, arg_min(footer, ord) AS footer, arg_min(del, ord) AS del, arg_min(puffin, ord) AS puffin, count(*) AS nrows,
	min(size) FILTER (WHERE size >= 0) AS smin, max(size) FILTER (WHERE size >= 0) AS smax,
	arg_min({'err': err, 'del': del, 'path': left(path, 200), 'len': strlen(path)}, ord) FILTER (WHERE err IS NOT NULL) AS bad
FROM %s WHERE ord IS NOT NULL AND lord IS NULL
GROUP BY rel`, diffTable, unmatched),
	}
	for i, q := range steps {
		if _, err := r.conn.ExecContext(r.ctx, q); err != nil {
			return r.errf("comparing with its parent's list: %w", err)
		}
		if i != 1 {
			continue
		}
		var last sql.NullInt64
		if err := r.conn.QueryRowContext(r.ctx, "SELECT max(lord) FROM "+unmatched).Scan(&last); err != nil {
			return r.errf("comparing with its parent's list: %w", err)
		}
		if last.Valid != (count > 0) || last.Valid && last.Int64 != count-1 {
			return errListCount
		}
	}
	return nil
}

// errAnswer is a write to the mirror that failed: the reader has no one
// to answer to.
type errAnswer struct{ error }

// diffError is what difference refuses the child for, as read says it:
// a limit where one was passed, each catalog named as the repository
// names it.
func (r *reader) diffError(err error) error {
	var ea errAnswer
	if errors.As(err, &ea) {
		return err
	}
	if r.ctx.Err() != nil {
		return &LimitError{Catalog: r.name, Key: KeyTimeout, Detail: fmt.Sprintf("comparing it with its parent's list took longer than %s", r.lim.Timeout)}
	}
	var de *duckdb.Error
	if errors.As(err, &de) && de.Type == duckdb.ErrorTypeOutOfMemory {
		return &LimitError{Catalog: r.name, Key: KeyMemoryLimit, Detail: fmt.Sprintf("comparing it with its parent's list needs more than DuckDB's memory limit of %s", FormatBytes(r.lim.MemoryLimit))}
	}
	var le *LimitError
	if errors.As(err, &le) {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), r.file, r.name)
	return &renamed{msg: msg, err: err}
}

// diffTable is the temporary table of the files of a difference.
const diffTable = "fdl_difference"

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
// (NULL where the join would pass the limit); blen, base's length in
// bytes; and brel, base below the data path where base begins with it
// (else NULL), so that a row of that base is resolved by one
// concatenation, its base checked once, not for every row.
func (r *reader) basesSQL(dataPath string) string {
	dp := sqlString(dataPath)
	return fmt.Sprintf("SELECT tid, b, base, strlen(base) AS blen, CASE WHEN starts_with(base, %[1]s) THEN substr(base, length(%[1]s) + 1) END AS brel FROM (%[2]s)", dp, r.joinedBasesSQL(dataPath))
}

// joinedBasesSQL is basesSQL's tid, b and base.
func (r *reader) joinedBasesSQL(dataPath string) string {
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
// path (NULL where err is not). A relative row's full path is its base
// and its path, one where it is absolute; it is too long where that
// passes the limit (or its base did), and outside the data path where it
// does not begin with it, which a row of a base below the data path
// (brel) never is: its rel is brel and its path, with no full path made.
// The bases are joined by a hash join on tid (NULL for an absolute row,
// which so has none) and b.
func resolvedSQL(raw, bases, dataPath string) string {
	limit := len(dataPath) + MaxPathBytes
	dp := sqlString(dataPath)
	return fmt.Sprintf(`WITH checked AS (
	SELECT f.kind, f.rid, f.path, f.size, f.footer, f.relative, coalesce(lower(f.fmt) = 'puffin', false) AS puffin, bs.base, bs.brel,
		CASE WHEN f.path IS NULL OR f.path = '' THEN 1
			WHEN f.relative THEN CASE WHEN bs.base IS NULL OR bs.blen + strlen(f.path) > %[3]d THEN 2
				WHEN bs.brel IS NULL AND NOT starts_with(bs.base || f.path, %[4]s) THEN 3 END
			WHEN strlen(f.path) > %[3]d THEN 2
			WHEN NOT starts_with(f.path, %[4]s) THEN 3 END AS err
	FROM (%[1]s) f LEFT JOIN %[2]s bs ON bs.tid = CASE WHEN f.relative THEN f.tid END AND bs.b IS NOT DISTINCT FROM f.b)
SELECT size, footer, kind = 1 AS del, puffin, path, kind * 4611686018427387904 + rid AS ord, err,
	CASE WHEN err IS NOT NULL THEN NULL
		WHEN NOT relative THEN substr(path, length(%[4]s) + 1)
		WHEN brel IS NOT NULL THEN brel || path
		ELSE substr(base || path, length(%[4]s) + 1) END AS rel
FROM checked`, raw, bases, limit, dp)
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
