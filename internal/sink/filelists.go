package sink

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"strings"

	// klauspost's gzip, not the standard library's: the same format, in
	// 59 ms where compress/gzip takes 166 ms for a list of 300,000 files
	// at BestSpeed (23 MB), and read in 47 ms against 62. It is in the
	// build already (promhttp's zstd).
	"github.com/klauspost/compress/gzip"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// A version's file list is the mirror's record of the data files it
// confirmed present when it published the version (those its main
// catalog names: path below the data path, size, footer size, kind; one
// per path, in path order). A child's difference is read against it
// (internal/sync), never against the parent's catalog, which may have
// taken its own reader over: what the list says the mirror checked.
//
// A list is a state file, FileListsDir/<version>.tsv.gz: gzip'd lines, a
// header (format, version, epoch), one line per file (catalog.
// AppendListLine: path, size, footer size, flags; the path as it is, or
// quoted as Go quotes it where it must be), and an end line with the
// count of files and the SHA-256 of every line before it, so that a list
// cut short or damaged is found, and read as none (the child is then read
// whole). It is written and read as a stream, never held.
//
// A list must never name a file the mirror no longer has. Only a prune
// removes data files, and before it removes any it gives the lists a new
// epoch (NewFileListEpoch): a list of another epoch than the mirror's is
// read as none. The epoch is random, not counted, so that an epoch file
// lost and made again never matches the lists written before.

// FileListsDir is the folder of the file lists, under .fdl-mirror/.
const FileListsDir = "file-lists/"

// fileListEpochFile holds the lists' epoch.
const fileListEpochFile = FileListsDir + "epoch"

const fileListFormat = "fdl-mirror file list 1"

// maxFileList bounds a list's copy fetched from the mirror, compressed;
// its lines are bounded as they are read (maxListLine).
const maxFileList = 1 << 30

// maxListLine bounds a line: a path of catalog.MaxPathBytes quoted (at
// most 10 bytes for each of its bytes), and the numbers.
const maxListLine = 10*catalog.MaxPathBytes + 128

func fileListName(id string) string { return FileListsDir + id + ".tsv.gz" }

// FileListEpoch returns the lists' epoch; where the mirror has none (or
// an unusable one), a run that writes makes one (created only where there
// is none, as a fenced write on a store that can condition it), so that
// no list written before counts; a dry run returns "".
func (st State) FileListEpoch(ctx context.Context) (string, error) {
	s := st.s
	raw, err := lock.ReadStateOrSetAside(ctx, s.b, fileListEpochFile, 256, !s.opts.DryRun, s.log)
	if err != nil {
		return "", s.errorf("%s%s: %w", backend.ReservedPrefix, fileListEpochFile, err)
	}
	if e := strings.TrimSpace(string(raw)); checkEpoch(e) == nil {
		return e, nil
	}
	if s.opts.DryRun {
		// A dry run writes none, and reads no list without one.
		return "", nil
	}
	epoch := newEpoch()
	if s.b.Properties().ConditionalWrite && raw == nil {
		// As replace writes, but not counted as a file copied: it is
		// the mirror's state, which a local sink writes uncounted.
		name := backend.ReservedPrefix + fileListEpochFile
		if err = backend.ReplaceIfUnchanged(ctx, s.b, name, []byte(epoch+"\n"), ""); backend.IsPreconditionFailed(err) {
			err = fenced(name, err)
		}
	} else {
		err = lock.WriteState(ctx, s.b, fileListEpochFile, []byte(epoch+"\n"))
	}
	if err != nil {
		return "", s.errorf("writing %s%s: %w", backend.ReservedPrefix, fileListEpochFile, err)
	}
	return epoch, nil
}

// NewFileListEpoch gives the lists a new epoch: every list written
// before is read as none from now on. A prune calls it, durably, before
// it removes a data file.
func (st State) NewFileListEpoch(ctx context.Context) error {
	s := st.s
	if err := lock.WriteState(ctx, s.b, fileListEpochFile, []byte(newEpoch()+"\n")); err != nil {
		return s.errorf("writing %s%s: %w", backend.ReservedPrefix, fileListEpochFile, err)
	}
	return nil
}

