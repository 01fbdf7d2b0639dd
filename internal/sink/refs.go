package sink

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// RefsMovingFile (under .fdl-mirror/) is there while stage two moves refs:
// written before the first ref file, removed once refs.json says what the
// ref files hold. Where it is absent, refs.json is what the mirror's ref
// files hold, and a run takes their values from it instead of reading
// 20,000 ref files one request each; where it is present, a run stopped
// between a ref file and refs.json, and every ref file is read.
const RefsMovingFile = "refs-moving"

// read lists the mirror's ref files, reads refs.json and the
// ref files whose values it cannot take from refs.json: those refs.json
// does not name, those whose listed size (or MD5, where the store lists
// one) is not that of the value refs.json gives, and all of them while
// RefsMovingFile says a run stopped mid-move.
func (r Refs) read(ctx context.Context, inv *Inventory) error {
	s := r.s
	files, err := repo.ListRefFiles(ctx, s.b)
	if err != nil {
		return s.errorf("reading refs: %w", err)
	}
	for _, fi := range files {
		if fi.Version != "" {
			inv.Tokens[fi.Name] = fi.Version
		}
	}
	// refs.json is read up to a size the listed refs call for: the
	// mirror wrote it from those refs.
	if inv.RefsJSON, err = s.readVersioned(ctx, inv, repo.RefsFile, repo.RefsJSONLimitListed(files)); err != nil {
		return err
	}
	marker, err := lock.ReadState(ctx, s.b, RefsMovingFile, repo.MaxSmallFile)
	var unusable *lock.UnusableStateError
	if errors.As(err, &unusable) {
		// Whatever it holds, it says a run may have stopped mid-move:
		// every ref file is read, and the next move writes it anew.
		s.log.Warn("the mirror's marker of a move of refs is unusable; reading every ref file",
			zap.String("file", backend.ReservedPrefix+RefsMovingFile), zap.Error(err))
		// Not in a dry run: its planned store would drop the move, and
		// the log would say a file was set aside that was not.
		if !s.opts.DryRun {
			if aside, serr := lock.SetAside(ctx, s.b, RefsMovingFile); serr == nil {
				s.log.Warn("the unusable state file is set aside", zap.String("file", backend.ReservedPrefix+RefsMovingFile), zap.String("set_aside_as", backend.ReservedPrefix+aside))
			}
		}
		marker, err = []byte{}, nil
	}
	if err != nil {
		return s.errorf("%s%s: %w", backend.ReservedPrefix, RefsMovingFile, err)
	}
	inv.RefsMoving = marker != nil
	var fromJSON repo.Refs
	if inv.RefsJSON != nil && !inv.RefsMoving {
		fromJSON, _, _ = repo.ParseRefsJSON(inv.RefsJSON) // unparsable: read every file
	}
	if inv.RefsMoving {
		s.log.Info("an earlier run stopped while moving refs; reading every ref file of the mirror")
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
	if inv.Refs, _, err = repo.ReadRefFiles(ctx, s.b, files, known); err != nil {
		return s.errorf("reading refs: %w", err)
	}
	return nil
}

// Refs are the mirror's refs as runs read and move them: read as readers
// find them (Read) or with the inventory (every ref file, or refs.json
// where it says what they hold); written in the mirror's order (Write);
// mended where a run stopped between its ref files and refs.json (Mend);
// and removed by a prune between the same marker's two ends.
type Refs struct{ s *Sink }

// Refs are the mirror's refs.
func (s *Sink) Refs() Refs { return Refs{s} }

// Read reads the refs of the mirror as a reader of it finds them
// (repo.ReadRefs: its ref files, or refs.json where its store cannot
// list): refs that break the rules are left out, with their reasons in
// bad; the error is for refs that cannot be read at all.
func (r Refs) Read(ctx context.Context) (refs repo.Refs, bad []*repo.RefError, err error) {
	return repo.ReadRefs(ctx, r.s.b)
}

// putRead writes a ref file, refs.json or HEAD only if it is still what
// the inventory read (see replace).
func (r Refs) putRead(ctx context.Context, inv *Inventory, name string, b []byte) error {
	return r.s.replace(ctx, name, b, inv.Tokens[name])
}

// Mend is a locked run's first step, before it reads anything else
// of the mirror: where an earlier run stopped between its ref files and
// refs.json (killed, or a run that lost its lock and had its refs.json
// write refused), refs.json is written from the ref files, conditional
// on refs.json as read, and RefsMovingFile removed. Readers that cannot
// list follow refs.json, and a ref file a run wrote is one of a version
// complete in the mirror (Write): mended first, the two never
// disagree for longer than the next run takes to start. Every run that
// writes a ref file writes the marker before it and removes it only once
// refs.json says what the ref files hold, so without the marker there is
// nothing to mend, and this costs one read. It says whether refs.json
// was rewritten; an error wrapping backend.ErrPreconditionFailed means
// another run changed refs.json since: this run lost the lock.
func (r Refs) Mend(ctx context.Context) (bool, error) {
	s := r.s
	if s.opts.DryRun {
		return false, nil
	}
	marker, err := lock.ReadState(ctx, s.b, RefsMovingFile, repo.MaxSmallFile)
	var unusable *lock.UnusableStateError
	switch {
	case errors.As(err, &unusable):
		// read sets it aside and reads every ref file.
	case err != nil:
		return false, s.errorf("%s%s: %w", backend.ReservedPrefix, RefsMovingFile, err)
	case marker == nil:
		return false, nil
	}
	inv := &Inventory{Tokens: map[string]string{}}
	if err := r.read(ctx, inv); err != nil {
		return false, err
	}
	want := repo.RefsJSON(inv.Refs)
	mended := string(inv.RefsJSON) != string(want)
	if mended {
		if err := r.putRead(ctx, inv, repo.RefsFile, want); err != nil {
			return false, s.errorf("mending %s from the ref files: %w", repo.RefsFile, err)
		}
		s.log.Info("an earlier run stopped between its ref files and refs.json; refs.json mended from the ref files",
			zap.Int("refs", len(inv.Refs)))
	}
	r.doneMoving(ctx)
	return mended, nil
}

// RefWrite is a ref file to write, and how its write went.
type RefWrite struct {
	Name, ID string
	Err      error
}

// RefsWritten says how writing the refs went past the ref files.
type RefsWritten struct {
	// Refs are the mirror's ref files after the writes.
	Refs repo.Refs
	// MarkerErr: RefsMovingFile could not be written, so no ref file was.
	MarkerErr error
	// RefsJSONErr, HeadErr: refs.json or HEAD could not be written.
	RefsJSONErr, HeadErr error
	// HeadUnknown: HEAD names a ref the mirror does not have yet; HEAD
	// was not written.
	HeadUnknown bool
}

// Write is stage two in the mirror's order: RefsMovingFile before the
// first ref file moves; the ref files at once (each names a version
// complete in the mirror, so their order among themselves does not
// matter); refs.json from the ref files the mirror then holds; the marker
// removed once refs.json says what every ref file holds; HEAD naming
// head ("" leaves it). inv is the inventory the writes were planned from;
// each write is conditional on the file being as inv read it (putRead).
// Each write's error is in its RefWrite or in RefsWritten; the error
// returned is the context's, when the run was stopped among the ref
// files, or one wrapping backend.ErrPreconditionFailed when the store
// refused a write because another run changed the file since: nothing
// more is written then (neither refs.json nor HEAD from this run's view).
func (r Refs) Write(ctx context.Context, inv *Inventory, writes []*RefWrite, head string) (RefsWritten, error) {
	s := r.s
	out := RefsWritten{Refs: repo.Refs{}}
	for name, id := range inv.Refs {
		out.Refs[name] = id
	}
	moving := inv.RefsMoving
	if len(writes) > 0 {
		if err := r.startMoving(ctx, moving); err != nil {
			out.MarkerErr = err
			writes = nil
		} else {
			moving = true
		}
	}
	// One at a time, a first mirror of 20,000 tags took 40 s on the test
	// gateway.
	width := repo.RefReaders
	if s.opts.DryRun {
		width = 1 // the plan lists them in name order; nothing is written
	}
	var g errgroup.Group
	g.SetLimit(width)
	for _, w := range writes {
		g.Go(func() error {
			w.Err = r.putRead(ctx, inv, w.Name, repo.RefFileContent(w.ID))
			return nil
		})
	}
	g.Wait()
	if err := ctx.Err(); err != nil {
		return out, err
	}
	for _, w := range writes {
		if backend.IsPreconditionFailed(w.Err) {
			return out, w.Err
		}
	}
	refWriteFailed := false // a ref file may hold what refs.json will not say
	for _, w := range writes {
		if w.Err != nil {
			refWriteFailed = true
			continue
		}
		out.Refs[w.Name] = w.ID
	}
	want := repo.RefsJSON(out.Refs)
	if string(inv.RefsJSON) != string(want) {
		out.RefsJSONErr = r.putRead(ctx, inv, repo.RefsFile, want)
		if backend.IsPreconditionFailed(out.RefsJSONErr) {
			return out, out.RefsJSONErr
		}
	}
	if out.RefsJSONErr == nil && !refWriteFailed && moving {
		r.doneMoving(ctx)
	}
	if head == "" {
		return out, nil
	}
	if _, ok := out.Refs[head]; !ok {
		out.HeadUnknown = true
		return out, nil
	}
	if content := []byte("ref: " + head + "\n"); string(inv.Head) != string(content) {
		out.HeadErr = r.putRead(ctx, inv, repo.HeadFile, content)
		if backend.IsPreconditionFailed(out.HeadErr) {
			return out, out.HeadErr
		}
	}
	return out, nil
}

// StartRemoving and DoneRemoving bracket a prune's removal of
// refs: refs.json first, then the ref files. A prune stopped between the
// two leaves the marker, so the next run's first step (Mend) makes
// refs.json say what the ref files still hold, as after a sync stopped
// among its refs.
func (r Refs) StartRemoving(ctx context.Context) error {
	return r.startMoving(ctx, false)
}

// DoneRemoving: see StartRemoving.
func (r Refs) DoneRemoving(ctx context.Context) { r.doneMoving(ctx) }

// startMoving writes RefsMovingFile before the first ref file moves
// (in a dry run, the planned store drops it, as every write).
func (r Refs) startMoving(ctx context.Context, moving bool) error {
	s := r.s
	if moving {
		return nil
	}
	stamp := []byte(`{"started":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}` + "\n")
	return lock.WriteState(ctx, s.b, RefsMovingFile, stamp)
}

// doneMoving removes RefsMovingFile once refs.json says what every ref
// file holds: not after a ref file or refs.json failed to be written.
func (r Refs) doneMoving(ctx context.Context) {
	s := r.s
	if err := lock.RemoveState(ctx, s.b, RefsMovingFile); err != nil {
		s.log.Warn("removing the mirror's refs-moving marker; the next run reads every ref file",
			zap.String("file", backend.ReservedPrefix+RefsMovingFile), zap.Error(err))
	}
}
