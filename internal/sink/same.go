package sink

import (
	"fmt"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// SameRepository refuses a mirror (whose fdl.json is mine) that holds
// another repository than the upstream's (up): another id, or another
// data_dir. A sync would mix the two; a prune would take every ref of it
// for withdrawn. The caller says what it did not do.
func SameRepository(location string, up, mine *repo.Settings) error {
	if mine.ID != up.ID {
		return fmt.Errorf("sink %s holds another repository: its %s has id %q, upstream's is %q",
			location, repo.SettingsFile, mine.ID, up.ID)
	}
	if mine.DataDir != up.DataDir {
		return fmt.Errorf("sink %s: %s has data_dir %q, upstream's is %q", location, repo.SettingsFile, mine.DataDir, up.DataDir)
	}
	return nil
}

// OtherSourceError is the refusal of a run whose source is not the one a
// mirror without repository ids was made from (see SourceFile): it names
// both addresses and how to proceed all the same.
type OtherSourceError struct {
	Sink, Recorded, Source string
}

func (e *OtherSourceError) Error() string {
	return fmt.Sprintf("sink %s was made from %s (recorded in %s%s), not from %s, and neither side's fdl.json has an id to tell "+
		"the repositories apart: refusing to merge two repositories into one sink (if %s is the same repository at a new address, "+
		"run once with --force, config key force, which records the new address)",
		e.Sink, e.Recorded, backend.ReservedPrefix, SourceFile, e.Source, e.Source)
}
