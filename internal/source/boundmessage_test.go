package source

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// A refusal's message carries upstream text: bytes that are not UTF-8
// and control characters (a terminal's escape sequences) are escaped,
// and a long one is cut to repo.MaxMessage bytes, saying how much was left.
func TestRefusalMessagesAreEscapedAndBounded(t *testing.T) {
	r := Refuse(ReasonCatalog, "v1", "f", "path %s", "a\xffb\x1b[31mred\nline")
	if want := `path a\xffb\x1b[31mred\nline`; r.Message != want {
		t.Errorf("message %q, want %q", r.Message, want)
	}
	long := Refuse(ReasonCatalog, "v1", "f", "path %s", strings.Repeat("é", 100_000))
	if len(long.Message) > repo.MaxMessage || !utf8.ValidString(long.Message) || !strings.Contains(long.Message, "bytes more)") {
		t.Errorf("a 200 KB message became %d bytes (valid UTF-8: %v): %.80s…", len(long.Message), utf8.ValidString(long.Message), long.Message)
	}
	if ok := Refuse(ReasonCatalog, "v1", "f", "plain message"); ok.Message != "plain message" {
		t.Errorf("a plain message changed: %q", ok.Message)
	}
}