func newEpoch() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func checkEpoch(e string) error {
	if b, err := hex.DecodeString(e); err != nil || len(b) != 16 {
		return fmt.Errorf("epoch %s is not 32 hex digits", catalog.Excerpt(e))
	}
	return nil
}

// RemoveFileList removes a version's list (a prune's removed version).
func (st State) RemoveFileList(ctx context.Context, id string) error {
	if err := lock.RemoveState(ctx, st.s.b, fileListName(id)); err != nil && !backend.IsNotExist(err) {
		return err
	}
	return nil
}

// FileListWriter writes a version's list into a local file, in path
// order, to be written to the mirror at the version's publish
// (WriteFileList).
//
// The list is written as gzip members (RFC 1952's concatenated
// members, one gzip file): the header line alone, then the file lines in
// members of about listMemberBytes, each ending at a line's end, then the
// end line alone. A child's list is mostly its parent's lines: Merge
// copies each member of the parent that the difference leaves as it was,
// compressed as it came (FetchFileList keeps it, and where each member
// begins), and compresses only the lines around a change. A list of one
// member (written before) is read as any other, and merged line by line.
type FileListWriter struct {
	id, epoch string
	f         *os.File
	comp      *compressor   // hashes and compresses
	out       *bufio.Writer // to comp
	line      []byte
	n         int64
	prev      string
	member    int // bytes written into the current member
	closed    bool
}

// listMemberBytes is about how many bytes of file lines a member holds:
// some 3,000 lines, 0.2 ms to compress. Smaller members compress a little
// worse (each starts without a dictionary); larger ones make a one-file
// change compress more again.
const listMemberBytes = 256 << 10

// compressor hashes and compresses a list's lines on a goroutine of its
// own (aside), a buffer at a time: at a million files, the merge that
// makes the lines (reading, checking, ordering them) and their
// compression then take a core each, where one after the other they took
// 0.8 s. It ends a member where it is told to (a chunk of neither), and
// copies a run of a parent's members as they are (a chunk's copy).
type compressor struct {
	*aside
	f    *os.File
	sum  hash.Hash
	gz   *gzip.Writer
	open bool // gz has begun a member
}

func newCompressor(f *os.File) *compressor {
	gz, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	c := &compressor{f: f, sum: sha256.New(), gz: gz}
	c.aside = newAside(c.take)
	return c
}

// take is the goroutine's work on each chunk, in order.
func (c *compressor) take(ch chunk) error {
	switch {
	case ch.b != nil:
		c.sum.Write(ch.b)
		return c.write(ch.b)
	case ch.copy != nil:
		if err := c.endMember(); err != nil {
			ch.copy.close()
			return err
		}
		return ch.copy.copyTo(c.f, c.sum)
	default:
		return c.endMember()
	}
}

// write compresses b into the open member, beginning one where none is.
func (c *compressor) write(b []byte) error {
	if !c.open {
		c.gz.Reset(c.f)
		c.open = true
	}
	_, err := c.gz.Write(b)
	return err
}

// endMember ends the open member, if any.
func (c *compressor) endMember() error {
	if !c.open {
		return nil
	}
	c.open = false
	return c.gz.Close()
}

// NewFileListWriter starts version id's list of the given epoch in dir.
func NewFileListWriter(dir, id, epoch string) (*FileListWriter, error) {
	if err := repo.CheckVersionID(id); err != nil {
		return nil, err
	}
	if err := checkEpoch(epoch); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "file-list-*.tsv.gz")
	if err != nil {
		return nil, err
	}
	// BestSpeed: a list of 300,000 files is written at every version
	// published; its size matters less than its time.
	w := &FileListWriter{id: id, epoch: epoch, f: f, comp: newCompressor(f)}
	w.out = bufio.NewWriterSize(w.comp, 64<<10)
	if err := w.write(fmt.Appendf(nil, "%s\tversion=%s\tepoch=%s\n", fileListFormat, id, epoch)); err != nil {
		w.Discard()
		return nil, err
	}
	// The header a member of its own: a child's differs.
	if err := w.endMember(); err != nil {
		w.Discard()
		return nil, err
	}
	return w, nil
}

