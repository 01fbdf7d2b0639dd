package repo

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxMessage bounds a refusal's message: upstream text (a table path, a
// record's field) can be megabytes, and a message is kept in the
// mirror's state, the report, the daemon's status page and logs.
const MaxMessage = 1024

// BoundText makes s fit for a message: bytes that are not UTF-8 and
// control characters escaped (\xNN, \n), then cut to at most max bytes,
// saying how much was left out.
func BoundText(s string, max int) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			clean = false
			break
		}
	}
	if clean && len(s) <= max {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if b.Len() >= max-40 {
			fmt.Fprintf(&b, "… (%d bytes more)", len(s)-i)
			break
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r < 0x20 || r == 0x7f:
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
