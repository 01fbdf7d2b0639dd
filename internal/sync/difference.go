package sync

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// A version whose one parent is already published in the mirror has its
// main catalog read as a difference from the parent's file list
// (catalog.Diff): the list of the data files the mirror confirmed present
// when it published the parent (sink.FileListWriter), which the mirror
// keeps for each version it publishes. The reader holds only the child's
// catalog and the list, never the parent's catalog: a parent whose
// catalog took its own reader over (a planted catalog, published because
// that reader lied) would take the child's over too, and could leave the
// child's new files out. The list is the mirror's own record of what it
// checked, so whatever a reader says against it costs the one version it
// reads.
//
// The reader says the child's files the list lacks (at the same size,
// footer size and kind), which are checked against the mirror and copied
// or refused like any other, and the list's files the child no longer
// has. The other files of the child are the list's, in the mirror, and
// are not looked up again. So a version that adds one file costs one
// file (and the comparison), whatever the repository holds. The child's
// own list is the parent's less the removed, plus the new (confirmed by
// their copy), merged in path order as they stream (childList), and
// written as the child is published. A child's reader that lies costs the
// child: whatever its list says is a file the mirror confirmed, and one
// left out of it comes out as new at the next version's difference.
//
// Where the difference cannot be taken (two parents or none, a parent not
// published yet, alternate catalogs, a parent without a list of the
// mirror's epoch or one that fails its checks, a catalog that is not a
// DuckDB database), the catalog is read whole, and its list is the whole
// read's files.

// readMain reads a version's main catalog: as its difference from its
// parent's list where it can, else whole. ahead is the parent's list
// fetched while the catalog was (fetchListAhead), or nil.
func (c *catalogReader) readMain(ctx context.Context, id, mainFile string, fetched *catalog.Fetched, parents []string, files map[string]int64, ahead *listAhead) (*versionCatalog, error) {
	if vc, ok, err := c.readDifference(ctx, id, mainFile, fetched, parents, files, ahead); ok || err != nil {
		return vc, err
	}
	return c.readFetched(ctx, id, mainFile, fetched)
}

// differenceParent is the parent a version's main catalog can be read
// against as a difference: its one parent, published in the mirror, where
// the version has no alternate catalogs; "" where there is none.
func (c *catalogReader) differenceParent(parents []string, files map[string]int64) string {
	if len(parents) != 1 || len(repo.AlternateCatalogs(files)) > 0 {
		return ""
	}
	c.mu.Lock()
	published := c.versions.published[parents[0]]
	c.mu.Unlock()
	if !published {
		return ""
	}
	return parents[0]
}

// listAhead is a parent's list being fetched while its child's catalog
// is (fetchListAhead): at a million files its fetch and check take about
// as long as the catalog's, on the other core.
type listAhead struct {
	parent string
	done   chan struct{}
	list   *sink.FileList
	err    error
}

// fetchListAhead starts fetching the list of the parent a version can be
// read against (differenceParent); nil where there is none. The caller
// discards it where the version's reading does not take it.
func (c *catalogReader) fetchListAhead(ctx context.Context, parents []string, files map[string]int64) *listAhead {
	p := c.differenceParent(parents, files)
	if p == "" {
		return nil
	}
	a := &listAhead{parent: p, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		start := time.Now()
		if epoch := c.listEpoch(ctx); epoch != "" {
			a.list, a.err = c.sink.State().FetchFileList(ctx, p, epoch, c.pool.Dir())
		}
		c.log.Debug("parent's list fetched", zap.String("parent", p), zap.Duration("took", time.Since(start)), zap.Error(a.err))
	}()
	return a
}

// take waits for the list; the caller owns it from then on.
func (a *listAhead) take() (*sink.FileList, error) {
	<-a.done
	list := a.list
	a.list = nil
	return list, a.err
}

// discard waits for a list not taken and removes it.
func (a *listAhead) discard() {
	if a == nil {
		return
	}
	<-a.done
	if a.list != nil {
		a.list.Remove()
		a.list = nil
	}
}