// Add writes the next file: paths strictly in order.
func (w *FileListWriter) Add(f catalog.File) error {
	if w.n > 0 && f.Path <= w.prev {
		return fmt.Errorf("file list of %s: %s after %s, not in path order", w.id, catalog.Excerpt(f.Path), catalog.Excerpt(w.prev))
	}
	if err := catalog.CheckListFile(f); err != nil {
		return fmt.Errorf("file list of %s: %w", w.id, err)
	}
	w.n++
	w.prev = f.Path
	b := catalog.AppendListLine(w.line[:0], f)
	w.line = b
	return w.writeLine(b)
}

// AddLine writes the next file as line, a line of a list the mirror
// wrote and read back checked (FileList.EachLine) whose file is at path:
// paths strictly in order.
func (w *FileListWriter) AddLine(path string, line []byte) error {
	if w.n > 0 && path <= w.prev {
		return fmt.Errorf("file list of %s: %s after %s, not in path order", w.id, catalog.Excerpt(path), catalog.Excerpt(w.prev))
	}
	w.n++
	w.prev = path
	return w.writeLine(line)
}

// writeLine writes a file's line, and ends the member where it has
// listMemberBytes.
func (w *FileListWriter) writeLine(b []byte) error {
	if err := w.write(b); err != nil {
		return err
	}
	if w.member += len(b); w.member >= listMemberBytes {
		return w.endMember()
	}
	return nil
}

// write writes bytes to the list (and its checksum: comp).
func (w *FileListWriter) write(b []byte) error {
	_, err := w.out.Write(b)
	return err
}

// endMember ends the member being written (if it has any bytes) after
// what was written.
func (w *FileListWriter) endMember() error {
	if err := w.out.Flush(); err != nil {
		return err
	}
	w.member = 0
	w.comp.send(chunk{})
	return nil
}

// Files is how many files were added.
func (w *FileListWriter) Files() int64 { return w.n }

// Discard removes the local file; the list is not written.
func (w *FileListWriter) Discard() {
	if w == nil || w.closed {
		return
	}
	w.closed = true
	w.comp.close()
	w.f.Close()
	os.Remove(w.f.Name())
}

// finish writes the end line and closes the local file.
func (w *FileListWriter) finish() (int64, error) {
	err := w.out.Flush()
	if cerr := w.comp.close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The end line, a member of its own, not in the checksum, once
		// the goroutine is done.
		end := fmt.Appendf(nil, "end\t%d\t%s\n", w.n, hex.EncodeToString(w.comp.sum.Sum(nil)))
		if err = w.comp.endMember(); err == nil {
			err = w.comp.write(end)
		}
		if cerr := w.comp.endMember(); err == nil {
			err = cerr
		}
	}
	var size int64
	if err == nil {
		var fi os.FileInfo
		if fi, err = w.f.Stat(); err == nil {
			size = fi.Size()
		}
	}
	if err == nil {
		_, err = w.f.Seek(0, io.SeekStart)
	}
	return size, err
}

// WriteFileList writes version id's list to the mirror (a dry run
// writes nothing), and removes the local file.
func (st State) WriteFileList(ctx context.Context, w *FileListWriter) error {
	s := st.s
	defer w.Discard()
	if s.opts.DryRun {
		return nil
	}
	size, err := w.finish()
	if err == nil {
		err = lock.WriteStateFrom(ctx, s.b, fileListName(w.id), w.f, size)
	}
	if err != nil {
		return s.errorf("writing %s%s: %w", backend.ReservedPrefix, fileListName(w.id), err)
	}
	return nil
}

// FileList is a version's list read back from the mirror into a local
// copy, checked whole (format, version, epoch, count, checksum) as it is
// fetched, and kept uncompressed, its file lines only: the file a
// difference's reader reads as it is (catalog.ParentList), and the
// mirror reads once more (Each, EachLine), checking every line (order,
// paths) as it gives them, and the count and checksum again. A list
// written in members (FileListWriter) also keeps its compressed bytes,
// and where each member of file lines is in both copies, for Merge: the
// compressed copy is never linked into a reader's folder, as the
// uncompressed one is.
type FileList struct {
	id      string
	path    string
	Files   int64
	head    []byte // the header line, the start of the checksum
	sum     []byte // the SHA-256 of the header and the file lines
	lines   []byte // the SHA-256 of the file lines alone, once asked (EntriesSHA256)
	gzPath  string // the compressed copy, where members is not nil
	members []member
}

