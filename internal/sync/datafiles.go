package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// copyVersion is the heavy part of mirroring a version, a few versions at
// a time: each holds its catalog's list of files, which can be long.
func (e *engine) copyVersion(ctx context.Context, n *pendingVersion) (dataFiles int, err error) {
	select {
	case e.versionSlots <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-e.versionSlots }()
	id, raw, rec := n.id, n.raw, n.rec
	var sig []byte
	parents := rec.Parents
	files, err := e.versionFiles(ctx, id)
	if err != nil {
		return 0, err
	}
	if _, ok := files[repo.SignatureFile]; ok {
		if sig, err = backend.ReadAll(ctx, e.src, repo.VersionFile(id, repo.SignatureFile), repo.MaxSmallFile); err != nil {
			return 0, err
		}
	}
	n.sig = sig
	if e.opts.Trust != nil {
		if err := e.opts.Trust.CheckVersion(id, raw, sig); err != nil {
			return 0, refuse(ReasonSignature, id, repo.VersionFile(id, repo.SignatureFile), "%v", err)
		}
	}

	select {
	case e.catalogSlots <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	catalogName := repo.VersionFile(id, repo.CatalogFile)
	lim := e.opts.CatalogLimits.WithDefaults()
	if size, ok := files[repo.CatalogFile]; ok && size > lim.MaxSize {
		<-e.catalogSlots
		return 0, refuse(ReasonLimit, id, catalogName, "version %s: %v", id,
			&catalog.LimitError{Catalog: catalogName, Key: catalog.KeyMaxSize, Detail: fmt.Sprintf("%d bytes, larger than the %s a catalog may have", size, catalog.FormatBytes(lim.MaxSize))})
	}
	fetched, err := catalog.Fetch(ctx, e.src, catalogName, "", lim.MaxSize) // in os.TempDir()
	if err != nil {
		<-e.catalogSlots
		if backend.IsNotExist(err) {
			return 0, refuse(ReasonMissingFile, id, catalogName, "version %s: %s is missing upstream", id, catalogName)
		}
		if le := (*catalog.LimitError)(nil); errors.As(err, &le) {
			return 0, refuse(ReasonLimit, id, catalogName, "version %s: %v", id, err)
		}
		return 0, err
	}
	defer fetched.Remove()
	if fetched.SHA256 != rec.SHA256 {
		<-e.catalogSlots
		return 0, refuse(ReasonSHA256, id, catalogName, "version %s: catalog sha256 mismatch: %s has %s, version.json records %s",
			id, catalogName, fetched.SHA256, rec.SHA256)
	}
	cat, err := catalog.Read(ctx, fetched.Path, catalogName, lim)
	<-e.catalogSlots
	e.mu.Lock()
	e.report.CatalogsRead++
	e.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		reason := ReasonCatalog
		if le := (*catalog.LimitError)(nil); errors.As(err, &le) {
			reason = ReasonLimit
		}
		return 0, refuse(reason, id, catalogName, "version %s: %v", id, err)
	}

	if err := e.mirrorDataFiles(ctx, id, cat, e.knownFromParents(ctx, parents)); err != nil {
		return 0, err
	}
	if err := e.writeVersionFiles(ctx, id, files, fetched); err != nil {
		return 0, err
	}
	return len(cat.Files), nil
}

// versionFiles names the files of a version's directory upstream, with
// their sizes (-1 where unknown until read). A source that cannot list is
// asked for the names the layout knows.
func (e *engine) versionFiles(ctx context.Context, id string) (map[string]int64, error) {
	if e.srcVersions != nil {
		return e.srcVersions[id], nil
	}
	names := append(append([]string{}, repo.KnownVersionFiles...), e.settings.CatalogFiles()...)
	files := map[string]int64{}
	for _, n := range names {
		fi, err := e.src.Stat(ctx, repo.VersionFile(id, n))
		if backend.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		files[n] = fi.Size
	}
	return files, nil
}

// maxStatChecks is how many data files of a version are checked in the
// sink one by one (Stat) before one listing of data_dir is cheaper: about
// one list page of S3 or GCS.
const maxStatChecks = 1000

