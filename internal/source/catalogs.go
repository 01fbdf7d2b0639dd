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

// Catalogs is the upstream's catalogs, fetched to the local disk: a
// concern of its own because a catalog is the one upstream file whose
// rows are read, and only ever by a confined reader.
type Catalogs struct{ s *Source }

// Catalogs is the upstream's catalogs, for a run or a verify.
func (s *Source) Catalogs() Catalogs { return Catalogs{s} }

// Fetch fetches file, one of version id's catalogs upstream
// (ducklake.duckdb, metadata.db, catalogs/<format>.duckdb), into the
// pool's folder for its confined readers (catalog.Pool.Fetch).
func (c Catalogs) Fetch(ctx context.Context, pool *catalog.Pool, id, file string) (*catalog.Fetched, error) {
	return pool.Fetch(ctx, c.s.r, repo.VersionFile(id, file))
}

// FetchTo fetches file, one of version id's catalogs upstream, into a
// new file in dir, refused once past maxSize bytes (catalog.Fetch): for
// a reader without a pool (verify).
func (c Catalogs) FetchTo(ctx context.Context, id, file, dir string, maxSize int64) (*catalog.Fetched, error) {
	return catalog.Fetch(ctx, c.s.r, repo.VersionFile(id, file), dir, maxSize)
}

// FetchMainTo is FetchTo for the main catalog of a version whose
// folder's files are not known (repo.FindMainCatalog): the file found,
// and its copy.
func (c Catalogs) FetchMainTo(ctx context.Context, id, dir string, maxSize int64) (string, *catalog.Fetched, error) {
	return repo.FindMainCatalog(func(file string) (*catalog.Fetched, error) {
		return c.FetchTo(ctx, id, file, dir, maxSize)
	})
}

// FromPeer fetches file, one of version id's catalogs, from the first
// earlier sink of a fan-out's run (Fanout.AddPeer) whose copy has the
// sha256 its record gives (want): nil where there is no peer, no sum to
// check it by, or no peer with that copy. The caller then fetches it
// upstream (Fetch): a peer's copy is untrusted, and only its sum lets it
// stand in for the upstream's.
func (c Catalogs) FromPeer(ctx context.Context, pool *catalog.Pool, id, file, want string) *catalog.Fetched {
	if want == "" {
		return nil
	}
	name := repo.VersionFile(id, file)
	for _, p := range c.s.shared.peers() {
		f, err := pool.Fetch(ctx, p, name)
		if err != nil {
			continue
		}
		if f.SHA256 == want {
			return f
		}
		f.Remove()
	}
	return nil
}