// member is a gzip member of a list's file lines: its lines' places in
// the list [lo, hi), its bytes in the uncompressed copy (file lines only)
// and in the compressed one, and its first and last paths.
type member struct {
	lo, hi                     int64
	plainFrom, plainTo         int64
	compressedFrom, compressed int64 // compressed is its end
	first, last                string
}

// EntriesSHA256 is the hex SHA-256 of the list's file lines alone: two
// mirrors' lists of the same files have the same, whatever their epochs
// (a difference from either is the same). It hashes the local copy (its
// file lines, as they were checked), once, when first asked: only a
// fan-out asks, before a reader has the copy; "" where it cannot be read.
func (l *FileList) EntriesSHA256() string {
	if l.lines == nil {
		f, err := os.Open(l.path)
		if err != nil {
			return ""
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return ""
		}
		l.lines = h.Sum(nil)
	}
	return hex.EncodeToString(l.lines)
}

// maxPlainFileList bounds a list's local copy, uncompressed: some 30
// million lines of the longest path most catalogs hold.
const maxPlainFileList = 4 << 30

// FetchFileList fetches version id's list into dir and checks it; nil
// where the mirror has none. A list of another epoch, or one that fails
// a check, is an error: the caller reads the child whole.
func (st State) FetchFileList(ctx context.Context, id, epoch, dir string) (*FileList, error) {
	s := st.s
	name := fileListName(id)
	rc, err := lock.OpenState(ctx, s.b, name)
	if err != nil || rc == nil {
		return nil, err
	}
	defer rc.Close()
	f, err := os.CreateTemp(dir, "file-list-*.tsv")
	if err != nil {
		return nil, err
	}
	l := &FileList{id: id, path: f.Name()}
	gzf, err := os.CreateTemp(dir, "file-list-*.tsv.gz")
	if err == nil {
		l.gzPath = gzf.Name()
		err = l.fetch(rc, f, gzf, epoch)
		if cerr := gzf.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		l.Remove()
		return nil, fmt.Errorf("%s%s: %w", backend.ReservedPrefix, name, err)
	}
	if l.members == nil {
		os.Remove(l.gzPath)
		l.gzPath = ""
	}
	return l, nil
}

// fetch reads the compressed list from rc, keeping its bytes in gzf, and
// writes its file lines to f uncompressed, checking its lines as they
// pass (header, count, checksum: not each line's fields, which Each
// checks as it gives them), and noting its members (scan).
func (l *FileList) fetch(rc io.Reader, f, gzf *os.File, epoch string) error {
	compressed := &countingReader{r: io.TeeReader(io.LimitReader(rc, maxFileList+1), gzf)}
	in := bufio.NewReaderSize(compressed, 64<<10)
	gz, err := gzip.NewReader(in)
	if err != nil {
		return err
	}
	m := &memberReader{gz: gz, in: in, compressed: compressed}
	gz.Multistream(false)
	plain := &countingReader{r: io.LimitReader(m, maxPlainFileList+1)}
	l.Files, err = l.scan(plain, epoch, f, m)
	switch {
	case compressed.n > maxFileList:
		return fmt.Errorf("larger than %d bytes", maxFileList)
	case plain.n > maxPlainFileList:
		return fmt.Errorf("larger than %d bytes uncompressed", maxPlainFileList)
	}
	return err
}

// memberReader reads a list's gzip members one after the other, and says
// where each ends: the read that meets a member's end gives
// errMemberEnd (and the next goes on with the next member), where it was
// in the compressed stream is at.
type memberReader struct {
	gz         *gzip.Reader
	in         *bufio.Reader
	compressed *countingReader // below in
	at         int64           // where the last member ended, compressed
	eof        bool
}

// errMemberEnd is a member's end, met (memberReader).
var errMemberEnd = errors.New("the end of a gzip member")

func (m *memberReader) Read(p []byte) (int, error) {
	if m.eof {
		return 0, io.EOF
	}
	n, err := m.gz.Read(p)
	if n > 0 || !errors.Is(err, io.EOF) {
		if errors.Is(err, io.EOF) {
			err = nil // said at the next read
		}
		return n, err
	}
	m.at = m.compressed.n - int64(m.in.Buffered())
	switch err := m.gz.Reset(m.in); {
	case errors.Is(err, io.EOF):
		m.eof = true
	case err != nil:
		return 0, err
	}
	m.gz.Multistream(false)
	return 0, errMemberEnd
}

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Path is the local copy: the list's file lines (catalog.ParentList).
func (l *FileList) Path() string { return l.path }

