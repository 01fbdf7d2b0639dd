package sink

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
)

// The mirror's files read back by a run beside its inventory: catalogs
// of versions complete in the mirror (a parent's, for the data files it
// holds), a catalog an interrupted run left, and
// the mirror's state files. They are the mirror's own bytes, but were
// the upstream's once: a catalog is read under the same limits.

// FetchCatalog copies the mirror's catalog name (in a version's folder)
// to a local temporary file through pool, which starts a reader for it
// while it comes.
func (v Versions) FetchCatalog(ctx context.Context, pool *catalog.Pool, name string) (*catalog.Fetched, error) {
	return pool.Fetch(ctx, v.s.b, name)
}

// FetchFile copies the mirror's file name to a local temporary file in
// dir ("" is os.TempDir), of at most maxSize bytes (0: the catalogs'
// default bound), to be checked rather than read.
func (v Versions) FetchFile(ctx context.Context, name, dir string, maxSize int64) (*catalog.Fetched, error) {
	return catalog.Fetch(ctx, v.s.b, name, dir, maxSize)
}

// UpstreamState reads the mirror's UpstreamStateFile; the zero value
// when it has none (see readUpstreamState).
func (st State) UpstreamState(ctx context.Context) (state UpstreamState, raw []byte, err error) {
	return readUpstreamState(ctx, st.s.b)
}

// SourceRecord reads the mirror's SourceFile; nil when it has none.
func (st State) SourceRecord(ctx context.Context) (*SourceRecord, error) {
	return readSourceRecord(ctx, st.s.b)
}
