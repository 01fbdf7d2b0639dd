package sink

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Inventory is what the mirror holds, read before anything is written.
type Inventory struct {
	Settings []byte // the mirror's fdl.json; nil when it has none
	Refs     repo.Refs
	RefsJSON []byte // nil when absent
	Head     []byte // nil when absent
	// Tokens are the version tokens (backend.FileInfo.Version) of the ref
	// files, refs.json and HEAD as the inventory read them, for the
	// conditional writes of WriteRefs; an object absent when read has
	// none. Empty on a store without conditional writes.
	Tokens map[string]string
	// RefsMoving: RefsMovingFile is there (an earlier run stopped while
	// moving refs, or this run is moving them).
	RefsMoving bool
	// Versions maps every version folder to its files and their sizes.
	Versions map[string]map[string]int64
	// Pending are the ancestors earlier runs could not mirror.
	Pending map[string]PendingVersion
	// Distrusted lists, sorted, the files an earlier run wrote with no
	// barrier behind them (see durability.go): the sink copies them again.
	Distrusted []string
}

// Complete says whether the mirror holds version id complete: its
// version.json, written last, is there.
func (inv *Inventory) Complete(id string) bool {
	_, ok := inv.Versions[id][repo.RecordFile]
	return ok
}

// TakeInventory reads the mirror's fdl.json, refs, refs.json and HEAD,
// its pending versions and the record of unsynced files, and lists its
// versions/ (one listing, whatever the number of versions). The sink
// keeps the record for the run's durability (see durability.go): only
// data files below dataDir (the upstream's data_dir) count in it.
func (s *Sink) TakeInventory(ctx context.Context, dataDir string) (*Inventory, error) {
	inv := &Inventory{Tokens: map[string]string{}}
	var err error
	if inv.Settings, err = s.readOptional(ctx, repo.SettingsFile, repo.MaxSmallFile); err != nil {
		return nil, err
	}
	if err := s.Claims().read(ctx); err != nil {
		return nil, err
	}
	if inv.Versions, err = repo.ListVersions(ctx, s.b, nil); err != nil {
		return nil, s.errorf("%w", err)
	}
	s.claims.unlisted(inv.Versions)
	for id := range inv.Versions {
		s.held = s.held || inv.Complete(id)
	}
	if err := s.readRefs(ctx, inv); err != nil {
		return nil, err
	}
	if inv.Pending, err = s.readPending(ctx); err != nil {
		return nil, err
	}
	if inv.Distrusted, err = s.Durability().loadUnsynced(ctx, dataDir); err != nil {
		return nil, err
	}
	if inv.Head, err = s.readVersioned(ctx, inv, repo.HeadFile, repo.MaxSmallFile); err != nil {
		return nil, err
	}
	return inv, nil
}

// DataFile says whether the mirror has a data file below dataDir, and its
// size. many says the caller will ask about more files than a page of an
// object store's listing holds (about a thousand): only then is data_dir
// listed, once per run, and its listing kept to answer every later ask
// (a repair, which asks about every file of every version; a version's
// own check asks through a DataCursor, which holds a page instead); a
// caller that asks about a few files of a mirror of many is answered a
// request each, and nothing per file of the mirror is held. A local
// mirror that held a version when the run began is not listed even for
// many: a listing there reads every entry of the folder and stats each
// file in it (140 MiB of heap at 300,000 files), so a stat of each file
// needed costs no more and holds nothing. One that held none (a first
// run: its data_dir holds at most what an interrupted run left) is: in a
// first mirror of 300,000 files the stats of absent files would take a
// second of CPU, the listing of the empty folder none.
func (s *Sink) DataFile(ctx context.Context, dataDir, name string, many bool) (int64, bool, error) {
	if s.claims.listed(name) {
		return 0, false, nil // a prune's candidate: copied again (claims.go)
	}
	if !s.data.Loaded() && (!many || (s.b.Properties().LocalStat && s.held)) {
		return s.StatFile(ctx, name)
	}
	if err := s.data.Load(ctx, s.b, dataDir); err != nil {
		return 0, false, s.errorf("listing %s: %w", dataDir, err)
	}
	size, ok := s.data.Size(name)
	return size, ok, nil
}

