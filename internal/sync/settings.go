package sync

import (
	"context"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// sameRepository refuses a sink whose fdl.json is another repository's.
func (e *engine) sameRepository(have []byte) error {
	mine, err := repo.ParseSettings(have)
	if err != nil {
		return fatalf("sink %s: existing %w", e.sink.Location(), err)
	}
	if err := sink.SameRepository(e.sink.Location(), e.src.Settings(), mine); err != nil {
		return fatalf("%w; refusing to mix them", err)
	}
	return nil
}

// ensureSinkSettings creates the sink's fdl.json, with upstream's bytes,
// only where it has none (If-None-Match: *); an existing one is kept.
func (e *engine) ensureSinkSettings(ctx context.Context, have []byte) error {
	if have != nil {
		if string(have) != string(e.src.Settings().Raw) {
			// fdl.json is created once and kept: a changed upstream copy
			// is reported, not copied over.
			e.log.Warn("upstream fdl.json differs from the mirror's; the mirror keeps the one it was created with",
				zap.String("sink", e.sink.Location()))
		}
		return nil
	}
	// Made between our read and our create (or by our own create whose
	// answer was lost and retried): judge what is there.
	have, err := e.sink.CreateSettings(ctx, e.src.Settings().Raw)
	if err != nil {
		return &FatalError{err}
	}
	if have != nil {
		return e.sameRepository(have)
	}
	return nil
}
