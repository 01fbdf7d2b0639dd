package sink

import (
	"bufio"
	"bytes"
	"compress/gzip"
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
// header (format, version, epoch), one line per file (the path quoted as
// Go quotes it, size, footer size, flags), and an end line with the count
// of files and the SHA-256 of every line before it, so that a list cut
// short or damaged is found, and read as none (the child is then read
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
		err = s.replace(ctx, backend.ReservedPrefix+fileListEpochFile, []byte(epoch+"\n"), "")
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
type FileListWriter struct {
	id, epoch string
	f         *os.File
	gz        *gzip.Writer
	out       *bufio.Writer // to gz
	sum       hash.Hash
	line      []byte
	n         int64
	prev      string
	closed    bool
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
	gz, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	w := &FileListWriter{id: id, epoch: epoch, f: f, gz: gz, out: bufio.NewWriterSize(gz, 64<<10), sum: sha256.New()}
	if err := w.write(fmt.Appendf(nil, "%s\tversion=%s\tepoch=%s\n", fileListFormat, id, epoch)); err != nil {
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
	if err := checkListFile(f); err != nil {
		return fmt.Errorf("file list of %s: %w", w.id, err)
	}
	var flags int
	if f.Delete {
		flags |= 1
	}
	if f.Puffin {
		flags |= 2
	}
	w.n++
	w.prev = f.Path
	b := strconv.AppendQuote(w.line[:0], f.Path)
	b = append(b, '\t')
	b = strconv.AppendInt(b, f.Size, 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, f.Footer, 10)
	b = append(b, '\t', byte('0'+flags), '\n')
	w.line = b
	return w.write(b)
}

// write writes a line to the list and its checksum.
func (w *FileListWriter) write(b []byte) error {
	w.sum.Write(b)
	_, err := w.out.Write(b)
	return err
}

// Files is how many files were added.
func (w *FileListWriter) Files() int64 { return w.n }

// Discard removes the local file; the list is not written.
func (w *FileListWriter) Discard() {
	if w == nil || w.closed {
		return
	}
	w.closed = true
	w.f.Close()
	os.Remove(w.f.Name())
}

// finish writes the end line and closes the local file.
func (w *FileListWriter) finish() (int64, error) {
	fmt.Fprintf(w.out, "end\t%d\t%s\n", w.n, hex.EncodeToString(w.sum.Sum(nil)))
	err := w.out.Flush()
	if cerr := w.gz.Close(); err == nil {
		err = cerr
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
// fetched, and kept uncompressed: a difference reads it twice more (to
// send it, to merge the child's), and gunzip cost each of those reads as
// much as the rest of it. Each checks every line (order, paths) as it
// gives them, and the checksum again.
type FileList struct {
	id    string
	path  string
	Files int64
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
	err = l.fetch(rc, f, epoch)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		l.Remove()
		return nil, fmt.Errorf("%s%s: %w", backend.ReservedPrefix, name, err)
	}
	return l, nil
}

// fetch reads the compressed list from rc into f uncompressed, checking
// its lines as they pass (header, count, checksum: not each line's
// fields, which Each checks as it gives them).
func (l *FileList) fetch(rc io.Reader, f *os.File, epoch string) error {
	compressed := &countingReader{r: io.LimitReader(rc, maxFileList+1)}
	gz, err := gzip.NewReader(bufio.NewReaderSize(compressed, 64<<10))
	if err != nil {
		return err
	}
	gz.Multistream(false)
	plain := &countingReader{r: io.LimitReader(gz, maxPlainFileList+1)}
	out := bufio.NewWriterSize(f, 64<<10)
	l.Files, err = l.scan(io.TeeReader(plain, out), epoch, nil)
	if err == nil {
		err = out.Flush()
	}
	switch {
	case compressed.n > maxFileList:
		return fmt.Errorf("larger than %d bytes", maxFileList)
	case plain.n > maxPlainFileList:
		return fmt.Errorf("larger than %d bytes uncompressed", maxPlainFileList)
	}
	return err
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

// Each gives the list's files in path order, checked again as they are
// read from the local copy; it stops at yield's first error.
func (l *FileList) Each(yield func(catalog.File) error) error {
	f, err := os.Open(l.path)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := l.scan(f, "", yield)
	if err == nil && n != l.Files {
		err = fmt.Errorf("file list of %s: %d files, %d when checked", l.id, n, l.Files)
	}
	return err
}

// Remove removes the local copy.
func (l *FileList) Remove() {
	if l != nil {
		os.Remove(l.path)
	}
}

// errListEnd is a list that ends before its end line.
var errListEnd = errors.New("the list ends before its end line: cut short")

// scan reads a list, uncompressed, from r: its header (of epoch, where
// not empty), its files (each parsed, checked and given to yield, where
// yield is not nil; only counted where it is nil), its end line, and
// nothing after.
func (l *FileList) scan(r io.Reader, epoch string, yield func(catalog.File) error) (int64, error) {
	in := bufio.NewReaderSize(r, maxListLine+1)
	sum := sha256.New()
	line := func() ([]byte, error) {
		b, err := in.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return nil, fmt.Errorf("a line longer than %d bytes", maxListLine)
		case errors.Is(err, io.EOF):
			return nil, errListEnd
		case err != nil:
			return nil, err
		}
		return b, nil
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
	var n int64
	var prev string
	for {
		b, err := line()
		if err != nil {
			return n, err
		}
		if rest, ok := bytes.CutPrefix(b, []byte("end\t")); ok {
			count, hexSum, _ := strings.Cut(strings.TrimSuffix(string(rest), "\n"), "\t")
			if count != strconv.FormatInt(n, 10) || hexSum != hex.EncodeToString(sum.Sum(nil)) {
				return n, fmt.Errorf("its end line says %s; %d files came, of SHA-256 %x: damaged", catalog.Excerpt(string(rest)), n, sum.Sum(nil))
			}
			break
		}
		sum.Write(b)
		if yield == nil {
			n++
			continue
		}
		file, err := parseListLine(string(b[:len(b)-1]))
		if err != nil {
			return n, fmt.Errorf("line %d: %w", n+2, err)
		}
		if n > 0 && file.Path <= prev {
			return n, fmt.Errorf("line %d: %s after %s, not in path order", n+2, catalog.Excerpt(file.Path), catalog.Excerpt(prev))
		}
		n++
		prev = file.Path
		if err := yield(file); err != nil {
			return n, err
		}
	}
	if _, err := in.ReadByte(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("bytes after its end line")
		}
		return n, err
	}
	return n, nil
}

// parseListLine reads a file's line: quoted path, size, footer, flags.
func parseListLine(text string) (catalog.File, error) {
	// Cut, not Split: no slice of fields made for each of a list's
	// lines.
	var fields [4]string
	rest := text
	for i := range fields[:3] {
		var ok bool
		if fields[i], rest, ok = strings.Cut(rest, "\t"); !ok {
			return catalog.File{}, fmt.Errorf("%d fields, not 4", i+1)
		}
	}
	if strings.Contains(rest, "\t") {
		return catalog.File{}, fmt.Errorf("%d fields, not 4", 4+strings.Count(rest, "\t"))
	}
	fields[3] = rest
	path, err := strconv.Unquote(fields[0])
	if err != nil {
		return catalog.File{}, fmt.Errorf("path %s: %w", catalog.Excerpt(fields[0]), err)
	}
	size, err1 := strconv.ParseInt(fields[1], 10, 64)
	footer, err2 := strconv.ParseInt(fields[2], 10, 64)
	flags, err3 := strconv.Atoi(fields[3])
	if err := errors.Join(err1, err2, err3); err != nil || flags < 0 || flags > 3 {
		return catalog.File{}, fmt.Errorf("file %s: %s", catalog.Excerpt(path), catalog.Excerpt(text))
	}
	f := catalog.File{Path: path, Size: size, Footer: footer, Delete: flags&1 != 0, Puffin: flags&2 != 0}
	return f, checkListFile(f)
}

// checkListFile checks a file as a read checks one it gives the mirror.
func checkListFile(f catalog.File) error {
	switch {
	case len(f.Path) > catalog.MaxPathBytes || backend.CheckName(f.Path) != nil:
		return fmt.Errorf("file %s: not a clean relative path of at most %d bytes", catalog.Excerpt(f.Path), catalog.MaxPathBytes)
	case f.Size < -1 || f.Footer < -1:
		return fmt.Errorf("file %s of size %d, footer %d", catalog.Excerpt(f.Path), f.Size, f.Footer)
	}
	return nil
}
