package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// copyVersion is the heavy part of mirroring a version, a few versions at
// a time: each holds its catalog's list of files, which can be long.
func (e *engine) copyVersion(ctx context.Context, n *versionJob) (dataFiles int, err error) {
	// A version's main catalog is fetched before it takes a version slot,
	// several versions ahead: the pool then checks the catalogs waiting
	// together (see catalog.Pool), and downloads overlap reads.
	select {
	case e.catalogs.slots.ahead <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-e.catalogs.slots.ahead }()
	id, rec := n.id, n.rec
	files, err := e.src.Versions().Files(ctx, id)
	if err != nil {
		return 0, err
	}
	if n.sig, err = e.src.Versions().ReadSignature(ctx, id, files, n.raw); err != nil {
		return 0, err
	}

	// Every catalog is read before any data file is copied: a bad one
	// refuses the version without a byte of it written.
	mainFile := repo.MainCatalog(files)
	ahead := e.catalogs.fetchListAhead(ctx, rec.Parents, files)
	defer ahead.discard()
	fetched, err := e.catalogs.fetchAhead(ctx, id, mainFile, files, rec.SHA256)
	if err != nil {
		return 0, err
	}
	if fetched != nil {
		defer fetched.Remove()
	}
	select {
	case e.catalogs.slots.version <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	releaseSlot := sync.OnceFunc(func() { <-e.catalogs.slots.version })
	defer releaseSlot()
	if fetched == nil {
		if fetched, err = e.catalogs.fetchCatalog(ctx, id, mainFile, files, rec.SHA256); err != nil {
			return 0, err
		}
		defer fetched.Remove()
	}
	main, err := e.catalogs.readMain(ctx, id, mainFile, fetched, rec.Parents, files, ahead)
	if err != nil {
		return 0, err
	}
	defer main.parentList.Remove()
	alternates, err := e.catalogs.readAlternates(ctx, id, files)
	defer func() {
		for _, a := range alternates {
			a.fetched.Remove()
		}
	}()
	if err != nil {
		return 0, err
	}
	if dataFiles, err = e.copyDataFiles(ctx, id, rec.Parents, main, alternates); err != nil {
		main.confirmed.Discard()
		return 0, err
	}
	n.list = main.confirmed
	// The file lists are done with: the next version takes the slot
	// (and reads its catalog) while this one writes its folder.
	main.cat = nil
	for _, a := range alternates {
		a.cat = nil
	}
	releaseSlot()
	e.log.Debug("data files in the sink", zap.String("version", id), zap.Int("data_files", dataFiles))
	if err := e.publish.writeVersionFiles(ctx, id, files, main, alternates); err != nil {
		n.list.Discard()
		n.list = nil
		return 0, err
	}
	e.log.Debug("version folder written", zap.String("version", id))
	return dataFiles, nil
}

// fetchAhead fetches a version's main catalog before the version takes a
// slot, where it is no larger than maxAheadCatalog; nil where it is (or
// its size is unknown): it is then fetched once the version has a slot.
func (c *catalogReader) fetchAhead(ctx context.Context, id, mainFile string, files map[string]int64, sha256 string) (*catalog.Fetched, error) {
	if size, ok := files[mainFile]; !ok || size < 0 || size > maxAheadCatalog {
		return nil, nil
	}
	// One download ahead at a time: the versions holding slots keep most
	// of the bandwidth (under bwlimit, eight catalogs fetched at once held
	// back every data file for a minute).
	select {
	case c.slots.aheadFetch <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.slots.aheadFetch }()
	return c.fetchCatalog(ctx, id, mainFile, files, sha256)
}

// readAlternates fetches and reads a version's alternate catalogs; those
// read are returned even with an error, for the caller to remove.
func (c *catalogReader) readAlternates(ctx context.Context, id string, files map[string]int64) ([]*versionCatalog, error) {
	var alternates []*versionCatalog
	for _, f := range repo.AlternateCatalogs(files) {
		a, err := c.readCatalog(ctx, id, f, files, "")
		if err != nil {
			return alternates, err
		}
		alternates = append(alternates, a)
	}
	return alternates, nil
}

// copyDataFiles makes sure the sink has every data file a version's
// catalogs name, and returns how many they name.
func (e *engine) copyDataFiles(ctx context.Context, id string, parents []string, main *versionCatalog, alternates []*versionCatalog) (int, error) {
	defer main.closeFiles()
	for _, a := range alternates {
		defer a.closeFiles()
	}
	var known *parentFiles
	files := main.list()
	dataFiles := int(files.Len())
	if d := main.difference; d != nil {
		// Only the files the parent lacks are listed, each checked in
		// the mirror; the others are the parent's, in the mirror, and no
		// parent's list is read to judge them (an empty one: few files,
		// each looked up alone).
		dataFiles = int(d.ChildRows - d.FoldedRows)
		known = &parentFiles{}
	} else {
		known = e.catalogs.knownFromParents(ctx, parents)
	}
	defer known.close()
	if err := e.transfer.mirrorDataFiles(ctx, id, files, known); err != nil {
		return 0, err
	}
	// Every file of the main catalog is confirmed in the mirror: its
	// list, written as the version is published (difference.go).
	main.confirmed = e.catalogs.childList(ctx, id, main)
	for _, a := range alternates {
		// Each catalog's files in path order: the parents' lists are
		// gone through again from their start.
		known.rewind()
		if err := e.transfer.mirrorDataFiles(ctx, id, a.list(), known); err != nil {
			return 0, listedBy(err, a.name)
		}
		dataFiles += int(a.files.Len())
	}
	return dataFiles, nil
}

// versionCatalog is one catalog of a version, fetched and read.
type versionCatalog struct {
	file    string // in the version's folder: ducklake.duckdb, catalogs/x.duckdb
	name    string // in the repository: versions/<id>/<file>
	fetched *catalog.Fetched
	// cat is the catalog of a difference (Files: those the parent
	// lacks); nil for one read whole, whose files are in files.
	cat   *catalog.Catalog
	files *catalog.Sorted
	// difference, where the catalog was read as its difference from its
	// parent's in the mirror (difference.go): cat lists only the files
	// the parent does not.
	difference *catalog.Difference
	// parentList is the parent's list a difference was taken against,
	// a local copy (merged into confirmed, then removed).
	parentList *sink.FileList
	// confirmed is the main catalog's file list, once its files are
	// confirmed in the mirror; nil where none is kept.
	confirmed *sink.FileListWriter
}

// list is the catalog's files in path order.
func (c *versionCatalog) list() *catalog.Sorted {
	if c.files == nil {
		c.files = catalog.Listed(c.cat)
	}
	return c.files
}

// closeFiles lets the catalog's list of files go (its run on disk, for a
// long one).
func (c *versionCatalog) closeFiles() {
	if c.files != nil {
		c.files.Close()
	}
}

// readCatalog fetches one of a version's catalogs into a local copy,
// checks its sha256 where the record gives one (the main catalog's), and
// reads it: the same limits and path rules for every catalog of a
// version, and a refusal naming the catalog when it fails.
func (c *catalogReader) readCatalog(ctx context.Context, id, file string, files map[string]int64, wantSHA256 string) (*versionCatalog, error) {
	fetched, err := c.fetchCatalog(ctx, id, file, files, wantSHA256)
	if err != nil {
		return nil, err
	}
	vc, err := c.readFetched(ctx, id, file, fetched)
	if err != nil {
		fetched.Remove()
	}
	return vc, err
}

// maxAheadCatalog is the largest catalog fetched before its version takes
// a slot: those copies wait on the disk, up to aheadSlots of them.
const maxAheadCatalog = 64 << 20

// fetchCatalog fetches one of a version's catalogs into the pool's
// folder and checks its sha256 where the record gives one.
func (c *catalogReader) fetchCatalog(ctx context.Context, id, file string, files map[string]int64, wantSHA256 string) (*catalog.Fetched, error) {
	catalogName := repo.VersionFile(id, file)
	lim := c.opts.CatalogLimits.WithDefaults()
	if size, ok := files[file]; ok && size > lim.MaxSize {
		return nil, refuse(ReasonLimit, id, catalogName, "version %s: %v", id,
			&catalog.LimitError{Catalog: catalogName, Key: catalog.KeyMaxSize, Detail: fmt.Sprintf("%d bytes, larger than the %s a catalog may have", size, catalog.FormatBytes(lim.MaxSize))})
	}
	// A fan-out's later sink takes an earlier sink's copy whose sum is
	// the record's (source.Catalogs.FromPeer), else the upstream's.
	if fetched := c.src.Catalogs().FromPeer(ctx, c.pool, id, file, wantSHA256); fetched != nil {
		return fetched, nil
	}
	// Fetched outside catalogSlots: a download waits on the source. A
	// catalog with a sum on record is checked against it, byte for byte,
	// so the store need not check the transfer too; where the sums differ
	// it is fetched once more with the store's check, so that bytes damaged
	// on the way fail as a read instead of passing for the upstream's. A
	// failed read is tried again as a data file's copy is.
	checked := wantSHA256 != ""
	for attempt := 1; ; attempt++ {
		fetchCtx := ctx
		if checked {
			fetchCtx = backend.WithCheckedRead(ctx)
		}
		start := time.Now()
		fetched, err := c.src.Catalogs().Fetch(fetchCtx, c.pool, id, file)
		c.log.Debug("catalog fetched", zap.String("catalog", catalogName), zap.Duration("took", time.Since(start)), zap.Error(err))
		if err != nil {
			if backend.IsNotExist(err) {
				return nil, refuse(ReasonMissingFile, id, catalogName, "version %s: %s is missing upstream", id, catalogName)
			}
			if le := (*catalog.LimitError)(nil); errors.As(err, &le) {
				return nil, refuse(ReasonLimit, id, catalogName, "version %s: %v", id, err)
			}
			if err := c.transfer.waitToRetry(ctx, "catalog fetch failed; retrying", catalogName, attempt, err); err != nil {
				return nil, err
			}
			continue
		}
		if wantSHA256 == "" || fetched.SHA256 == wantSHA256 {
			return fetched, nil
		}
		fetched.Remove()
		if !checked {
			return nil, refuse(ReasonSHA256, id, catalogName, "version %s: catalog sha256 mismatch: %s has %s, version.json records %s",
				id, catalogName, fetched.SHA256, wantSHA256)
		}
		checked = false
	}
}

// readFetched reads a fetched catalog, at most catalogSlots at once.
func (c *catalogReader) readFetched(ctx context.Context, id, file string, fetched *catalog.Fetched) (*versionCatalog, error) {
	catalogName := repo.VersionFile(id, file)
	select {
	case c.slots.catalog <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	start := time.Now()
	files, err := c.src.Catalogs().ReadSorted(ctx, c.pool, fetched, catalogName)
	<-c.slots.catalog
	c.log.Debug("catalog read", zap.String("catalog", catalogName), zap.Duration("took", time.Since(start)), zap.Error(err))
	c.mu.Lock()
	c.report.CatalogsRead++
	c.mu.Unlock()
	if err != nil {
		return nil, c.catalogRefusal(ctx, id, catalogName, err)
	}
	return &versionCatalog{file: file, name: catalogName, fetched: fetched, files: files}, nil
}

// catalogRefusal refuses version id for the read of one of its catalogs
// that failed with err, by the reason err gives.
func (c *catalogReader) catalogRefusal(ctx context.Context, id, catalogName string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	reason := ReasonCatalog
	if le := (*catalog.LimitError)(nil); errors.As(err, &le) {
		reason = ReasonLimit
	}
	if re := (*catalog.ReaderError)(nil); errors.As(err, &re) {
		reason = ReasonReaderFailed
	}
	return refuse(reason, id, catalogName, "version %s: %v", id, err)
}

// listedBy says in a refusal over a data file which catalog needs it,
// where that is an alternate catalog.
func listedBy(err error, catalogName string) error {
	var r *refusal
	if !errors.As(err, &r) {
		return err
	}
	c := *r
	c.Message += " (listed by the alternate catalog " + catalogName + ")"
	return &c
}

// dataFileRefusal is the refusal of version id over its data file name.
func dataFileRefusal(id, name string, err error) error {
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
