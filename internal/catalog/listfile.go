package catalog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// A parent's list as a difference's reader reads it (ParentList.Path),
// and as the mirror keeps it (internal/sink): one line per entry, in path
// order, "path\tsize\tfooter\tflags\n", flags 1 for a delete file and 2
// for a puffin file.
//
// The reader reads the file itself, with DuckDB's CSV reader (no quotes,
// no escapes, the columns' types given), so a path is written as it is
// wherever that reads it back unchanged: valid UTF-8, no control
// character, not beginning with '"'. Any other path is written quoted as
// Go quotes it (strconv.Quote), which begins with '"'. The reader never
// unquotes: it compares a quoted entry with no row (a row whose path
// begins with '"' has no key), so such an entry comes out removed and
// the row of its file as new. The rare path that needs quoting costs a
// check at each version, never a wrong match.

// AppendListLine appends f's line to b.
func AppendListLine(b []byte, f File) []byte {
	if plainListPath(f.Path) {
		b = append(b, f.Path...)
	} else {
		b = strconv.AppendQuote(b, f.Path)
	}
	b = append(b, '\t')
	b = strconv.AppendInt(b, f.Size, 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, f.Footer, 10)
	return append(b, '\t', byte('0'+listFlags(f)), '\n')
}

// plainListPath says whether a path is written as it is.
func plainListPath(p string) bool {
	if p == "" || p[0] == '"' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return utf8.ValidString(p)
}

func listFlags(f File) int {
	flags := 0
	if f.Delete {
		flags |= fileDelete
	}
	if f.Puffin {
		flags |= filePuffin
	}
	return flags
}

// ParseListLine reads an entry's line (without its newline), and checks
// the file as a read checks one it gives the mirror.
func ParseListLine(text string) (File, error) {
	// Cut, not Split: no slice of fields made for each of a list's
	// lines.
	var fields [4]string
	rest := text
	for i := range fields[:3] {
		var ok bool
		if fields[i], rest, ok = strings.Cut(rest, "\t"); !ok {
			return File{}, fmt.Errorf("%d fields, not 4", i+1)
		}
	}
	if strings.Contains(rest, "\t") {
		return File{}, fmt.Errorf("%d fields, not 4", 4+strings.Count(rest, "\t"))
	}
	fields[3] = rest
	path := fields[0]
	if strings.HasPrefix(path, `"`) {
		var err error
		if path, err = strconv.Unquote(fields[0]); err != nil {
			return File{}, fmt.Errorf("path %s: %w", Excerpt(fields[0]), err)
		}
	} else if !plainListPath(path) {
		return File{}, fmt.Errorf("path %s: neither plain nor quoted", Excerpt(path))
	}
	size, err1 := strconv.ParseInt(fields[1], 10, 64)
	footer, err2 := strconv.ParseInt(fields[2], 10, 64)
	flags, err3 := strconv.Atoi(fields[3])
	if err := errors.Join(err1, err2, err3); err != nil || flags < 0 || flags > fileDelete|filePuffin {
		return File{}, fmt.Errorf("file %s: %s", Excerpt(path), Excerpt(text))
	}
	f := File{Path: path, Size: size, Footer: footer, Delete: flags&fileDelete != 0, Puffin: flags&filePuffin != 0}
	return f, CheckListFile(f)
}

// CheckListFile checks a list's file as a read checks one it gives the
// mirror.
func CheckListFile(f File) error {
	switch {
	case len(f.Path) > MaxPathBytes || backend.CheckName(f.Path) != nil:
		return fmt.Errorf("file %s: not a clean relative path of at most %d bytes", Excerpt(f.Path), MaxPathBytes)
	case f.Size < -1 || f.Footer < -1:
		return fmt.Errorf("file %s of size %d, footer %d", Excerpt(f.Path), f.Size, f.Footer)
	}
	return nil
}
