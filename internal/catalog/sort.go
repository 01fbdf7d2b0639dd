package catalog

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// A reader sends a catalog's file rows as it reads them, in the
// catalog's order, a path once per row: it holds none of them, and it
// may write nothing (RLIMIT_FSIZE 0, Landlock read-only), so the mirror
// puts them in path order and makes them one per path. Rows are sorted in
// memory up to sortMemory bytes; beyond it each sorted batch is written
// as a run to a private folder (0700, made for the sort, never the pool's
// folder, which readers can read), and the runs are merged into one. A
// catalog of 10,000,000 rows is then a few runs on disk and a merge
// buffer per run in memory, never a slice of every file.
//
// Rows of one path are folded as a read kept them before: the first row
// read is kept (its size, footer and kind), and a path recorded with two
// sizes (both known, they differ from the first row's) refuses the
// catalog. A row carries its place among the rows read (seq), so that
// "first" survives the sort, and the sizes its path's rows record (up to
// two distinct ones), so that the check survives folding in any order:
// batches and runs are folded as they are sorted and merged, and a
// catalog of millions of rows of one path holds one.
//
// The run files are unlinked as soon as they are made: they live as long
// as their descriptors, and a mirror that dies leaves none behind. Their
// bytes are those of the distinct paths of each batch (a path and about
// 30 bytes a row), twice while two levels are merged, and refused past
// sortBudget: a few times the catalog's own size, not the gigabytes a
// small catalog of compressed paths could name.

// sortMemory is the bytes of rows (their paths and rowOverhead each) held
// in memory before a run is written; a test may lower it (SetSortMemory)
// to make runs of a few rows. Twice that is held at most: the rows coming
// in while the last batch is sorted and written.
var sortMemory = 8 << 20

// mergeFanIn is how many runs of one level are merged into one of the
// next (a run as written is level 0): a bound on the descriptors and merge
// buffers one sort holds (at most mergeFanIn-1 runs a level), with each
// row merged once a level instead of every time the runs pile up.
const mergeFanIn = 32

// rowOverhead is what a held row costs besides its path's bytes: the
// sortRow and the string header.
const rowOverhead = 80

// SetSortMemory sets the bytes of rows a sort holds in memory before it
// writes a run, and returns a function that puts the old value back: for
// tests, which make it small so that a few rows take the external path.
func SetSortMemory(n int) (restore func()) {
	old := sortMemory
	sortMemory = max(n, 1)
	return func() { sortMemory = old }
}

// sortRow is a file row being sorted.
type sortRow struct {
	File
	seq   int64    // its place among the rows read: the lowest of a path is kept
	sizes [2]int64 // distinct sizes (>= 0) the path's rows record, -1 where none
}

