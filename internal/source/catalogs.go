package source

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// A version's catalogs come from upstream only as copies on the local
// disk, bounded in size as they come (catalog.Fetch's maxSize, the
// pool's limits); their rows are then read only by a confined reader
// (catalog.Pool.ReadSorted, catalog.Read), never by this process.

// FetchCatalog fetches file, one of version id's catalogs upstream
// (ducklake.duckdb, metadata.db, catalogs/<format>.duckdb), into the
// pool's folder for its confined readers (catalog.Pool.Fetch).
func (s *Source) FetchCatalog(ctx context.Context, pool *catalog.Pool, id, file string) (*catalog.Fetched, error) {
	return pool.Fetch(ctx, s.r, repo.VersionFile(id, file))
}

// FetchCatalogTo fetches file, one of version id's catalogs upstream, into
// a new file in dir, refused once past maxSize bytes (catalog.Fetch): for
// a reader without a pool (verify).
func (s *Source) FetchCatalogTo(ctx context.Context, id, file, dir string, maxSize int64) (*catalog.Fetched, error) {
	return catalog.Fetch(ctx, s.r, repo.VersionFile(id, file), dir, maxSize)
}

// FetchMainCatalogTo is FetchCatalogTo for the main catalog of a version
// whose folder's files are not known (repo.FindMainCatalog): the file
// found, and its copy.
func (s *Source) FetchMainCatalogTo(ctx context.Context, id, dir string, maxSize int64) (string, *catalog.Fetched, error) {
	return repo.FindMainCatalog(func(file string) (*catalog.Fetched, error) {
		return s.FetchCatalogTo(ctx, id, file, dir, maxSize)
	})
}
