package sync

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// writeVersionFiles copies the version's own directory but for its
// record and signature: the opaque files, then the catalogs from the
// local copies that were read (their bytes are not fetched again).
func (p *publisher) writeVersionFiles(ctx context.Context, id string, files map[string]int64, main *versionCatalog, alternates []*versionCatalog) error {
	have := p.inv.Versions[id]
	catalogs := map[string]bool{main.file: true}
	for _, a := range alternates {
		catalogs[a.file] = true
	}
	var opaque []string
	for f := range files {
		if f != repo.RecordFile && f != repo.SignatureFile && !catalogs[f] {
			opaque = append(opaque, f)
		}
	}
	sort.Strings(opaque)
	// Written without an fsync each: the barrier before version.json
	// covers them, and a folder without version.json is rewritten by the
	// next run whatever it holds (see durability.go).
	dctx := p.sink.Durability().WithoutSync(ctx)
	var wg sync.WaitGroup
	errs := make([]error, len(opaque))
	for i, f := range opaque {
		name := repo.VersionFile(id, f)
		if err := backend.CheckName(name); err != nil {
			return refuse(ReasonBadRef, id, name, "version %s: file name %q is not allowed", id, f)
		}
		// A folder without version.json holds what an interrupted run
		// left, perhaps of a version upstream has replaced since: its
		// files are rewritten, never trusted by their size.
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.transfer.copyFile(dctx, name, files[f])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return refuse(ReasonCopy, id, repo.VersionFile(id, opaque[i]), "version %s: %s: %v", id, opaque[i], err)
		}
	}
	for _, a := range alternates {
		if err := p.sink.Versions().PutCatalog(dctx, a.name, a.fetched); err != nil {
			return refuse(ReasonCopy, id, a.name, "version %s: writing catalog %s: %v", id, a.name, err)
		}
	}
	cat := main.fetched
	if size, ok := have[main.file]; ok && size == cat.Size && p.catalogs.sinkCatalogIs(ctx, main.name, cat.SHA256) {
		// Written by an interrupted run from a copy of this record's
		// catalog (same sha256).
	} else if err := p.sink.Versions().PutCatalog(dctx, main.name, cat); err != nil {
		return refuse(ReasonCopy, id, main.name, "version %s: writing catalog: %v", id, err)
	}
	return nil
}

// publishVersion publishes a version whose files are all in the sink
// (sink.Versions.Publish: version.json last, behind a barrier); a write
// that fails refuses it, naming the file. A version.json another run
// created with other bytes means this run lost the mirror: the lock is
// lost, and the run stops at its next check (checkLock).
func (p *publisher) publishVersion(ctx context.Context, id string, record, sig []byte) error {
	err := p.sink.Versions().Publish(ctx, id, record, sig)
	if backend.IsPreconditionFailed(err) {
		p.lockLost.Store(true)
	}
	if fe := (*sink.FileError)(nil); errors.As(err, &fe) {
		return refuse(ReasonCopy, id, fe.File, "version %s: %v", id, fe.Err)
	}
	return err
}

// completeVersionDirs copies the files that appeared upstream in versions
// the sink already had (see newFilesInCompleteVersions): it costs no
// request beyond the copies.
func (e *engine) completeVersionDirs(ctx context.Context) {
	for nf := range newFilesInCompleteVersions(e.src.Versions().Listing(), e.inv.Versions) {
		name := repo.VersionFile(nf.version, nf.file)
		if isAlternateCatalog(nf.file, e.inv.Versions[nf.version]) {
			if err := e.addAlternateCatalog(ctx, nf.version, nf.file, nf.size); err != nil && ctx.Err() == nil {
				var r *refusal
				if !errors.As(err, &r) {
					r = refuse(ReasonCopy, nf.version, name, "version %s: new catalog %s: %v", nf.version, name, err)
				}
				e.addRefusal(r)
			}
			continue
		}
		if err := e.transfer.copyFile(ctx, name, nf.size); err != nil && ctx.Err() == nil {
			e.addRefusal(refuse(ReasonCopy, nf.version, name, "version %s: new file %s: %v", nf.version, name, err))
		}
	}
}

// isAlternateCatalog says whether a file new upstream in a version the
// sink holds (have: its files there) is an alternate catalog of it.
func isAlternateCatalog(file string, have map[string]int64) bool {
	with := map[string]int64{file: 0}
	for f, size := range have {
		with[f] = size
	}
	return slices.Contains(repo.AlternateCatalogs(with), file)
}

// addAlternateCatalog mirrors an alternate catalog that appeared upstream
// in a version the sink holds complete: read like any catalog, its data
// files copied and checked, then the catalog itself; refused as a whole
// (the catalog not written) when it cannot be.
func (e *engine) addAlternateCatalog(ctx context.Context, id, file string, size int64) error {
	a, err := e.catalogs.readCatalog(ctx, id, file, map[string]int64{file: size}, "")
	if err != nil {
		return err
	}
	defer a.fetched.Remove()
	defer a.closeFiles()
	if err := e.transfer.mirrorDataFiles(ctx, id, a.list(), nil); err != nil {
		return listedBy(err, a.name)
	}
	if err := e.sink.Versions().PutCatalog(ctx, a.name, a.fetched); err != nil {
		return refuse(ReasonCopy, id, a.name, "version %s: writing catalog %s: %v", id, a.name, err)
	}
	return nil
}