// Each gives the list's files in path order, checked again as they are
// read from the local copy (each line, the count, the checksum); it
// stops at yield's first error.
func (l *FileList) Each(yield func(catalog.File) error) error {
	var prev string
	return l.eachRawLine(func(n int64, b []byte) error {
		file, err := catalog.ParseListLine(string(b[:len(b)-1]))
		if err != nil {
			return fmt.Errorf("file list of %s: line %d: %w", l.id, n+2, err)
		}
		if n > 0 && file.Path <= prev {
			return fmt.Errorf("file list of %s: line %d: %s after %s, not in path order", l.id, n+2, catalog.Excerpt(file.Path), catalog.Excerpt(prev))
		}
		prev = file.Path
		return yield(file)
	})
}

// EachLine gives the list's lines as they are, each with its path, in
// path order, and checks the count and checksum at the end, as Each
// does; it does not parse a line's other fields, which the mirror checked
// as it wrote them (Add), and which the checksum holds as written: a
// child's list copies its parent's lines so (AddLine).
func (l *FileList) EachLine(yield func(path string, line []byte) error) error {
	var prev string
	return l.eachRawLine(func(n int64, b []byte) error {
		path, ok := listPath(b)
		if !ok || n > 0 && path <= prev {
			return fmt.Errorf("file list of %s: line %d: not a file's line in path order: %s", l.id, n+2, catalog.Excerpt(string(b)))
		}
		prev = path
		return yield(path, b)
	})
}

// eachRawLine gives the local copy's file lines (each with its newline, and
// its index), bounded in length, and checks at the end that they are as
// many as fetched and of the fetched checksum: what Each and EachLine
// share. It stops at yield's first error.
func (l *FileList) eachRawLine(yield func(n int64, line []byte) error) error {
	f, err := os.Open(l.path)
	if err != nil {
		return err
	}
	defer f.Close()
	sum := sha256.New()
	sum.Write(l.head)
	// Every byte of the copy is a file line's: hashed as it is read, a
	// buffer at a time, not line by line.
	in := bufio.NewReaderSize(io.TeeReader(f, sum), maxListLine+1)
	for n := int64(0); ; n++ {
		b, err := in.ReadSlice('\n')
		switch {
		case errors.Is(err, io.EOF) && len(b) == 0:
			if n != l.Files || !bytes.Equal(sum.Sum(nil), l.sum) {
				return fmt.Errorf("file list of %s: %d files of SHA-256 %x, where %d of %x were fetched: damaged", l.id, n, sum.Sum(nil), l.Files, l.sum)
			}
			return nil
		case errors.Is(err, io.EOF):
			return fmt.Errorf("file list of %s: line %d: %w", l.id, n+2, errListEnd)
		case errors.Is(err, bufio.ErrBufferFull):
			return fmt.Errorf("file list of %s: line %d: longer than %d bytes", l.id, n+2, maxListLine)
		case err != nil:
			return err
		}
		if err := yield(n, b); err != nil {
			return err
		}
	}
}

// ListCursor goes through a list's local copy in path order, a file at a
// time, each line checked as Each checks it; it stops (Next is false) at
// the end or at the first line that fails, which Err says. A pass that
// stops early checks no checksum: the copy was checked whole as it was
// fetched, and is the mirror's own.
type ListCursor struct {
	l    *FileList
	f    *os.File
	in   *bufio.Reader
	cur  catalog.File
	prev string
	n    int64
	err  error
}

// Cursor starts a pass over the list; the caller closes it.
func (l *FileList) Cursor() (*ListCursor, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	return &ListCursor{l: l, f: f, in: bufio.NewReaderSize(f, maxListLine+1)}, nil
}

