package sync

import (
	"context"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// The source a mirror of a repository without id was made from is on
// record in the sink (sink.SourceFile): where neither side has an id, the
// address is all that tells two repositories apart.

// sourceCheck is what the run knows of the recorded source: whether the
// upstream and the sink both lack an id (only then does the address
// count), and what is on record.
type sourceCheck struct {
	applies  bool
	recorded *sink.SourceRecord
	warned   bool // the --force warning was logged
}

// checkSource refuses a sink made from another address when neither
// upstream nor the sink's fdl.json (sinkSettings, nil for a new mirror)
// has an id, unless Options.Force. A run that writes records the address
// later (recordSource).
func (e *engine) checkSource(ctx context.Context, sinkHasSettings bool) error {
	e.recorded = sourceCheck{warned: e.recorded.warned}
	if e.src.Settings().ID != "" {
		return nil // the ids are compared (sameRepository)
	}
	e.recorded.applies = true
	if !sinkHasSettings {
		return nil // a new mirror: this run's source is the first
	}
	rec, err := e.sink.State().SourceRecord(ctx)
	if err != nil {
		return fatalf("sink %s: %w", e.sink.Location(), err)
	}
	e.recorded.recorded = rec
	if rec == nil || rec.Address == e.opts.Source {
		return nil
	}
	if e.opts.Force {
		if e.recorded.warned {
			return nil // said at the first inventory; this is the one after the lock
		}
		e.recorded.warned = true
		e.log.Warn("source differs from the one the mirror was made from; --force: mirroring it all the same",
			zap.String("recorded", rec.Address), zap.String("source", e.opts.Source))
		return nil
	}
	return &FatalError{&sink.OtherSourceError{Sink: e.sink.Location(), Recorded: rec.Address, Source: e.opts.Source}}
}

// sourceUnrecorded says whether this run has a source address to record.
func (e *engine) sourceUnrecorded() bool {
	return e.recorded.applies && (e.recorded.recorded == nil || e.recorded.recorded.Address != e.opts.Source)
}

// recordSource writes the source's address for the next runs, under the
// lock; a forced run from a new address records that one.
func (e *engine) recordSource(ctx context.Context) error {
	// A dry run's sink plans the write, and writes nothing.
	if !e.sourceUnrecorded() {
		return nil
	}
	if err := e.sink.State().WriteSourceRecord(ctx, e.opts.Source); err != nil {
		return &FatalError{err}
	}
	e.recorded.recorded = &sink.SourceRecord{Address: e.opts.Source}
	return nil
}
