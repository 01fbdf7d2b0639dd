package sync

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// A version whose one parent is already published in the mirror has its
// main catalog read as a difference from the parent's (catalog.Diff): the
// reader compares the two catalogs, row by row, and says only the files
// of the child the parent does not list at the same size, footer size and
// kind. The parent's catalog is the mirror's own, verified when it was
// published, and the parent's files are in the mirror (a version is
// published only once every file is there): the child's other files are
// there already, and are not looked up again. A child that changes an
// old row has that row come out as a new file, checked against the mirror
// and copied or refused like any other. So a version that adds one file
// costs one file (and the comparison), whatever the repository holds, and
// the mirror holds no list of its files.
//
// Where the difference cannot be taken (two parents or none, a parent not
// published yet, alternate catalogs, a parent's catalog the mirror cannot
// give or that is not a DuckDB database), the catalog is read whole, as
// before.

// readMain reads a version's main catalog: as its difference from its
// parent's where it can, else whole.
func (c *catalogReader) readMain(ctx context.Context, id, mainFile string, fetched *catalog.Fetched, parents []string, files map[string]int64) (*versionCatalog, error) {
	if vc, ok, err := c.readDifference(ctx, id, mainFile, fetched, parents, files); ok || err != nil {
		return vc, err
	}
	return c.readFetched(ctx, id, mainFile, fetched)
}

// readDifference reads a version's main catalog as its difference from
// its parent's in the mirror; ok is false where it cannot be taken.
func (c *catalogReader) readDifference(ctx context.Context, id, mainFile string, fetched *catalog.Fetched, parents []string, files map[string]int64) (vc *versionCatalog, ok bool, err error) {
	if len(parents) != 1 || len(repo.AlternateCatalogs(files)) > 0 {
		return nil, false, nil
	}
	p := parents[0]
	c.mu.Lock()
	published := c.versions.published[p]
	c.mu.Unlock()
	if !published {
		return nil, false, nil
	}
	parentName := repo.VersionFile(p, repo.CatalogFile)
	pf, err := c.sink.Versions().FetchCatalogBeside(ctx, c.pool, parentName)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		c.log.Info("parent's catalog not readable in the mirror; reading the version's catalog whole",
			zap.String("version", id), zap.String("parent", p), zap.Error(err))
		return nil, false, nil
	}
	defer pf.Remove()
	catalogName := repo.VersionFile(id, mainFile)
	select {
	case c.slots.catalog <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	start := time.Now()
	d, err := c.src.Catalogs().Diff(ctx, c.pool, fetched, catalogName, pf, parentName)
	<-c.slots.catalog
	c.log.Debug("catalog compared with its parent's", zap.String("catalog", catalogName), zap.String("parent", parentName), zap.Duration("took", time.Since(start)), zap.Error(err))
	if errors.Is(err, catalog.ErrNoDifference) {
		return nil, false, nil
	}
	c.mu.Lock()
	c.report.CatalogsRead++
	c.mu.Unlock()
	if err != nil {
		return nil, false, c.catalogRefusal(ctx, id, catalogName, err)
	}
	cat := &catalog.Catalog{DuckLakeVersion: d.DuckLakeVersion, DataPath: d.DataPath, Files: d.Files}
	return &versionCatalog{file: mainFile, name: catalogName, fetched: fetched, cat: cat, difference: d}, true, nil
}
