package sync

import (
	"context"
	"errors"
	"strings"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// readSettings reads and checks the upstream's fdl.json.
func (e *engine) readSettings(ctx context.Context) error {
	raw, err := backend.ReadAll(ctx, e.src, repo.SettingsFile, repo.MaxSmallFile)
	if err != nil {
		return fatalf("source %s: %s: %w", e.src.Location(), repo.SettingsFile, err)
	}
	s, err := repo.ParseSettings(raw)
	if err != nil {
		return fatalf("source %s: %w", e.src.Location(), err)
	}
	e.settings = s
	if e.opts.Trust != nil {
		if w := e.opts.Trust.CompareRepoSigners(s.Signers); w != "" {
			e.log.Warn("repository signers differ from the trusted signers", zap.String("detail", w))
		}
	}

	return nil
}

// sameRepository refuses a sink whose fdl.json is another repository's.
func (e *engine) sameRepository(have []byte) error {
	mine, err := repo.ParseSettings(have)
	if err != nil {
		return fatalf("sink %s: existing %w", e.dst.Location(), err)
	}
	if mine.ID != e.settings.ID {
		return fatalf("sink %s holds another repository: its %s has id %q, upstream's is %q; refusing to mix them",
			e.dst.Location(), repo.SettingsFile, mine.ID, e.settings.ID)
	}
	if mine.DataDir != e.settings.DataDir {
		return fatalf("sink %s: %s has data_dir %q, upstream's is %q", e.dst.Location(), repo.SettingsFile, mine.DataDir, e.settings.DataDir)
	}
	return nil
}

// ensureSinkSettings creates the sink's fdl.json, with upstream's bytes,
// only where it has none (If-None-Match: *); an existing one is kept.
func (e *engine) ensureSinkSettings(ctx context.Context, have []byte) error {
	raw := e.settings.Raw
	if have != nil {
		if string(have) != string(raw) {
			// fdl.json is created once and kept: a changed upstream copy
			// is reported, not copied over.
			e.log.Warn("upstream fdl.json differs from the mirror's; the mirror keeps the one it was created with",
				zap.String("sink", e.dst.Location()))
		}
		return nil
	}
	if e.opts.DryRun {
		e.plan(repo.SettingsFile)
		return nil
	}
	err := e.dst.Create(ctx, repo.SettingsFile, strings.NewReader(string(raw)), int64(len(raw)))
	if errors.Is(err, backend.ErrExist) {
		// Made between our read and our create (or by our own create
		// whose answer was lost and retried): judge what is there.
		have, err := e.readOptional(ctx, repo.SettingsFile, repo.MaxSmallFile)
		if err != nil {
			return err
		}
		if have == nil {
			return fatalf("sink %s: %s exists and then does not", e.dst.Location(), repo.SettingsFile)
		}
		return e.sameRepository(have)
	}
	if err != nil {
		return fatalf("sink %s: creating %s: %w", e.dst.Location(), repo.SettingsFile, err)
	}
	return nil
}