// DataCursor is one pass of asks about the mirror's data files, in path
// order (a version's catalog, read in order): on a store that lists
// pages from a name (S3, GCS) it merges the asks with data_dir's listing
// a page at a time (backend.Cursor), so that what a version's check
// costs and holds follows the version, not the mirror: asks far apart a
// request each, asks close together a request per page, one page held,
// where DataFile with many lists the whole of data_dir (850 MB held at
// 10,000,000 files). A name asked out of order is asked for alone. Each
// pass has its own: the passes of versions mirrored at once go through
// data_dir each in its own order.
type DataCursor struct {
	s   *Sink
	dir string
	c   *backend.Cursor // nil: DataFile with many answers
}

// DataCursor starts a pass over data_dir. Where the store lists no
// pages, or is a local folder (which DataFile already asks file by
// file), the pass answers as DataFile does with many; and so it does
// where data_dir fitted one page of its listing when the run first
// asked (a first mirror's empty data_dir, or the few files an
// interrupted one left): that listing, a page's worth, then answers
// every pass of the run, where passes would each list again the files
// the run itself copies.
func (s *Sink) DataCursor(ctx context.Context, dataDir string) *DataCursor {
	d := &DataCursor{s: s, dir: dataDir}
	l := backend.PageListerOf(s.b)
	if s.b.Properties().LocalStat || l == nil || s.dataFitsAPage(ctx, l, dataDir) {
		return d
	}
	d.c = backend.NewCursor(s.b, dataDir)
	return d
}

// dataFitsAPage says whether data_dir's first page of names was all of
// it, asked once a run (a request, the first time).
func (s *Sink) dataFitsAPage(ctx context.Context, l backend.PageLister, dataDir string) bool {
	s.fitsOnce.Do(func() {
		_, more, err := l.ListPage(ctx, dataDir, "")
		s.fits = err == nil && !more
	})
	return s.fits
}

// Paged says whether the pass merges with pages of the listing.
func (d *DataCursor) Paged() bool { return d.c != nil }

// DataFile says whether the mirror has a data file below data_dir, and
// its size; names are asked in path order.
func (d *DataCursor) DataFile(ctx context.Context, name string) (int64, bool, error) {
	if d.c == nil {
		return d.s.DataFile(ctx, d.dir, name, true)
	}
	if d.s.claims.listed(name) {
		return 0, false, nil // a prune's candidate: copied again (claims.go)
	}
	size, ok, err := d.c.Size(ctx, name)
	if err != nil {
		return 0, false, d.s.errorf("listing %s: %w", d.dir, err)
	}
	return size, ok, nil
}

// StatFile says whether the mirror has a file, and its size, asking for
// it alone.
func (s *Sink) StatFile(ctx context.Context, name string) (int64, bool, error) {
	if s.claims.listed(name) {
		return 0, false, nil // a prune's candidate: copied again (claims.go)
	}
	fi, err := s.b.Stat(ctx, name)
	if backend.IsNotExist(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, s.errorf("%w", err)
	}
	return fi.Size, true, nil
}

// DataListed says whether data_dir was listed, and how many files the
// listing holds.
func (s *Sink) DataListed() (listed bool, files int) {
	if !s.data.Loaded() {
		return false, 0
	}
	return true, s.data.Len()
}

// HasDataFile says whether the mirror holds a data file at size (-1:
// any); many as for DataFile.
func (s *Sink) HasDataFile(ctx context.Context, dataDir, name string, size int64, many bool) bool {
	have, ok, err := s.DataFile(ctx, dataDir, name, many)
	return err == nil && ok && (size < 0 || have == size)
}
