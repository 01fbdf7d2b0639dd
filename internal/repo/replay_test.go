package repo

import (
	"errors"
	"strings"
	"testing"
)

// A record's "id", where it has one, must be its folder's name: a signed
// record copied under another version ID is a replay (issue 10).
func TestParseRecordRefusesAnotherVersionsID(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	if _, err := ParseRecord("v2", []byte(`{"id": "v2", "parents": [], "sha256": "`+sum+`"}`)); err != nil {
		t.Fatalf("matching id: %v", err)
	}
	if _, err := ParseRecord("v2", []byte(`{"parents": [], "sha256": "`+sum+`"}`)); err != nil {
		t.Fatalf("no id: %v", err)
	}
	_, err := ParseRecord("v2", []byte(`{"id": "v1", "parents": [], "sha256": "`+sum+`"}`))
	if !errors.Is(err, ErrReplay) || !strings.Contains(err.Error(), `"v1"`) || !strings.Contains(err.Error(), "version v2") {
		t.Fatalf("record of v1 under v2: %v, want ErrReplay naming both", err)
	}
}
