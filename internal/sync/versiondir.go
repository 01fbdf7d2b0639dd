package sync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// writeVersionFiles copies the version's own directory but for its
// record and signature: the opaque files, then the catalogs from the
// local copies that were read (their bytes are not fetched again).
func (e *engine) writeVersionFiles(ctx context.Context, id string, files map[string]int64, main *versionCatalog, alternates []*versionCatalog) error {
	have := e.dstVersions[id]
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
	dctx := e.withoutSync(ctx)
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
			errs[i] = e.copyFile(dctx, name, files[f])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return refuse(ReasonCopy, id, repo.VersionFile(id, opaque[i]), "version %s: %s: %v", id, opaque[i], err)
		}
	}
	for _, a := range alternates {
		if err := e.putCatalog(dctx, a.name, a.fetched); err != nil {
			return refuse(ReasonCopy, id, a.name, "version %s: writing catalog %s: %v", id, a.name, err)
		}
	}
	cat := main.fetched
	if size, ok := have[main.file]; ok && size == cat.Size && e.sinkCatalogIs(ctx, main.name, cat.SHA256) {
		// Written by an interrupted run from a copy of this record's
		// catalog (same sha256).
	} else if err := e.putCatalog(dctx, main.name, cat); err != nil {
		return refuse(ReasonCopy, id, main.name, "version %s: writing catalog: %v", id, err)
	}
	return nil
}

// publishVersion writes version.json.sig, then, once a barrier has made
// every file the version needs durable, version.json (durable when it
// returns): from this moment the version is complete.
func (e *engine) publishVersion(ctx context.Context, id string, record, sig []byte) error {
	if sig != nil {
		if err := e.putBytes(e.withoutSync(ctx), repo.VersionFile(id, repo.SignatureFile), sig); err != nil {
			return refuse(ReasonCopy, id, repo.VersionFile(id, repo.SignatureFile), "version %s: %v", id, err)
		}
	}
	if err := e.barrier(ctx); err != nil {
		return refuse(ReasonCopy, id, repo.VersionFile(id, repo.RecordFile), "version %s: %v", id, err)
	}
	if err := e.createRecord(ctx, repo.VersionFile(id, repo.RecordFile), record); err != nil {
		return refuse(ReasonCopy, id, repo.VersionFile(id, repo.RecordFile), "version %s: %v", id, err)
	}
	return nil
}

// createRecord writes a version's version.json only where there is none
// (If-None-Match: * on an object store): a record already there was
// published by another run, which is fine when it holds these bytes, and
// means this run lost the mirror to another when it does not.
func (e *engine) createRecord(ctx context.Context, name string, b []byte) error {
	if e.opts.DryRun {
		e.plan(name)
		return nil
	}
	err := e.dst.Create(ctx, name, strings.NewReader(string(b)), int64(len(b)))
	if errors.Is(err, backend.ErrExist) {
		there, rerr := backend.ReadAll(ctx, e.dst, name, int64(len(b))+1)
		if rerr == nil && string(there) == string(b) {
			return nil
		}
		return e.fenced(name, fmt.Errorf("%w: %w", backend.ErrPreconditionFailed, err))
	}
	if err != nil {
		return err
	}
	e.copied(int64(len(b)))
	return nil
}

// putRead writes a ref file, refs.json or HEAD only if it is still what
// this run read in its inventory (If-Match its version token, or
// If-None-Match: * where it was absent), on a store that can make writes
// conditional. A run paused past its lock's lifetime (a GC pause, a
// frozen VM) may check its lock, be paused, and write after another run
// took the mirror over: only the store can refuse that write (see
// backend.Conditional). A local folder needs no condition: its flock is
// held by the kernel through any pause.
func (e *engine) putRead(ctx context.Context, inv *inventory, name string, b []byte) error {
	if e.opts.DryRun {
		e.plan(name)
		return nil
	}
	err := backend.ReplaceIfUnchanged(ctx, e.dst, name, b, inv.versions[name])
	if backend.IsPreconditionFailed(err) {
		return e.fenced(name, err)
	}
	if err != nil {
		return err
	}
	e.copied(int64(len(b)))
	return nil
}

// fenced records that the store refused a write of name because another
// run changed it since this run read it: this run lost the mirror's lock,
// whatever its renewal has seen so far, and stops before it writes more.
func (e *engine) fenced(name string, err error) error {
	e.lockLost.Store(true)
	return fmt.Errorf("%s was changed by another run since this run read it; the store refused the write: %w", name, err)
}

// completeVersionDirs copies the files that appeared upstream in versions
// the sink already had (see newFilesInCompleteVersions): it costs no
// request beyond the copies.
func (e *engine) completeVersionDirs(ctx context.Context) {
	for nf := range e.newFilesInCompleteVersions() {
		name := repo.VersionFile(nf.version, nf.file)
		if isAlternateCatalog(nf.file, e.dstVersions[nf.version]) {
			if err := e.addAlternateCatalog(ctx, nf.version, nf.file, nf.size); err != nil && ctx.Err() == nil {
				var r *refusal
				if !errors.As(err, &r) {
					r = refuse(ReasonCopy, nf.version, name, "version %s: new catalog %s: %v", nf.version, name, err)
				}
				e.addRefusal(r)
			}
			continue
		}
		if err := e.copyFile(ctx, name, nf.size); err != nil && ctx.Err() == nil {
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
	a, err := e.readCatalog(ctx, id, file, map[string]int64{file: size}, "")
	if err != nil {
		return err
	}
	defer a.fetched.Remove()
	if err := e.mirrorDataFiles(ctx, id, a.cat, nil); err != nil {
		return listedBy(err, a.name)
	}
	if err := e.putCatalog(ctx, a.name, a.fetched); err != nil {
		return refuse(ReasonCopy, id, a.name, "version %s: writing catalog %s: %v", id, a.name, err)
	}
	return nil
}

// putCatalog writes a fetched catalog from its local copy, with the
// SHA-256 of the bytes that were read: a store that can check a write
// against it (S3) stores those bytes or nothing.
func (e *engine) putCatalog(ctx context.Context, name string, cat *catalog.Fetched) error {
	if e.opts.DryRun {
		e.plan(name)
		return nil
	}
	f, err := os.Open(cat.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := e.dst.Put(backend.WithContentSHA256(ctx, cat.SHA256), name, f, cat.Size); err != nil {
		return err
	}
	e.copied(cat.Size)
	return nil
}

func (e *engine) putBytes(ctx context.Context, name string, b []byte) error {
	if e.opts.DryRun {
		e.plan(name)
		return nil
	}
	if err := e.dst.Put(ctx, name, strings.NewReader(string(b)), int64(len(b))); err != nil {
		return err
	}
	e.copied(int64(len(b)))
	return nil
}