func (a *sortRow) compare(b *sortRow) int {
	if c := strings.Compare(a.Path, b.Path); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// fold folds b (a row of the same path) into a, keeping the first row
// read and every distinct size up to two.
func (a *sortRow) fold(b *sortRow) {
	if b.seq < a.seq {
		a.File, a.seq = b.File, b.seq
	}
	for _, s := range b.sizes {
		a.addSize(s)
	}
}

func (a *sortRow) addSize(s int64) {
	switch {
	case s < 0 || s == a.sizes[0] || s == a.sizes[1]:
	case a.sizes[0] < 0:
		a.sizes[0] = s
	case a.sizes[1] < 0:
		a.sizes[1] = s
	}
}

// conflict is the size other than the kept row's that another row of
// its path records, or -1: a read refuses a path whose first row and
// another give two known sizes.
func (a *sortRow) conflict() int64 {
	if a.Size < 0 {
		return -1
	}
	for _, s := range a.sizes {
		if s >= 0 && s != a.Size {
			return s
		}
	}
	return -1
}

// fileSorter sorts the rows of one catalog.
type fileSorter struct {
	parent string // the folder its own is made in; "": os.TempDir
	name   string // the catalog's name, for refusals
	held   []sortRow
	bytes  int // of held, as sortMemory counts them
	// written is the bytes of the rows written to runs so far (merges
	// not counted: they rewrite the same rows), refused past budget (see
	// sortBudget); the spill's own until waited for.
	written, budget int64
	seq             int64
	dir             string // its private folder, once a run is written
	runs            []run  // sorted, folded runs, unlinked; levels never rise along it
	// spilling is the run being written, with the rows held before:
	// written beside the reading of the next rows (the reader waits on
	// the mirror otherwise), one at a time. runs and dir are its until
	// it is waited for.
	spilling chan error
}

// run is a sorted run on disk; level 0 as written, n+1 merged of level n.
type run struct {
	f     *os.File
	level int
}

func newFileSorter(parent, name string, budget int64) *fileSorter {
	return &fileSorter{parent: parent, name: name, budget: budget}
}

// runRowBytes is about what a row costs in a run besides its path's
// bytes: its sizes, footer, position and flags as runWriter writes them
// (varints, 10 to 53 bytes).
const runRowBytes = 40

// sortBytesPerCatalogByte is how many times its catalog's own size a sort
// may write (see sortBudget); a test lowers it.
var sortBytesPerCatalogByte int64 = 8

// pathBytesPerFile is the disk a sort may take for each file row the
// limits allow (catalog_max_files), at the least: 256 bytes a row, 2.4
// GiB at the default limit, four times the bytes of the paths of the
// bench's 10,000,000-row catalog.
const pathBytesPerFile = 256

// sortBudget is the bytes of rows a sort of a catalog of catalogBytes may
// write to disk. Before the sort was the mirror's, a catalog's rows were
// held in its reader, whose memory limit refused a catalog that expands
// too far; on disk nothing would. DuckDB compresses a column of paths
// that repeat a long prefix a hundred times and more, so a catalog of a
// few megabytes can name gigabytes of paths: the sort may take eight
// times the catalog's own bytes (a real catalog's paths take two to four
// times) or pathBytesPerFile for every file row allowed, whichever is
// more, and refuses the catalog past it, before the disk fills. The runs
// being merged take at most twice that.
func sortBudget(lim Limits, catalogBytes int64) int64 {
	lim = lim.WithDefaults()
	return max(sortBytesPerCatalogByte*catalogBytes, lim.MaxFiles*pathBytesPerFile)
}

// sortBudgetOf is sortBudget for the catalog at file.
func sortBudgetOf(lim Limits, file string) int64 {
	var n int64
	if fi, err := os.Stat(file); err == nil {
		n = fi.Size()
	}
	return sortBudget(lim, n)
}

// add takes one row.
func (s *fileSorter) add(f File) error {
	r := sortRow{File: f, seq: s.seq, sizes: [2]int64{-1, -1}}
	r.addSize(f.Size)
	s.seq++
	s.held = append(s.held, r)
	if s.bytes += len(f.Path) + rowOverhead; s.bytes < sortMemory {
		return nil
	}
	// The run is written while the next rows come.
	if err := s.wait(); err != nil {
		return err
	}
	held := s.held
	s.held, s.bytes = make([]sortRow, 0, len(held)), 0
	done := make(chan error, 1)
	s.spilling = done
	go func() { done <- s.spill(held) }()
	return nil
}

// wait waits for the run being written, if any.
func (s *fileSorter) wait() error {
	if s.spilling == nil {
		return nil
	}
	err := <-s.spilling
	s.spilling = nil
	return err
}

// sortRows sorts rows and folds those of one path.
func sortRows(rows []sortRow) []sortRow {
	slices.SortFunc(rows, func(a, b sortRow) int { return a.compare(&b) })
	out := rows[:0]
	for i := range rows {
		if n := len(out); n > 0 && out[n-1].Path == rows[i].Path {
			out[n-1].fold(&rows[i])
			continue
		}
		out = append(out, rows[i])
	}
	clear(rows[len(out):]) // the paths folded away
	return out
}

// spill writes rows as a run, and merges runs of one level where there
// are mergeFanIn of them.
func (s *fileSorter) spill(rows []sortRow) error {
	rows = sortRows(rows)
	// Counted as folded, as written: rows of one path repeated cost no
	// disk, whatever their number.
	for i := range rows {
		s.written += int64(len(rows[i].Path)) + runRowBytes
	}
	if s.written > s.budget {
		return &LimitError{Catalog: s.name, Key: KeyMaxFiles, Detail: fmt.Sprintf(
			"its file rows name more than %s of distinct paths, more than its sort may write to disk (%d times the catalog's size, or %d bytes for each file row catalog_max_files allows)",
			FormatBytes(s.budget), sortBytesPerCatalogByte, pathBytesPerFile)}
	}
	w, err := s.newRun()
	if err != nil {
		return err
	}
	for i := range rows {
		if err := w.write(&rows[i]); err != nil {
			w.f.Close()
			return s.errf(err)
		}
	}
	if err := w.flush(); err != nil {
		w.f.Close()
		return s.errf(err)
	}
	s.runs = append(s.runs, run{f: w.f})
	// The last mergeFanIn runs of one level become one of the next, and
	// so on up: each row is merged once a level.
	for n := len(s.runs); n >= mergeFanIn && s.runs[n-mergeFanIn].level == s.runs[n-1].level; n = len(s.runs) {
		merged, _, err := s.merge(s.runs[n-mergeFanIn:], false)
		if err != nil {
			return err
		}
		s.runs = append(s.runs[:n-mergeFanIn], run{f: merged, level: s.runs[n-1].level + 1})
	}
	return nil
}

func (s *fileSorter) errf(err error) error {
	return fmt.Errorf("catalog %s: sorting its files: %w", s.name, err)
}

// newRun makes a run file in the sorter's folder, unlinked.
func (s *fileSorter) newRun() (*runWriter, error) {
	if s.dir == "" {
		dir, err := os.MkdirTemp(s.parent, "catalog-sort-")
		if err != nil {
			return nil, s.errf(err)
		}
		// MkdirTemp makes it 0700; made sure, as for the pool's.
		if err := os.Chmod(dir, 0o700); err != nil {
			os.Remove(dir)
			return nil, s.errf(err)
		}
		s.dir = dir
	}
	f, err := os.CreateTemp(s.dir, "run-")
	if err != nil {
		return nil, s.errf(err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, s.errf(err)
	}
	return &runWriter{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

// finish ends the sort: the catalog c (its metadata) with its files in
// path order, one per path; the refusal of a path recorded with two
// sizes. A sort that wrote runs merges them into one on disk.
func (s *fileSorter) finish(c Catalog) (*Sorted, error) {
	c.Files = nil
	if err := s.wait(); err != nil {
		return nil, err
	}
	if len(s.runs) == 0 {
		s.held = sortRows(s.held)
		files := make([]File, len(s.held))
		for i := range s.held {
			if err := s.check(&s.held[i]); err != nil {
				return nil, err
			}
			files[i] = s.held[i].File
		}
		s.held = nil
		return &Sorted{meta: c, files: files, n: int64(len(files))}, nil
	}
	if len(s.held) > 0 {
		if err := s.spill(s.held); err != nil {
			return nil, err
		}
		s.held = nil
	}
	merged, n, err := s.merge(s.runs, true)
	if err != nil {
		return nil, err
	}
	s.runs = nil
	s.close()
	return &Sorted{meta: c, run: merged, n: n}, nil
}

// check refuses a path its rows record with two sizes, as a read did.
func (s *fileSorter) check(r *sortRow) error {
	if other := r.conflict(); other >= 0 {
		return fmt.Errorf("catalog %s: file %s is recorded with two sizes, %d and %d", s.name, Excerpt(r.Path), r.Size, other)
	}
	return nil
}

// close ends the sort, its runs and its folder (the runs are unlinked
// already; a Sorted keeps the one it reads).
func (s *fileSorter) close() {
	s.wait()
	for _, r := range s.runs {
		r.f.Close()
	}
	s.runs = nil
	if s.dir != "" {
		os.Remove(s.dir)
		s.dir = ""
	}
}

// merge merges runs into one new run, folding rows of one path; last
// says it is the sort's last merge, whose rows are whole: each is checked
// for two sizes. n is the rows of the merged run. The runs merged are
// closed.
func (s *fileSorter) merge(runs []run, last bool) (merged *os.File, n int64, err error) {
	w, err := s.newRun()
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			w.f.Close()
		}
	}()
	h := &runHeap{}
	defer func() {
		for _, r := range runs {
			r.f.Close()
		}
	}()
	for _, run := range runs {
		r := newRunReader(run.f)
		ok, err := r.next()
		if err != nil {
			return nil, 0, s.errf(err)
		}
		if ok {
			h.readers = append(h.readers, r)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		row := h.readers[0].row
		if err := h.advance(); err != nil {
			return nil, 0, s.errf(err)
		}
		for h.Len() > 0 && h.readers[0].row.Path == row.Path {
			row.fold(&h.readers[0].row)
			if err := h.advance(); err != nil {
				return nil, 0, s.errf(err)
			}
		}
		if last {
			if err := s.check(&row); err != nil {
				return nil, 0, err
			}
		}
		if err := w.write(&row); err != nil {
			return nil, 0, s.errf(err)
		}
		n++
	}
	if err := w.flush(); err != nil {
		return nil, 0, s.errf(err)
	}
	return w.f, n, nil
}

// runHeap is the readers of the runs being merged, by their current row.
type runHeap struct{ readers []*runReader }

func (h *runHeap) Len() int           { return len(h.readers) }
func (h *runHeap) Less(i, j int) bool { return h.readers[i].row.compare(&h.readers[j].row) < 0 }
func (h *runHeap) Swap(i, j int)      { h.readers[i], h.readers[j] = h.readers[j], h.readers[i] }
func (h *runHeap) Push(x any)         { h.readers = append(h.readers, x.(*runReader)) }
func (h *runHeap) Pop() any {
	r := h.readers[len(h.readers)-1]
	h.readers = h.readers[:len(h.readers)-1]
	return r
}

// advance moves the least reader on to its next row.
func (h *runHeap) advance() error {
	ok, err := h.readers[0].next()
	if err != nil {
		return err
	}
	if ok {
		heap.Fix(h, 0)
	} else {
		heap.Pop(h)
	}
	return nil
}

// A run is rows one after another: the path's length (uvarint) and
// bytes, then size, footer, seq and the two sizes (varints), then the
// flags byte.
type runWriter struct {
	f   *os.File
	w   *bufio.Writer
	buf []byte
}

func (w *runWriter) write(r *sortRow) error {
	b := binary.AppendUvarint(w.buf[:0], uint64(len(r.Path)))
	b = append(b, r.Path...)
	for _, v := range []int64{r.Size, r.Footer, r.seq, r.sizes[0], r.sizes[1]} {
		b = binary.AppendVarint(b, v)
	}
	var flags byte
	if r.Delete {
		flags |= fileDelete
	}
	if r.Puffin {
		flags |= filePuffin
	}
	w.buf = append(b, flags)
	_, err := w.w.Write(w.buf)
	return err
}

func (w *runWriter) flush() error { return w.w.Flush() }

// runReader reads a run from its start; row is the row last read.
type runReader struct {
	r    *bufio.Reader
	row  sortRow
	path []byte
}

func newRunReader(f *os.File) *runReader {
	return &runReader{r: bufio.NewReaderSize(io.NewSectionReader(f, 0, 1<<62), 64<<10)}
}

// errRun is a run that does not read back as written.
var errRun = errors.New("a sorted run of its files reads back damaged")

// next reads the next row; false at the run's end.
func (r *runReader) next() (bool, error) {
	n, err := binary.ReadUvarint(r.r)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil || n > MaxPathBytes {
		return false, errRun
	}
	if cap(r.path) < int(n) {
		r.path = make([]byte, MaxPathBytes)
	}
	if _, err := io.ReadFull(r.r, r.path[:n]); err != nil {
		return false, errRun
	}
	var v [5]int64
	for i := range v {
		if v[i], err = binary.ReadVarint(r.r); err != nil {
			return false, errRun
		}
	}
	flags, err := r.r.ReadByte()
	if err != nil {
		return false, errRun
	}
	r.row = sortRow{File: File{Path: string(r.path[:n]), Size: v[0], Footer: v[1], Delete: flags&fileDelete != 0, Puffin: flags&filePuffin != 0},
		seq: v[2], sizes: [2]int64{v[3], v[4]}}
	return true, nil
}

// Sorted is a catalog read whole: its metadata, and its files one per
// path in path order, in memory where they were few and in one run on
// disk where they were not. Its files are gone through with Each (or a
// Cursor), as often as needed; Close lets the run go (a Sorted dropped
// without it lets it go when its descriptor is collected).
type Sorted struct {
	meta  Catalog // Files nil
	files []File  // in memory; nil where run holds them
	run   *os.File
	n     int64
}

// DuckLakeVersion is the catalog's DuckLake version.
func (s *Sorted) DuckLakeVersion() string { return s.meta.DuckLakeVersion }

// DataPath is the catalog's data_path as stored.
func (s *Sorted) DataPath() string { return s.meta.DataPath }

// Len is how many files the catalog lists (one per path).
func (s *Sorted) Len() int64 { return s.n }

// Listed is a Sorted of files already in path order, one per path (a
// Difference's): for code that goes through either kind alike.
func Listed(c *Catalog) *Sorted {
	meta := *c
	meta.Files = nil
	return &Sorted{meta: meta, files: c.Files, n: int64(len(c.Files))}
}

// Each calls fn with each file in path order, and stops at fn's first
// error, which it returns.
func (s *Sorted) Each(fn func(File) error) error {
	c := s.Cursor()
	for c.Next() {
		if err := fn(c.File()); err != nil {
			return err
		}
	}
	return c.Err()
}

// Catalog is the catalog with every file in Files: for callers that keep
// them all (verify, prune, status).
func (s *Sorted) Catalog() (*Catalog, error) {
	c := s.meta
	c.Files = make([]File, 0, min(s.n, maxSizeHint))
	if err := s.Each(func(f File) error {
		c.Files = append(c.Files, f)
		return nil
	}); err != nil {
		return nil, err
	}
	return &c, nil
}

// Close lets the files go.
func (s *Sorted) Close() error {
	s.files = nil
	if s.run != nil {
		err := s.run.Close()
		s.run = nil
		return err
	}
	return nil
}

// Cursor goes through a Sorted's files in path order, one at a time.
type Cursor struct {
	s   *Sorted
	i   int64
	r   *runReader
	f   File
	err error
}

// Cursor starts a pass over the files.
func (s *Sorted) Cursor() *Cursor {
	c := &Cursor{s: s, i: -1}
	if s.run != nil {
		c.r = newRunReader(s.run)
	} else if s.files == nil && s.n > 0 {
		c.err = errors.New("catalog files read after Close")
	}
	return c
}

// Next moves to the next file; false at the end or on an error (Err).
func (c *Cursor) Next() bool {
	if c.err != nil {
		return false
	}
	c.i++
	if c.r == nil {
		if c.i >= int64(len(c.s.files)) {
			return false
		}
		c.f = c.s.files[c.i]
		return true
	}
	ok, err := c.r.next()
	if err != nil {
		c.err = fmt.Errorf("catalog files: %w", err)
		return false
	}
	c.f = c.r.row.File
	return ok
}

// File is the current file.
func (c *Cursor) File() File { return c.f }

// Err is what stopped the cursor, if not the end.
func (c *Cursor) Err() error { return c.err }
