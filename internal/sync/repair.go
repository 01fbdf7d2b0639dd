package sync

import (
	"context"
	"fmt"
	"sort"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// repair re-checks every version complete in the sink against the sink
// (its data_dir listed once on an object store, each file asked for on
// a disk; see sink.Data.File) and copies back from upstream the data
// files missing or of another size than the version's catalog records
// (sync --repair).
// A copy is made only from an upstream file of the recorded size.
func (e *engine) repair(ctx context.Context) {
	var ids []string
	for id := range e.versions.published {
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
			cat, err := e.catalogs.readSinkFile(ctx, id, file)
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
			have, ok, err := e.sink.Data().File(ctx, e.src.Settings().DataDir, name, true)
			if err != nil {
				e.addRefusal(refuse(ReasonCopy, id, name, "repair: %v", err))
				return
			}
			if ok && (f.Size < 0 || have == f.Size) {
				continue
			}
			if err := e.transfer.copyFile(ctx, name, f.Size); err != nil {
				e.addRefusal(refuse(ReasonCopy, id, name, "repair: version %s: data file %s: %v", id, name, err))
				e.mu.Lock()
				e.report.Unrepaired = append(e.report.Unrepaired, name)
				e.mu.Unlock()
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
func (c *catalogReader) sinkCatalogIs(ctx context.Context, name, sha256 string) bool {
	fetched, err := c.sink.Versions().FetchFile(ctx, name, c.opts.TempDir, c.opts.CatalogLimits.MaxSize)
	if err != nil {
		return false
	}
	defer fetched.Remove()
	return fetched.SHA256 == sha256
}