// readDifference reads a version's main catalog as its difference from
// its parent's list in the mirror; ok is false where it cannot be taken.
func (c *catalogReader) readDifference(ctx context.Context, id, mainFile string, fetched *catalog.Fetched, parents []string, files map[string]int64, ahead *listAhead) (vc *versionCatalog, ok bool, err error) {
	p := c.differenceParent(parents, files)
	if p == "" {
		return nil, false, nil
	}
	epoch := c.listEpoch(ctx)
	if epoch == "" {
		return nil, false, nil
	}
	var list *sink.FileList
	if ahead != nil && ahead.parent == p {
		list, err = ahead.take()
	} else {
		list, err = c.sink.State().FetchFileList(ctx, p, epoch, c.pool.Dir())
	}
	if err != nil || list == nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		c.log.Info("parent has no usable file list in the mirror; reading the version's catalog whole",
			zap.String("version", id), zap.String("parent", p), zap.Error(err))
		return nil, false, nil
	}
	keep := false
	defer func() {
		if !keep {
			list.Remove()
		}
	}()
	catalogName := repo.VersionFile(id, mainFile)
	select {
	case c.slots.catalog <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	start := time.Now()
	d, err := c.src.Catalogs().Diff(ctx, c.pool, fetched, catalogName, catalog.ParentList{Rows: list.Files, Path: list.Path()}, list.EntriesSHA256)
	<-c.slots.catalog
	c.log.Debug("catalog compared with its parent's list", zap.String("catalog", catalogName), zap.String("parent", p), zap.Duration("took", time.Since(start)), zap.Error(err))
	if readWholeInstead(err) {
		// Not the child's fault: its list, its kind of catalog, or
		// both held at once. (A reader taken over may say the list
		// failed: that costs the child a whole read.)
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		c.log.Info("no difference taken; reading the version's catalog whole",
			zap.String("version", id), zap.String("parent", p), zap.Error(err))
		return nil, false, nil
	}
	c.mu.Lock()
	c.report.CatalogsRead++
	c.mu.Unlock()
	if err != nil {
		return nil, false, c.catalogRefusal(ctx, id, catalogName, err)
	}
	cat := &catalog.Catalog{DuckLakeVersion: d.DuckLakeVersion, DataPath: d.DataPath, Files: d.Files}
	keep = true
	return &versionCatalog{file: mainFile, name: catalogName, fetched: fetched, cat: cat, difference: d, parentList: list}, true, nil
}

// readWholeInstead says whether a difference's error leaves the version
// to be read whole: the list's (ErrParentList), its kind of catalog's
// (ErrNoDifference), or DuckDB's memory limit passed while the reader
// held the list's keys and compared the child's rows with them. A whole
// read streams the rows out and holds neither: at the default 128 MiB a
// difference from a list of some 3,000,000 entries does not fit (the
// list read into the join, 2026-12-06), where a whole read does.
func readWholeInstead(err error) bool {
	var le *catalog.LimitError
	return errors.Is(err, catalog.ErrNoDifference) || errors.Is(err, catalog.ErrParentList) ||
		errors.As(err, &le) && le.Key == catalog.KeyMemoryLimit
}

// listEpoch is the epoch of the mirror's file lists, read (or made) once
// a run; "" where it cannot be had: no list is then read or written.
func (c *catalogReader) listEpoch(ctx context.Context) string {
	c.epochOnce.Do(func() {
		e, err := c.sink.State().FileListEpoch(ctx)
		if err != nil {
			c.log.Warn("the mirror's file lists unusable this run; every catalog read whole", zap.Error(err))
			return
		}
		c.epoch = e
	})
	return c.epoch
}

// childList is version id's file list, written into a local file once
// its main catalog's files are confirmed in the mirror: for a difference,
// the parent's list less the removed plus the new, merged in path order
// (a new file of a path the list has replaces its entry); for a catalog
// read whole, its files. nil where none is kept (a dry run, no epoch, a
// list that failed: the next version reads its catalog whole).
func (c *catalogReader) childList(ctx context.Context, id string, main *versionCatalog) *sink.FileListWriter {
	if c.opts.DryRun {
		return nil
	}
	epoch := c.listEpoch(ctx)
	if epoch == "" {
		return nil
	}
	w, err := sink.NewFileListWriter(c.pool.Dir(), id, epoch)
	if err == nil {
		if d := main.difference; d != nil {
			err = w.Merge(main.parentList, d.Removed, main.cat.Files)
		} else {
			err = main.list().Each(w.Add)
		}
	}
	if err != nil {
		w.Discard()
		c.log.Warn("version's file list not kept; its child's catalog will be read whole", zap.String("version", id), zap.Error(err))
		return nil
	}
	return w
}
