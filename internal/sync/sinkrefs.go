package sync

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/lock"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// RefsMovingFile (under .fdl-mirror/) is there while stage two moves refs:
// written before the first ref file, removed once refs.json says what the
// ref files hold. Where it is absent, refs.json is what the mirror's ref
// files hold, and a run takes their values from it instead of reading
// 20,000 ref files one request each; where it is present, a run stopped
// between a ref file and refs.json, and every ref file is read.
const RefsMovingFile = "refs-moving"

// readSinkRefs lists the mirror's ref files, reads refs.json and the
// ref files whose values it cannot take from refs.json: those refs.json
// does not name, those whose listed size (or MD5, where the store lists
// one) is not that of the value refs.json gives, and all of them while
// RefsMovingFile says a run stopped mid-move.
func (e *engine) readSinkRefs(ctx context.Context, inv *inventory) error {
	files, err := repo.ListRefFiles(ctx, e.dst)
	if err != nil {
		return fatalf("sink %s: reading refs: %w", e.dst.Location(), err)
	}
	// refs.json is read up to a size the listed refs call for: the
	// mirror wrote it from those refs.
	for _, fi := range files {
		if fi.Version != "" {
			inv.versions[fi.Name] = fi.Version
		}
	}
	if inv.refsJSON, err = e.readVersioned(ctx, inv, repo.RefsFile, repo.RefsJSONLimitListed(files)); err != nil {
		return err
	}
	marker, err := lock.ReadState(ctx, e.dst, RefsMovingFile, repo.MaxSmallFile)
	var unusable *lock.UnusableStateError
	if errors.As(err, &unusable) {
		// Whatever it holds, it says a run may have stopped mid-move:
		// every ref file is read, and the next move writes it anew.
		e.log.Warn("the mirror's marker of a move of refs is unusable; reading every ref file",
			zap.String("file", backend.ReservedPrefix+RefsMovingFile), zap.Error(err))
		if !e.opts.DryRun {
			if aside, serr := lock.SetAside(ctx, e.dst, RefsMovingFile); serr == nil {
				e.log.Warn("the unusable state file is set aside", zap.String("file", backend.ReservedPrefix+RefsMovingFile), zap.String("set_aside_as", backend.ReservedPrefix+aside))
			}
		}
		marker, err = []byte{}, nil
	}
	if err != nil {
		return fatalf("sink %s: %s%s: %w", e.dst.Location(), backend.ReservedPrefix, RefsMovingFile, err)
	}
	inv.refsMoving = marker != nil
	var fromJSON repo.Refs
	if inv.refsJSON != nil && !inv.refsMoving {
		fromJSON, _, _ = repo.ParseRefsJSON(inv.refsJSON) // unparsable: read every file
	}
	if inv.refsMoving {
		e.log.Info("an earlier run stopped while moving refs; reading every ref file of the mirror")
	}
	known := func(fi backend.FileInfo) (string, bool) {
		id, ok := fromJSON[fi.Name]
		if !ok || fi.Size != int64(len(repo.RefFileContent(id))) {
			return "", false
		}
		if fi.MD5 != "" && !repo.ListingHolds(fi, id) {
			return "", false
		}
		return id, true
	}
	if inv.refs, _, err = repo.ReadRefFiles(ctx, e.dst, files, known); err != nil {
		return fatalf("sink %s: reading refs: %w", e.dst.Location(), err)
	}
	return nil
}

// startMovingRefs writes RefsMovingFile before the first ref file moves.
func (e *engine) startMovingRefs(ctx context.Context, inv *inventory) error {
	if e.opts.DryRun || inv.refsMoving {
		return nil
	}
	stamp := []byte(`{"started":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}` + "\n")
	if err := lock.WriteState(ctx, e.dst, RefsMovingFile, stamp); err != nil {
		return err
	}
	inv.refsMoving = true
	return nil
}

// doneMovingRefs removes RefsMovingFile once refs.json says what every ref
// file holds: not after a ref file or refs.json failed to be written.
func (e *engine) doneMovingRefs(ctx context.Context, inv *inventory) {
	if e.opts.DryRun || !inv.refsMoving {
		return
	}
	if err := lock.RemoveState(ctx, e.dst, RefsMovingFile); err != nil {
		e.log.Warn("removing the mirror's refs-moving marker; the next run reads every ref file",
			zap.String("file", backend.ReservedPrefix+RefsMovingFile), zap.Error(err))
		return
	}
	inv.refsMoving = false
}
