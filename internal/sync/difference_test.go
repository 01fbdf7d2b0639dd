package sync

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
)

// A difference that fails for its list, its kind of catalog, or the
// memory the list and the child's rows need together leaves the version
// to a whole read; any other refusal of the child, a limit of its own
// included, is the version's.
func TestWhichFailedDifferencesAreReadWhole(t *testing.T) {
	for _, tc := range []struct {
		err   error
		whole bool
	}{
		{fmt.Errorf("catalog x: %w: short", catalog.ErrParentList), true},
		{fmt.Errorf("catalog x: %w", catalog.ErrNoDifference), true},
		{fmt.Errorf("reading: %w", &catalog.LimitError{Catalog: "x", Key: catalog.KeyMemoryLimit, Detail: "comparing it"}), true},
		{&catalog.LimitError{Catalog: "x", Key: catalog.KeyTimeout, Detail: "comparing it"}, false},
		{&catalog.LimitError{Catalog: "x", Key: catalog.KeyMaxFiles, Detail: "rows"}, false},
		{errors.New("catalog x: a view, not a base table"), false},
		{nil, false},
	} {
		if got := readWholeInstead(tc.err); got != tc.whole {
			t.Errorf("%v: read whole %v, want %v", tc.err, got, tc.whole)
		}
	}
}
