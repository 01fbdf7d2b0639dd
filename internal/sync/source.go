package sync

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/lock"
)

// SourceFile (under .fdl-mirror/) records the address a mirror of a
// repository without an id was made from. fdl.json's id is what tells two
// repositories apart; where neither side has one, the address is all
// there is, and without it two repositories would be merged into one
// sink (their versions side by side, main overwritten by the other's).
const SourceFile = "source.json"

// SourceRecord is the content of SourceFile.
type SourceRecord struct {
	// Address is the source's address as location.Clean gives it: no
	// credentials, no query.
	Address  string    `json:"address"`
	Recorded time.Time `json:"recorded"`
}

// ReadSourceRecord reads a mirror's SourceFile; nil when it has none.
func ReadSourceRecord(ctx context.Context, dst backend.Reader) (*SourceRecord, error) {
	raw, err := lock.ReadStateOrSetAside(ctx, dst, SourceFile, repoSmallFile, false, nil)
	if err != nil || raw == nil {
		return nil, err
	}
	var r SourceRecord
	if err := json.Unmarshal(raw, &r); err != nil || r.Address == "" {
		return nil, fmt.Errorf("%s%s: not a source record: %v", backend.ReservedPrefix, SourceFile, err)
	}
	return &r, nil
}

// repoSmallFile bounds the record read back: an address and a time.
const repoSmallFile = 64 << 10

// OtherSourceError is the refusal (inside a FatalError) of a run whose
// source is not the one a mirror without repository ids was made from:
// it names both addresses and how to proceed all the same.
type OtherSourceError struct {
	Sink, Recorded, Source string
}

func (e *OtherSourceError) Error() string {
	return fmt.Sprintf("sink %s was made from %s (recorded in %s%s), not from %s, and neither side's fdl.json has an id to tell "+
		"the repositories apart: refusing to merge two repositories into one sink (if %s is the same repository at a new address, "+
		"run once with --force, config key force, which records the new address)",
		e.Sink, e.Recorded, backend.ReservedPrefix, SourceFile, e.Source, e.Source)
}

// sourceCheck is what the run knows of the recorded source: whether the
// upstream and the sink both lack an id (only then does the address
// count), and what is on record.
type sourceCheck struct {
	applies  bool
	recorded *SourceRecord
	warned   bool // the --force warning was logged
}

// checkSource refuses a sink made from another address when neither
// upstream nor the sink's fdl.json (sinkSettings, nil for a new mirror)
// has an id, unless Options.Force. A run that writes records the address
// later (recordSource).
func (e *engine) checkSource(ctx context.Context, sinkHasSettings bool) error {
	e.source = sourceCheck{warned: e.source.warned}
	if e.settings.ID != "" {
		return nil // the ids are compared (sameRepository)
	}
	e.source.applies = true
	if !sinkHasSettings {
		return nil // a new mirror: this run's source is the first
	}
	rec, err := ReadSourceRecord(ctx, e.dst)
	if err != nil {
		return fatalf("sink %s: %w", e.dst.Location(), err)
	}
	e.source.recorded = rec
	if rec == nil || rec.Address == e.opts.Source {
		return nil
	}
	if e.opts.Force {
		if e.source.warned {
			return nil // said at the first inventory; this is the one after the lock
		}
		e.source.warned = true
		e.log.Warn("source differs from the one the mirror was made from; --force: mirroring it all the same",
			zap.String("recorded", rec.Address), zap.String("source", e.opts.Source))
		return nil
	}
	return &FatalError{&OtherSourceError{Sink: e.dst.Location(), Recorded: rec.Address, Source: e.opts.Source}}
}

// sourceUnrecorded says whether this run has a source address to record.
func (e *engine) sourceUnrecorded() bool {
	return e.source.applies && (e.source.recorded == nil || e.source.recorded.Address != e.opts.Source)
}

// recordSource writes the source's address for the next runs, under the
// lock; a forced run from a new address records that one.
func (e *engine) recordSource(ctx context.Context) error {
	if e.opts.DryRun || !e.sourceUnrecorded() {
		return nil
	}
	raw, err := json.MarshalIndent(SourceRecord{Address: e.opts.Source, Recorded: time.Now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	if err := lock.WriteState(ctx, e.dst, SourceFile, append(raw, '\n')); err != nil {
		return fatalf("sink %s: recording the source in %s%s: %w", e.dst.Location(), backend.ReservedPrefix, SourceFile, err)
	}
	e.source.recorded = &SourceRecord{Address: e.opts.Source}
	return nil
}