// Next moves to the next file; false at the end or at an error.
func (c *ListCursor) Next() bool {
	if c.err != nil || c.in == nil {
		return false
	}
	b, err := c.in.ReadSlice('\n')
	switch {
	case errors.Is(err, io.EOF) && len(b) == 0:
		if c.n != c.l.Files {
			c.err = fmt.Errorf("file list of %s: %d files, where %d were fetched", c.l.id, c.n, c.l.Files)
		}
		c.in = nil
		return false
	case errors.Is(err, bufio.ErrBufferFull):
		c.err = fmt.Errorf("file list of %s: line %d: longer than %d bytes", c.l.id, c.n+2, maxListLine)
		return false
	case err != nil:
		c.err = fmt.Errorf("file list of %s: line %d: %w", c.l.id, c.n+2, err)
		return false
	}
	f, err := catalog.ParseListLine(string(b[:len(b)-1]))
	if err == nil && c.n > 0 && f.Path <= c.prev {
		err = fmt.Errorf("%s after %s, not in path order", catalog.Excerpt(f.Path), catalog.Excerpt(c.prev))
	}
	if err != nil {
		c.err = fmt.Errorf("file list of %s: line %d: %w", c.l.id, c.n+2, err)
		return false
	}
	c.n++
	c.cur, c.prev = f, f.Path
	return true
}

// File is the file Next moved to.
func (c *ListCursor) File() catalog.File { return c.cur }

// Err is why the pass stopped before the end; nil at the end.
func (c *ListCursor) Err() error { return c.err }

// Close ends the pass.
func (c *ListCursor) Close() {
	if c != nil {
		c.f.Close()
	}
}

// Remove removes the local copy.
func (l *FileList) Remove() {
	if l != nil {
		os.Remove(l.path)
		if l.gzPath != "" {
			os.Remove(l.gzPath)
		}
	}
}

// errListEnd is a list that ends before its end line.
var errListEnd = errors.New("the list ends before its end line: cut short")

// scan reads a list, uncompressed, from r: its header (of epoch, where
// not empty), its file lines (counted, and written to f as they are),
// its end line, and nothing after; it keeps the header and the checksum
// for Each. Where r is m's and the list is in members as FileListWriter
// writes them (the header and the end line each alone), it notes each
// member of file lines for Merge; a member that ends inside a line is an
// error, as no writer of lists makes one.
func (l *FileList) scan(r io.Reader, epoch string, f io.Writer, m *memberReader) (int64, error) {
	in := bufio.NewReaderSize(r, maxListLine+1)
	sum := sha256.New()
	ended := false // a member ended before the line read
	line := func() ([]byte, error) {
		ended = false
		for {
			b, err := in.ReadSlice('\n')
			switch {
			case errors.Is(err, errMemberEnd) && len(b) == 0:
				ended = true
				continue
			case errors.Is(err, errMemberEnd):
				return nil, errors.New("a gzip member ends inside a line")
			case errors.Is(err, bufio.ErrBufferFull):
				return nil, fmt.Errorf("a line longer than %d bytes", maxListLine)
			case errors.Is(err, io.EOF):
				return nil, errListEnd
			case err != nil:
				return nil, err
			}
			return b, nil
		}
	}
	head, err := line()
	if err != nil {
		return 0, err
	}
	sum.Write(head)
	fields := strings.Split(strings.TrimSuffix(string(head), "\n"), "\t")
	if len(fields) != 3 || fields[0] != fileListFormat || fields[1] != "version="+l.id {
		return 0, fmt.Errorf("not the file list of version %s: %s", l.id, catalog.Excerpt(string(head)))
	}
	if epoch != "" && fields[2] != "epoch="+epoch {
		return 0, fmt.Errorf("a list of another epoch (%s, the mirror's is %s): written before a prune removed data files", catalog.Excerpt(strings.TrimPrefix(fields[2], "epoch=")), epoch)
	}
	l.head = append([]byte(nil), head...)
	// The file lines are hashed as they are written out, 64 KiB at a
	// time (a million lines hashed one by one took twice as long), on a
	// goroutine of their own (aside): the decompression that gives them
	// is most of a fetch's time, and hashing and writing a quarter.
	plain := io.MultiWriter(f, sum)
	copies := newAside(func(ch chunk) error {
		_, err := plain.Write(ch.b)
		return err
	})
	defer copies.close()
	out := bufio.NewWriterSize(copies, 64<<10)
	var (
		n, pos  int64    // file lines so far, and their bytes
		members []member // noted so far; nil once the list is not in members
		cur     member   // the member being read, from its first line
		prev    []byte   // the line before
	)
	inMembers := m != nil
	// endMember notes the member that ended after line n-1 (prev).
	endMember := func() {
		if !inMembers || n == cur.lo {
			return
		}
		cur.hi, cur.plainTo, cur.compressed = n, pos, m.at
		if p, ok := listPath(prev); ok {
			cur.last = p
			members = append(members, cur)
		} else {
			inMembers = false
		}
	}
	for first := true; ; first = false {
		b, err := line()
		if err != nil {
			return n, err
		}
		if first && !ended {
			inMembers = false // the header is not a member of its own
		}
		if ended {
			endMember()
			cur = member{lo: n, plainFrom: pos}
			if inMembers {
				cur.compressedFrom = m.at
			}
		}
		if rest, ok := bytes.CutPrefix(b, []byte("end\t")); ok {
			if err := out.Flush(); err != nil {
				return n, err
			}
			if err := copies.close(); err != nil {
				return n, err
			}
			count, hexSum, _ := strings.Cut(strings.TrimSuffix(string(rest), "\n"), "\t")
			if count != strconv.FormatInt(n, 10) || hexSum != hex.EncodeToString(sum.Sum(nil)) {
				return n, fmt.Errorf("its end line says %s; %d files came, of SHA-256 %x: damaged", catalog.Excerpt(string(rest)), n, sum.Sum(nil))
			}
			if !ended {
				inMembers = false // the end line is not a member of its own
			}
			break
		}
		if n == cur.lo && inMembers {
			if p, ok := listPath(b); ok {
				cur.first = p
			} else {
				inMembers = false
			}
		}
		if _, err := out.Write(b); err != nil {
			return n, err
		}
		n++
		pos += int64(len(b))
		if inMembers {
			prev = append(prev[:0], b...)
		}
	}
	ended = false
	for {
		_, err := in.ReadByte()
		if errors.Is(err, errMemberEnd) {
			ended = true
			continue
		}
		if !errors.Is(err, io.EOF) {
			if err == nil {
				err = errors.New("bytes after its end line")
			}
			return n, err
		}
		break
	}
	if inMembers && ended {
		// The end line's member ended after it.
		l.members = members
		if l.members == nil {
			l.members = []member{}
		}
	}
	l.sum = sum.Sum(nil)
	return n, nil
}

