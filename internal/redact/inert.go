package redact

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Inert returns s with every character that could act on a terminal
// escaped, as Go escapes them in a quoted string: C0 controls (ESC, CR, LF,
// BEL, ...), DEL, C1 controls, the Unicode direction overrides that make
// text read other than it is stored, and bytes that are not UTF-8. It is
// for upstream text (an HTTP status line, a message, a name) printed for a
// person: a status line "403 Forbidden\x1b[2J" must not clear the screen,
// set the window title or start a fake line of output. JSON output needs no
// such care: encoding/json escapes the controls itself.
func Inert(s string) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if active(r, n) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && active(r, n):
			fmt.Fprintf(&b, `\x%02x`, r)
		case active(r, n):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// active reports whether a rune (n bytes long) is one Inert escapes.
func active(r rune, n int) bool {
	switch {
	case r == utf8.RuneError && n == 1:
		return true
	case r < 0x20, r == 0x7f, 0x80 <= r && r < 0xa0:
		return true
	case 0x202a <= r && r <= 0x202e, 0x2066 <= r && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}
