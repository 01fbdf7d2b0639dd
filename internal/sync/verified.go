package sync

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// savePending writes what is pending after this run: the versions
// pending before and the ancestors refused now, less those published and
// those upstream no longer has. Roots are not kept: their refs lead to
// them at every run.
func (e *engine) savePending(ctx context.Context, roots map[string]bool) {
	now := time.Now().UTC()
	next := map[string]sink.PendingVersion{}
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
			p = sink.PendingVersion{Version: id, Since: now}
		}
		p.Reason, p.Message = r.Reason, r.Message
		next[id] = p
	}
	e.mu.Unlock()
	list := make([]sink.PendingVersion, 0, len(next))
	for _, p := range next {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Version < list[j].Version })
	more := max(0, len(list)-sink.MaxPendingVersions)
	list = list[:len(list)-more]
	e.report.Pending, e.report.PendingMore = list, more
	if e.opts.DryRun || (len(list) == 0 && len(e.pending) == 0) {
		return
	}
	if err := e.sink.WritePending(ctx, list, more); err != nil {
		e.addRefusal(refuse(ReasonCopy, "", backend.ReservedPrefix+sink.PendingFile, "writing the list of pending versions: %v", err))
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
	raw, err := backend.ReadAll(ctx, e.sink.Backend(), recordName, repo.MaxRecordFile)
	if err != nil {
		return refuse(ReasonRecord, id, recordName, "version %s: reading the mirror's %s: %v", id, recordName, err)
	}
	if _, err := repo.ParseRecord(id, raw); err != nil {
		return source.RecordRefusal(id, err)
	}
	if e.opts.Trust == nil {
		return nil
	}
	sigName := repo.VersionFile(id, repo.SignatureFile)
	sig, err := backend.ReadAll(ctx, e.sink.Backend(), sigName, repo.MaxSmallFile)
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
		have := e.inv.Versions[id]
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
			name := e.src.Settings().DataDir + f.Path
			if done[name] {
				continue
			}
			done[name] = true
			have, ok, err := e.sink.DataFile(ctx, e.src.Settings().DataDir, name)
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
	fetched, err := catalog.Fetch(ctx, e.sink.Backend(), name, e.opts.TempDir, e.opts.CatalogLimits.MaxSize)
	if err != nil {
		return false
	}
	defer fetched.Remove()
	return fetched.SHA256 == sha256
}

// checkLock confirms the run still holds the mirror's lock (see
// Options.CheckLock).
func (e *engine) checkLock(ctx context.Context) error {
	if !e.sink.IsLocked() || e.opts.CheckLock == nil {
		return nil
	}
	if err := e.opts.CheckLock(ctx); err != nil {
		e.lockLost.Store(true)
		return fatalf("sink %s: %v", e.sink.Location(), err)
	}
	return nil
}
