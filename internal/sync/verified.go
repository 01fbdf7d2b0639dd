package sync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/lock"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// PendingFile is the mirror's list of versions it could not mirror yet,
// under .fdl-mirror/ (readers never look there).
const PendingFile = "pending.json"

// maxPendingFile bounds the state file read back: maxPendingVersions
// entries of messages bounded by boundMessage, with room to spare.
const maxPendingFile = 4 << 20

// maxPendingVersions caps the versions the list keeps; the rest are
// counted (pendingFile.More). An upstream can make any number of
// ancestors fail; the list is for a person to read, and a version left
// out is found again while a ref still leads to it.
const maxPendingVersions = 1000

// pendingFile is PendingFile's content. An earlier release wrote the
// bare list.
type pendingFile struct {
	Versions []PendingVersion `json:"versions"`
	More     int              `json:"more,omitempty"` // versions left out
}

// parsePending reads PendingFile, bounded: at most maxPendingVersions
// versions (the rest counted in more), each message bounded.
func parsePending(raw []byte) (list []PendingVersion, more int, err error) {
	var f pendingFile
	if len(bytes.TrimSpace(raw)) > 0 && bytes.TrimSpace(raw)[0] == '[' {
		err = json.Unmarshal(raw, &f.Versions)
	} else {
		err = json.Unmarshal(raw, &f)
	}
	if err != nil {
		return nil, 0, err
	}
	for _, p := range f.Versions {
		if repo.CheckVersionID(p.Version) != nil {
			continue
		}
		if len(list) == maxPendingVersions {
			more++
			continue
		}
		p.Reason, p.Message = boundMessage(p.Reason, 64), boundMessage(p.Message, maxMessage)
		list = append(list, p)
	}
	return list, more + f.More, nil
}

// PendingVersion is an ancestor a run refused: a later run finds nothing
// to walk below the complete child, so the mirror remembers it and every
// run tries it again until it is mirrored or upstream no longer has it.
type PendingVersion struct {
	Version string    `json:"version"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"` // first refused
}

// loadPending reads the mirror's pending versions.
func (e *engine) loadPending(ctx context.Context) error {
	e.pending = map[string]PendingVersion{}
	raw, err := lock.ReadStateOrSetAside(ctx, e.dst, PendingFile, maxPendingFile, !e.opts.DryRun, e.log)
	if err != nil {
		return fatalf("sink %s: %s%s: %w", e.dst.Location(), backend.ReservedPrefix, PendingFile, err)
	}
	if raw == nil {
		return nil
	}
	list, _, err := parsePending(raw)
	if err != nil {
		// The mirror's own file, damaged: start again rather than stop
		// every run. What was pending is found again only where a ref
		// still leads to it through an incomplete version.
		e.log.Warn("the mirror's list of pending versions is unreadable; starting a new one",
			zap.String("file", backend.ReservedPrefix+PendingFile), zap.Error(err))
		return nil
	}
	for _, p := range list {
		e.pending[p.Version] = p
	}
	return nil
}

// savePending writes what is pending after this run: the versions
// pending before and the ancestors refused now, less those published and
// those upstream no longer has. Roots are not kept: their refs lead to
// them at every run.
func (e *engine) savePending(ctx context.Context, roots map[string]bool) {
	now := time.Now().UTC()
	next := map[string]PendingVersion{}
	e.mu.Lock()
	for id, p := range e.pending {
		if !e.published[id] && !e.absent[id] {
			next[id] = p
		}
	}
	for id, r := range e.refused {
		if roots[id] || e.published[id] {
			continue
		}
		p, ok := next[id]
		if !ok {
			p = PendingVersion{Version: id, Since: now}
		}
		p.Reason, p.Message = r.Reason, r.Message
		next[id] = p
	}
	e.mu.Unlock()
	list := make([]PendingVersion, 0, len(next))
	for _, p := range next {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Version < list[j].Version })
	more := max(0, len(list)-maxPendingVersions)
	list = list[:len(list)-more]
	e.report.Pending, e.report.PendingMore = list, more
	if e.opts.DryRun || (len(list) == 0 && len(e.pending) == 0) {
		return
	}
	raw, _ := json.MarshalIndent(pendingFile{Versions: list, More: more}, "", "  ")
	if err := lock.WriteState(ctx, e.dst, PendingFile, append(raw, '\n')); err != nil {
		e.addRefusal(refuse(ReasonCopy, "", backend.ReservedPrefix+PendingFile, "writing the list of pending versions: %v", err))
	}
}

// checkRefTarget applies the run's policy to a version complete in the
// sink before a ref moves to it: it may have been mirrored under another
// policy (signatures optional, a key since removed). Its record and
// signature are read from the sink, once per version and run.
func (e *engine) checkRefTarget(ctx context.Context, id string) *refusal {
	e.mu.Lock()
	now := e.publishedNow[id]
	r, seen := e.targetChecks[id]
	e.mu.Unlock()
	if now || seen {
		return r // published by this run: checked as it was copied
	}
	r = e.judgeSinkVersion(ctx, id)
	e.mu.Lock()
	e.targetChecks[id] = r
	e.mu.Unlock()
	return r
}