// knownFromParents returns the data files the sink certainly holds when
// every parent of a version is complete there: the files their catalogs
// list, read back from the sink (a version is published only once all its
// files are there; the engine already trusts that by never walking below
// a complete version). Checking a new version against them, and the few
// files they lack one by one, costs a request per parent, where a listing
// of data_dir costs a page per thousand files of the whole repository, and
// a stat of each on a disk. These sink catalogs are not upstream catalogs
// and are not counted in Report.CatalogsRead. nil when a parent is not
// complete in the sink or its catalog cannot be read: every file is then
// checked against the listing.
func (e *engine) knownFromParents(ctx context.Context, parents []string) map[string]int64 {
	if len(parents) == 0 {
		return nil
	}
	known := map[string]int64{}
	for _, p := range parents {
		e.mu.Lock()
		done, now := e.published[p], e.publishedNow[p]
		e.mu.Unlock()
		if !done {
			return nil
		}
		if now {
			// Published by this run: every file of it is settled in
			// dataCalls already, which dataFile asks first; reading its
			// catalog back from the sink would be the same work again.
			continue
		}
		select {
		case e.catalogSlots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		cat, err := e.readSinkCatalog(ctx, p)
		<-e.catalogSlots
		if err != nil {
			e.log.Info("parent's catalog unreadable in the sink; checking every data file against a listing",
				zap.String("version", p), zap.Error(err))
			return nil
		}
		for _, f := range cat.Files {
			known[e.settings.DataDir+f.Path] = f.Size
		}
	}
	return known
}

func (e *engine) readSinkCatalog(ctx context.Context, id string) (*catalog.Catalog, error) {
	name := repo.VersionFile(id, repo.CatalogFile)
	fetched, err := catalog.Fetch(ctx, e.dst, name, "", e.opts.CatalogLimits.MaxSize)
	if err != nil {
		return nil, err
	}
	defer fetched.Remove()
	return catalog.Read(ctx, fetched.Path, name, e.opts.CatalogLimits)
}

// mirrorDataFiles makes sure the sink has every file the catalog needs,
// with the recorded size. Files in known (see knownFromParents) with the
// recorded size are there already.
func (e *engine) mirrorDataFiles(ctx context.Context, id string, cat *catalog.Catalog, known map[string]int64) error {
	var todo []int // indexes into cat.Files of the files to check
	for i, f := range cat.Files {
		name := e.settings.DataDir + f.Path
		// A parent's file is confirmed in the sink too: a lifecycle rule
		// or an operator may have removed it since the parent was
		// published, and a version is published only with every file.
		if size, ok := known[name]; !ok || size != f.Size || f.Size < 0 || !e.confirmInSink(ctx, name, f.Size) {
			todo = append(todo, i)
		}
	}
	byStat := known != nil && len(todo) <= maxStatChecks
	// A fixed pool of workers rather than one goroutine per file: a
	// catalog may list tens of thousands of files, and their stacks alone
	// would pass the memory budget.
	var wg sync.WaitGroup
	errs := make([]error, len(cat.Files))
	var next atomic.Int64
	for range min(e.opts.Concurrency, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := int(next.Add(1)) - 1
				if j >= len(todo) {
					return
				}
				f := cat.Files[todo[j]]
				errs[todo[j]] = e.dataFile(ctx, e.settings.DataDir+f.Path, f.Size, byStat)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		name := e.settings.DataDir + cat.Files[i].Path
		var r *refusal
		if errors.As(err, &r) {
			c := *r
			c.Version = id
			if !strings.HasPrefix(c.Message, "version ") {
				c.Message = "version " + id + ": " + c.Message
			}
			return &c
		}
		if backend.IsNotExist(err) {
			return refuse(ReasonMissingFile, id, name, "version %s: data file %s is missing upstream", id, name)
		}
		return refuse(ReasonCopy, id, name, "version %s: data file %s: %v", id, name, err)
	}
	return nil
}

// dataFileCall is the one copy of a data file in a run; versions that
// need the same file wait on done and share its result.
type dataFileCall struct {
	done chan struct{}
	size int64
	err  error
}

// dataFile copies one data file unless the sink has it; each name is
// handled once per run, whichever versions need it. byStat asks the sink
// about this file alone rather than listing data_dir.
func (e *engine) dataFile(ctx context.Context, name string, size int64, byStat bool) error {
	e.mu.Lock()
	call, ok := e.dataCalls[name]
	if !ok {
		call = &dataFileCall{done: make(chan struct{}), size: size}
		e.dataCalls[name] = call
	}
	e.mu.Unlock()
	if ok {
		<-call.done
		if size >= 0 && call.size >= 0 && call.size != size {
			// Another version records another size: each is judged on
			// its own record against the file, so the refusal lands on
			// the one that disagrees with it, whichever came first.
			return e.ensureDataFile(ctx, name, size, true)
		}
		return call.err
	}
	defer close(call.done)
	call.err = e.ensureDataFile(ctx, name, size, byStat)
	return call.err
}

func (e *engine) ensureDataFile(ctx context.Context, name string, size int64, byStat bool) error {
	lookup := e.sinkDataFile
	if byStat && !e.dstData.loaded.Load() {
		lookup = e.statSinkFile
	}
	have, known, err := lookup(ctx, name)
	if err != nil {
		return err
	}
	if known {
		if size >= 0 && have != size {
			return refuse(ReasonSizeMismatch, "", name, "data file %s exists in the sink with %d bytes, the catalog records %d; immutable, left alone", name, have, size)
		}
		return nil
	}
	return e.copyFile(ctx, name, size)
}

// statSinkFile says whether the sink has a data file, asking for it alone.
func (e *engine) statSinkFile(ctx context.Context, name string) (int64, bool, error) {
	fi, err := e.dst.Stat(ctx, name)
	if backend.IsNotExist(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("sink %s: %w", e.dst.Location(), err)
	}
	return fi.Size, true, nil
}

// sinkDataFile says whether the sink has a data file, from one listing of
// its data_dir made the first time a version needs it.
func (e *engine) sinkDataFile(ctx context.Context, name string) (int64, bool, error) {
	files, err := e.dstData.load(ctx, e.dst, e.settings.DataDir)
	if err != nil {
		return 0, false, fmt.Errorf("sink %s: listing %s: %w", e.dst.Location(), e.settings.DataDir, err)
	}
	size, ok := files[name]
	return size, ok, nil
}
