package verify

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
)

// Magic numbers at both ends of the data files a DuckLake catalog lists.
var (
	parquetMagic = []byte("PAR1")
	puffinMagic  = []byte("PFA1")
)

// deep checks one data file's ends. A Parquet file starts and ends with
// PAR1, and the 4 bytes before its closing magic are the length of its
// footer, which the catalog records as footer_size (where it does); a
// puffin file starts and ends with PFA1. A file zero-filled by a power cut,
// or with a footer overwritten, has the right size and fails here. A file
// too short for its magic is damaged too.
func (c *checker) deep(ctx context.Context, id, name string, f catalog.File, via string) {
	bad := func(format string, args ...any) {
		c.add(Problem{Version: id, File: name, Message: fmt.Sprintf("version %s: data file %s is damaged: "+format, append([]any{id, name}, args...)...) + via})
	}
	magic, kind := parquetMagic, "Parquet"
	if f.Puffin {
		magic, kind = puffinMagic, "puffin"
	}
	head, tail, size, err := c.src.Whole().Ends(ctx, name, 4, 8)
	if err != nil {
		c.add(Problem{Version: id, File: name, Message: fmt.Sprintf("version %s: data file %s: reading its ends: %v%s", id, name, err, via)})
		return
	}
	if size < 8 {
		bad("%d bytes, too short for a %s file", size, kind)
		return
	}
	if !bytes.Equal(head, magic) {
		bad("it does not start with %s's magic %q (found %q)", kind, magic, head)
		return
	}
	if !bytes.Equal(tail[4:], magic) {
		bad("it does not end with %s's magic %q (found %q)", kind, magic, tail[4:])
		return
	}
	if f.Puffin {
		return
	}
	footer := int64(binary.LittleEndian.Uint32(tail[:4]))
	if footer > size-12 {
		bad("its footer length %d does not fit in its %d bytes", footer, size)
		return
	}
	if f.Footer >= 0 && footer != f.Footer {
		bad("its footer is %d bytes, the catalog records footer_size %d", footer, f.Footer)
	}
}