func (e *engine) judgeSinkVersion(ctx context.Context, id string) *refusal {
	recordName := repo.VersionFile(id, repo.RecordFile)
	raw, err := backend.ReadAll(ctx, e.dst, recordName, repo.MaxRecordFile)
	if err != nil {
		return refuse(ReasonRecord, id, recordName, "version %s: reading the mirror's %s: %v", id, recordName, err)
	}
	if _, err := repo.ParseRecord(id, raw); err != nil {
		return recordRefusal(id, err)
	}
	if e.opts.Trust == nil {
		return nil
	}
	sigName := repo.VersionFile(id, repo.SignatureFile)
	sig, err := backend.ReadAll(ctx, e.dst, sigName, repo.MaxSmallFile)
	if backend.IsNotExist(err) {
		sig, err = nil, nil
	}
	if err != nil {
		return refuse(ReasonSignature, id, sigName, "version %s: reading the mirror's %s: %v", id, sigName, err)
	}
	if err := e.opts.Trust.CheckVersion(id, raw, sig); err != nil {
		return refuse(ReasonSignature, id, sigName, "%v", err)
	}
	return nil
}

// recordRefusal is the refusal of a record that does not parse: a replay
// where its "id" names another version.
func recordRefusal(id string, err error) *refusal {
	name := repo.VersionFile(id, repo.RecordFile)
	if errors.Is(err, repo.ErrReplay) {
		return refuse(ReasonReplay, id, name, "%v", err)
	}
	return refuse(ReasonRecord, id, name, "%v", err)
}

// confirmInSink says whether the sink holds a data file at size, without a
// request per file on an object store: a local sink is asked (a stat is a
// system call), an object store's data_dir is listed once per run.
func (e *engine) confirmInSink(ctx context.Context, name string, size int64) bool {
	lookup := e.sinkDataFile
	if _, ok := backend.Innermost(e.dst).(interface{ Dir() string }); ok {
		lookup = e.statSinkFile
	}
	have, ok, err := lookup(ctx, name)
	return err == nil && ok && (size < 0 || have == size)
}

// repair re-checks every version complete in the sink against the sink's
// data_dir listing and copies back from upstream the data files missing
// or of another size than the version's catalog records (sync --repair).
// A copy is made only from an upstream file of the recorded size.
func (e *engine) repair(ctx context.Context) {
	var ids []string
	for id := range e.published {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	done := map[string]bool{}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		// Every catalog of the version: an alternate one's files are
		// needed by its readers as much as the main one's.
		have := e.dstVersions[id]
		var files []catalog.File
		for _, file := range append([]string{repo.MainCatalog(have)}, repo.AlternateCatalogs(have)...) {
			cat, err := e.readSinkFile(ctx, id, file)
			if err != nil {
				e.addRefusal(refuse(ReasonCatalog, id, repo.VersionFile(id, file), "repair: version %s: the mirror's catalog %s: %v", id, repo.VersionFile(id, file), err))
				continue
			}
			files = append(files, cat.Files...)
		}
		for _, f := range files {
			name := e.settings.DataDir + f.Path
			if done[name] {
				continue
			}
			done[name] = true
			have, ok, err := e.sinkDataFile(ctx, name)
			if err != nil {
				e.addRefusal(refuse(ReasonCopy, id, name, "repair: %v", err))
				return
			}
			if ok && (f.Size < 0 || have == f.Size) {
				continue
			}
			if err := e.copyFile(ctx, name, f.Size); err != nil {
				e.addRefusal(refuse(ReasonCopy, id, name, "repair: version %s: data file %s: %v", id, name, err))
				continue
			}
			what := "missing"
			if ok {
				what = fmt.Sprintf("%d bytes, %d recorded", have, f.Size)
			}
			e.log.Info("repaired", zap.String("version", id), zap.String("file", name), zap.String("was", what))
			e.mu.Lock()
			e.report.Repaired = append(e.report.Repaired, name)
			e.mu.Unlock()
		}
	}
}

// sinkCatalogIs says whether the catalog an interrupted run left in a
// version's folder (name) has the record's sha256: its size proves nothing.
func (e *engine) sinkCatalogIs(ctx context.Context, name, sha256 string) bool {
	fetched, err := catalog.Fetch(ctx, e.dst, name, e.opts.TempDir, e.opts.CatalogLimits.MaxSize)
	if err != nil {
		return false
	}
	defer fetched.Remove()
	return fetched.SHA256 == sha256
}

// ReadPending reads the versions a mirror has kept to retry (see
// PendingVersion) from its sink, at most maxPendingVersions, and how
// many more it counts; none when there are none. An unusable file is
// logged and read as none (the next sync sets it aside).
func ReadPending(ctx context.Context, dst backend.Reader, log *zap.Logger) ([]PendingVersion, int, error) {
	raw, err := lock.ReadStateOrSetAside(ctx, dst, PendingFile, maxPendingFile, false, log)
	if err != nil || raw == nil {
		return nil, 0, err
	}
	list, more, err := parsePending(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("mirror %s: %s%s: %w", dst.Location(), backend.ReservedPrefix, PendingFile, err)
	}
	return list, more, nil
}

// checkLock confirms the run still holds the mirror's lock (see
// Options.CheckLock).
func (e *engine) checkLock(ctx context.Context) error {
	if e.lockLost.Load() {
		return fatalf("sink %s: lost the mirror's lock to another run", e.dst.Location())
	}
	if !e.locked.Load() || e.opts.CheckLock == nil {
		return nil
	}
	if err := e.opts.CheckLock(ctx); err != nil {
		e.lockLost.Store(true)
		return fatalf("sink %s: %v", e.dst.Location(), err)
	}
	return nil
}