// aside gives each chunk it is sent to do, in order, on a goroutine of
// its own; bytes written to it are copied into one of three buffers of
// 64 KiB (a bufio.Writer's writes) and sent as a chunk's b. do's first
// error is close's, and ends the work: the chunks after it are dropped
// (a copy's files closed).
type aside struct {
	full   chan chunk
	free   chan []byte
	done   chan error
	err    error
	closed bool
}

// chunk is what an aside is given next: bytes (b), a run of a parent
// list's members to copy (copy), or neither (the compressor's end of a
// member).
type chunk struct {
	b    []byte
	copy *memberRun
}

func newAside(do func(chunk) error) *aside {
	const buffers = 3
	a := &aside{full: make(chan chunk, buffers+1), free: make(chan []byte, buffers), done: make(chan error, 1)}
	for range buffers {
		a.free <- make([]byte, 0, 64<<10)
	}
	go func() {
		var err error
		for ch := range a.full {
			if err == nil {
				err = do(ch)
			} else if ch.copy != nil {
				ch.copy.close()
			}
			if ch.b != nil {
				a.free <- ch.b[:0]
			}
		}
		a.done <- err
	}()
	return a
}

// Write sends a copy of p; an error of do's is close's.
func (a *aside) Write(p []byte) (int, error) {
	b := <-a.free
	a.send(chunk{b: append(b, p...)})
	return len(p), nil
}

// send sends ch after what was sent before.
func (a *aside) send(ch chunk) { a.full <- ch }

// close waits for what was sent to be done; again, the same.
func (a *aside) close() error {
	if !a.closed {
		a.closed = true
		close(a.full)
		a.err = <-a.done
	}
	return a.err
}

// listPath is the path of a list's line (its first field, unquoted).
func listPath(line []byte) (string, bool) {
	field, _, ok := bytes.Cut(line, []byte("\t"))
	path := string(field)
	if !ok {
		return "", false
	}
	if strings.HasPrefix(path, `"`) {
		var err error
		if path, err = strconv.Unquote(path); err != nil {
			return "", false
		}
	}
	return path, true
}
