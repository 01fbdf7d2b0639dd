package catalog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The protocol between the mirror and a catalog reader (reader.go,
// child.go). A reader is untrusted once it has opened a catalog: every
// frame it sends is bounded and checked, and a reader that breaks any rule
// has its catalog refused.
//
// A frame is a 4-byte big-endian length n (at most maxFrame) and n bytes:
// a type byte and its fields. Integers are fixed-size big-endian,
// strings a 4-byte length and their bytes (each bounded by the frame).
//
//	reader → mirror  hello    'h' version(1) landlockABI(1) seccomp(1)
//	mirror → reader  request  'r' version(1) name(s) file(s) maxFiles(8) timeoutMs(8) memory(8) threads(4) test(s)
//	reader → mirror  meta     'm' ducklakeVersion(s) dataPath(s) rows(8)
//	reader → mirror  file     'f' path(s) size(8) footer(8) flags(1)    one per file row, as read
//	reader → mirror  end      'e' files(8) bytes(8)
//	reader → mirror  refusal  'x' kind(1) key(s) message(s)             instead of meta, a file or end (kind 2: a difference's list)
//
//	mirror → reader  diff     'd' version(1) name(s) file(s) list(s) parentRows(8) maxFiles(8) timeoutMs(8) memory(8) threads(4) test(s)
//	reader → mirror  diffmeta 'n' ducklakeVersion(s) dataPath(s) childRows(8) parentRows(8) sameRows(8) foldedRows(8) removedRows(8) files(8)
//	                 then file frames (the new files), removed frames, end
//	reader → mirror  removed  'g' entry(8)                              one per entry of the list the child lacks (its place in the list)
//
// A catalog's file rows stream as the reader reads them, each checked as
// it comes (name, size), a path as often as rows repeat it: the reader
// holds none of them, and the mirror sorts them (sort.go). A difference's
// files stream in path order, one per path, checked for order too. A
// refusal may come among the files of either. A diff asks for the files of the child
// catalog (file, in the reader's folder) that are not in the parent's
// list (list, a file of the same folder; see diff.go and listfile.go),
// and the list's entries the child lacks; the reader says how many file rows the child
// has, how many entries the list has, how many of the child's rows are
// in the list or folded into another of the same path (the files that
// come must be the rest), and how many entries are removed (as many
// removed frames come, each an entry's place in the list, in its order).
const (
	protocolVersion = 7
	// maxFrame bounds every frame: the largest is a refusal (its
	// message cut to maxMessage) or a meta frame (its data path at most
	// maxDataPath).
	maxFrame = 16 << 10
	// MaxPathBytes bounds a data file's path as an object store bounds a
	// key (S3, GCS and R2 all stop at 1,024 bytes): a longer one could
	// not be mirrored to one anyway, and is refused before it is joined
	// or copied.
	MaxPathBytes = 1024
	// maxDataPath bounds the stored data_path (PATH_MAX).
	maxDataPath = 4096
	// maxMessage bounds the text of a reader's refusal: DuckDB's and
	// SQLite's messages may quote the catalog.
	maxMessage = 1024

	frameHello    = 'h'
	frameRequest  = 'r'
	frameMeta     = 'm'
	frameFile     = 'f'
	frameEnd      = 'e'
	frameRefusal  = 'x'
	frameDiff     = 'd'
	frameDiffMeta = 'n'
	frameRemoved  = 'g'

	fileDelete = 1 << 0
	filePuffin = 1 << 1

	refusalPlain = 0
	refusalLimit = 1
	refusalList  = 2
)

// errFrame is a frame that breaks the protocol.
var errFrame = errors.New("malformed frame")

// frameWriter builds and writes frames.
type frameWriter struct {
	w   *bufio.Writer
	buf []byte
}

func newFrameWriter(w io.Writer) *frameWriter {
	return &frameWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

func (f *frameWriter) begin(typ byte) { f.buf = append(f.buf[:0], 0, 0, 0, 0, typ) }
func (f *frameWriter) u8(v byte)      { f.buf = append(f.buf, v) }
func (f *frameWriter) u32(v uint32)   { f.buf = binary.BigEndian.AppendUint32(f.buf, v) }
func (f *frameWriter) u64(v uint64)   { f.buf = binary.BigEndian.AppendUint64(f.buf, v) }
func (f *frameWriter) str(s string) {
	f.u32(uint32(len(s)))
	f.buf = append(f.buf, s...)
}

// end writes the frame built since begin; one larger than maxFrame is a
// bug of the writer, refused here rather than by the other end.
func (f *frameWriter) end() error {
	n := len(f.buf) - 4
	if n > maxFrame {
		return fmt.Errorf("a frame of %d bytes, more than %d", n, maxFrame)
	}
	binary.BigEndian.PutUint32(f.buf, uint32(n))
	_, err := f.w.Write(f.buf)
	return err
}

func (f *frameWriter) flush() error { return f.w.Flush() }

// frameReader reads frames, each into the same buffer.
type frameReader struct {
	r   *bufio.Reader
	buf []byte
	pos int
	err error // the first field that did not fit
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next reads the next frame and returns its type.
func (f *frameReader) next() (byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(f.r, head[:]); err != nil {
		return 0, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n == 0 || n > maxFrame {
		return 0, fmt.Errorf("%w: length %d (at most %d)", errFrame, n, maxFrame)
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	f.buf = f.buf[:n]
	if _, err := io.ReadFull(f.r, f.buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	f.pos, f.err = 1, nil
	return f.buf[0], nil
}

func (f *frameReader) take(n int) []byte {
	if f.err != nil || n < 0 || len(f.buf)-f.pos < n {
		if f.err == nil {
			f.err = fmt.Errorf("%w: frame %q ends inside a field", errFrame, f.buf[0])
		}
		return nil
	}
	b := f.buf[f.pos : f.pos+n]
	f.pos += n
	return b
}

func (f *frameReader) u8() byte {
	if b := f.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (f *frameReader) u32() uint32 {
	if b := f.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (f *frameReader) u64() uint64 {
	if b := f.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (f *frameReader) str() string {
	n := f.u32()
	if n > maxFrame {
		f.take(-1)
		return ""
	}
	return string(f.take(int(n)))
}

// done says whether the frame was read whole and exactly: a field short
// or bytes left over break the protocol.
func (f *frameReader) done() error {
	if f.err != nil {
		return f.err
	}
	if f.pos != len(f.buf) {
		return fmt.Errorf("%w: %d bytes after the fields of frame %q", errFrame, len(f.buf)-f.pos, f.buf[0])
	}
	return nil
}

// request is what the mirror asks a reader: one catalog, with its limits.
type request struct {
	// name is the catalog's name in the repository, which refusals carry.
	name string
	// file is the catalog below the reader's root folder; empty when the
	// root is the catalog itself.
	file string
	lim  Limits
	// diff asks for a difference (a diff frame): the files of the
	// catalog (file, of a reader of a folder) not in the parent's list of
	// parentRows entries, list (a file of the same folder).
	diff       bool
	list       string
	parentRows int64
	// test asks a test binary's reader to misbehave (child_test.go); a
	// reader without test behaviours refuses a request that names one.
	test string
}

func writeRequest(w *frameWriter, q request) error {
	if q.diff {
		w.begin(frameDiff)
		w.u8(protocolVersion)
		w.str(q.name)
		w.str(q.file)
		w.str(q.list)
		w.u64(uint64(q.parentRows))
	} else {
		w.begin(frameRequest)
		w.u8(protocolVersion)
		w.str(q.name)
		w.str(q.file)
	}
	w.u64(uint64(q.lim.MaxFiles))
	w.u64(uint64(q.lim.Timeout.Milliseconds()))
	w.u64(uint64(q.lim.MemoryLimit))
	w.u32(uint32(q.lim.Threads))
	w.str(q.test)
	if err := w.end(); err != nil {
		return err
	}
	return w.flush()
}

// writeFile writes a file frame.
func writeFile(out *frameWriter, f File) error {
	out.begin(frameFile)
	out.str(f.Path)
	out.u64(uint64(f.Size))
	out.u64(uint64(f.Footer))
	var flags byte
	if f.Delete {
		flags |= fileDelete
	}
	if f.Puffin {
		flags |= filePuffin
	}
	out.u8(flags)
	return out.end()
}

// checkString bounds a string field of a frame to n bytes of valid UTF-8.
func checkString(what, s string, n int) error {
	if len(s) > n {
		return fmt.Errorf("%w: %s of %d bytes (at most %d)", errFrame, what, len(s), n)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not UTF-8: %s", errFrame, what, Excerpt(s))
	}
	return nil
}

// Excerpt quotes upstream text for a message: at most excerptBytes of it,
// escaped (quotes, control characters and bytes that are not UTF-8), and
// how long it was where it was cut. A refusal names what was wrong with a
// catalog's text without carrying the text: a path of 8 MB would be 8 MB
// on every line that printed it.
func Excerpt(s string) string {
	if len(s) <= excerptBytes {
		return strconv.Quote(s)
	}
	cut := excerptBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// quoteName writes a name the catalog chose (a table's, a column's) as
// it is where it is short and plain, else as an Excerpt.
func quoteName(s string) string {
	if len(s) > 64 {
		return Excerpt(s)
	}
	for _, r := range s {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return Excerpt(s)
		}
	}
	return s
}

// excerptBytes is the most of a piece of upstream text a message quotes.
const excerptBytes = 96

// cleanMessage makes a reader's message fit for the mirror's output: at
// most maxMessage bytes, valid UTF-8, no control characters but tabs. A
// refusal text is the reader's, and through it the catalog's.
func cleanMessage(s string) string {
	if len(s) > maxMessage {
		s = s[:maxMessage] + "…"
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if r == '\t' || r >= 0x20 && r != 0x7f && !(r >= 0x80 && r < 0xa0) {
			return r
		}
		return '\uFFFD'
	}, s)
}
