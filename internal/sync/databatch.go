package sync

import (
	"context"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// A catalog read whole lists every file of its version, as many as the
// repository holds: its files come in path order from a catalog.Sorted
// (on disk past a bound) and go through the steps of mirroring in
// batches of dataBatch, so that nothing kept per file spans the catalog:
// the parents' files are judged by going through their catalogs beside
// it in path order (parentFiles), and the run's record of data files
// (dataCalls) keeps the calls in flight and the last maxSettledCalls
// settled ones.

// dataBatch is how many of a catalog's files go through the steps at
// once (look up, record, copy, wait): the steps' slices are a batch
// long, and the names recorded without a barrier are one write a batch.
// A test lowers it (SetDataBatch) to go through several.
var dataBatch = 4096

// maxStatChecks is how many data files of a version are checked in the
// sink one by one (Stat) before one listing of data_dir is cheaper: about
// one list page of S3 or GCS. A test lowers it (SetMaxStatChecks) to
// have a few files checked against a listing.
var maxStatChecks = 1000

// sourcePassFiles is how many files a catalog lists before its
// server-side copies take their sizes from a pass over the upstream's
// data_dir even where the sink's data_dir was listed whole (a first
// mirror), rather than from one listing of the upstream's (source.Data.Size).
// That listing holds about 85 bytes a name once made and 200 more while
// its parts are fetched: at 300,000 files, 85 MB of a heap the mirror
// keeps under 96 MiB (the wide S3->S3 first mirror peaked at 158 MiB).
// A pass holds a page; below the bound the one listing is cheaper in
// requests, as a version's copies are spread across the whole folder
// (see mirrorDataFiles). A test lowers it (SetSourcePassFiles).
var sourcePassFiles int64 = 100_000

// maxSettledCalls is how many settled data file calls the run keeps
// (dataCalls): a version that needs a file another version of the run
// settled is told its result without asking the sink. Past the bound the
// oldest go; a version that needs one of those asks the sink (a stat, or
// the listing taken before it was copied, which then copies it again:
// the same bytes, recorded and copied as any other).
const maxSettledCalls = 1 << 16

// knownFromParents returns the data files the sink certainly holds when
// every parent of a version is complete there: the files their lists
// name (the files the mirror confirmed as it published each, see
// sink.FileListWriter), fetched from the mirror. Checking a new version
// against them, and the few files they lack one by one, costs a request
// per parent, where a listing of data_dir costs a page per thousand files
// of the whole repository, and a stat of each on a disk.
//
// Never the parents' catalogs: a parent's catalog that took its own
// reader over (a planted one, published because that reader lied) would
// take over the reader that reads it again here, and could name the
// version's new files as the parent's; a parent published in this run
// vouches for its files unchecked, so the version would be published
// without them. A list names only what the mirror confirmed, so a
// planted parent costs itself only. nil when a parent is not complete in
// the sink or has no usable list (written before lists were kept, a dry
// run's, of another epoch, damaged): every file is then checked against
// the listing. The caller closes it.
func (c *catalogReader) knownFromParents(ctx context.Context, parents []string) *parentFiles {
	if len(parents) == 0 {
		return nil
	}
	epoch := c.listEpoch(ctx)
	if epoch == "" {
		return nil
	}
	known := &parentFiles{}
	for _, p := range parents {
		c.mu.Lock()
		done, now := c.versions.published[p], c.versions.publishedNow[p]
		c.mu.Unlock()
		if !done {
			known.close()
			return nil
		}
		list, err := c.sink.State().FetchFileList(ctx, p, epoch, c.pool.Dir())
		if err != nil || list == nil {
			c.log.Info("parent has no usable file list in the mirror; checking every data file against a listing",
				zap.String("version", p), zap.Error(err))
			known.close()
			return nil
		}
		known.parents = append(known.parents, &parentList{list: list, now: now})
	}
	known.rewind()
	return known
}

// parentFiles are the files of a version's parents, complete in the
// sink, gone through in path order beside the version's own catalog: a
// file is asked for in path order, and each parent's list moves on to it.
type parentFiles struct {
	parents []*parentList
}

// parentList is one parent's list from the mirror.
type parentList struct {
	list *sink.FileList
	// now: published by this run, every file of it copied or confirmed
	// by it, so not confirmed again.
	now    bool
	cursor *sink.ListCursor
	cur    catalog.File
	more   bool
}

// rewind starts the parents' lists again from their first file; one
// that cannot be read again says nothing (its files are checked).
func (k *parentFiles) rewind() {
	if k == nil {
		return
	}
	for _, p := range k.parents {
		p.cursor.Close()
		c, err := p.list.Cursor()
		p.cursor, p.more = c, err == nil && c.Next()
		if p.more {
			p.cur = c.File()
		}
	}
}

// has says whether a parent lists the file at path with size, and
// whether one that does was published by this run (confirmed needs no
// look in the sink). Paths must be asked in path order; a parent's list
// that cannot be read back says nothing more (the file is checked).
func (k *parentFiles) has(path string, size int64) (listed, now bool) {
	if k == nil {
		return false, false
	}
	for _, p := range k.parents {
		for p.more && p.cur.Path < path {
			if p.more = p.cursor.Next(); p.more {
				p.cur = p.cursor.File()
			}
		}
		if p.more && p.cur.Path == path && p.cur.Size == size {
			listed = true
			now = now || p.now
		}
	}
	return listed, now
}

func (k *parentFiles) close() {
	if k == nil {
		return
	}
	for _, p := range k.parents {
		p.cursor.Close()
		p.list.Remove()
	}
}

// readSinkSorted reads one catalog of a version in the sink.
func (c *catalogReader) readSinkSorted(ctx context.Context, id, file string) (*catalog.Sorted, error) {
	name := repo.VersionFile(id, file)
	fetched, err := c.sink.Versions().FetchCatalog(ctx, c.pool, name)
	if err != nil {
		return nil, err
	}
	defer fetched.Remove()
	return c.src.Catalogs().ReadSorted(ctx, c.pool, fetched, name)
}

// readSinkFile reads one catalog of a version in the sink, every file
// in Files.
func (c *catalogReader) readSinkFile(ctx context.Context, id, file string) (*catalog.Catalog, error) {
	s, err := c.readSinkSorted(ctx, id, file)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Catalog()
}

// mirrorDataFiles makes sure the sink has every file of a catalog, with
// the recorded size, a batch at a time. Files known (see
// knownFromParents) at the recorded size are there already.
func (t *transfer) mirrorDataFiles(ctx context.Context, id string, files *catalog.Sorted, known *parentFiles) error {
	if sinkListed, _ := t.sink.Data().Listed(); files.Len() >= 2*listPart && (!sinkListed || !t.src.Data().Listed()) {
		// Where data_dir is listed for this version, in parts split
		// among the files its catalog names (worked out only by a store
		// that lists in parts).
		ctx = backend.WithListBounds(ctx, func() backend.ListSplit { return t.listBounds(files) })
	}
	m := &batchMirror{t: t, id: id, known: known, many: files.Len() > int64(maxStatChecks)}
	if m.many {
		m.sinkFiles = t.sink.Data().Cursor(ctx, t.src.Settings().DataDir)
		// Where the sink's data_dir was listed whole (it fitted a page:
		// a first mirror), source.Data.Size lists the upstream's once for the
		// run; a pass per version would list the pages that version's
		// copies fall in, and a version's new files are spread across
		// all of data_dir (a medium first mirror S3->S3: 4 % slower).
		// But not past sourcePassFiles, where that listing would hold
		// more than the heap should.
		if m.sinkFiles.Paged() || files.Len() > sourcePassFiles {
			ctx = t.withSourcePass(ctx)
		}
	}
	batch := make([]catalog.File, 0, min(files.Len(), int64(dataBatch)))
	var barrier pendingBarrier
	err := files.Each(func(f catalog.File) error {
		if batch = append(batch, f); len(batch) < dataBatch {
			return nil
		}
		copied, err := m.mirror(ctx, batch)
		batch = batch[:0]
		if err == nil && copied {
			// More batches follow: this one's copies are made durable
			// while the next is copied, so that the record of names
			// written without a barrier stays two batches long.
			err = barrier.start(ctx, t.sink.Durability())
		}
		return err
	})
	if err == nil && len(batch) > 0 {
		_, err = m.mirror(ctx, batch)
	}
	if berr := barrier.wait(); err == nil {
		err = berr
	}
	return err
}

// pendingBarrier is the barrier of a catalog's last batch, made while its
// next batch is looked up, recorded and copied: on a disk the barrier is
// a syncfs(2) that waits for write-back, which before took one core and
// none of the copies; at most one runs at a time, so the record of names
// written without a barrier holds at most the batch it covers and the
// one being copied.
type pendingBarrier struct {
	done chan error // nil: none started, or its result taken
}

// start waits for the barrier before it, then starts one covering every
// write returned so far.
func (b *pendingBarrier) start(ctx context.Context, d sink.Durability) error {
	if err := b.wait(); err != nil {
		return err
	}
	b.done = make(chan error, 1)
	go func() { b.done <- d.Barrier(ctx) }()
	return nil
}

// wait returns the result of the barrier started last, once it is done.
func (b *pendingBarrier) wait() error {
	if b.done == nil {
		return nil
	}
	err := <-b.done
	b.done = nil
	return err
}

// listBounds picks the bounds of a split listing of data_dir among a
// catalog's files, evenly, going through them once instead of holding
// every name, and how many of them each part holds: the store then asks
// for no more than that in each part's last page.
func (t *transfer) listBounds(files *catalog.Sorted) backend.ListSplit {
	n := files.Len()
	if n < 2*listPart {
		return backend.ListSplit{}
	}
	parts := min(int64(maxListParts), n/listPart)
	var split backend.ListSplit
	var i, from int64
	files.Each(func(f catalog.File) error {
		if k := int64(len(split.Bounds)) + 1; k < parts && i == n*k/parts {
			split.Bounds = append(split.Bounds, t.src.Settings().DataDir+f.Path)
			split.Expect = append(split.Expect, int(i+1-from))
			from = i + 1
		}
		i++
		return nil
	})
	return split
}

// batchMirror mirrors the files of one catalog a batch at a time.
type batchMirror struct {
	t       *transfer
	id      string
	known   *parentFiles
	checked int // files looked up so far, to choose stats or a listing
	// many: the catalog lists more files than are confirmed one by one
	// (maxStatChecks).
	many bool
	// sinkFiles is this catalog's pass over the sink's data_dir, in path
	// order (see sink.DataCursor), where many: its own, so that versions
	// mirrored at once never move each other's.
	sinkFiles *sink.DataCursor
}

// sinkFile is the sink's answer about one data file, asked in path
// order before the batch's files are checked at once (lookUp).
type sinkFile struct {
	asked bool
	size  int64
	ok    bool
	err   error
}

// mirror makes sure the sink has every file of a batch. Three steps, so
// that the names written without a barrier are recorded with one write
// per batch (see durability.go): look up the files this version is first
// to need, record those the sink lacks, copy them; then wait for the
// files other versions copy. No step waits on another version before
// this one's copies are settled. copied says whether this version copied
// any of the batch's files.
func (m *batchMirror) mirror(ctx context.Context, batch []catalog.File) (copied bool, err error) {
	t := m.t
	names := make([]string, len(batch)) // each file's name in both stores
	for i, f := range batch {
		names[i] = t.src.Data().Name(f.Path)
	}
	todo, parents := t.filesToCheck(batch, names, m.known)
	byStat := m.known != nil && m.checked+len(todo) <= maxStatChecks
	found := m.lookUp(ctx, batch, names, todo, parents, byStat)
	todo = append(todo, m.gone(ctx, batch, names, parents, found)...)
	m.checked += len(todo)
	errs := make([]error, len(batch))
	var mu sync.Mutex
	var mine []int // indexes whose copy this version makes
	calls := make([]*dataFileCall, len(batch))
	owned := make([]bool, len(batch))
	t.each(len(todo), func(k int) {
		i := todo[k]
		name := names[i]
		calls[i], owned[i] = t.claimDataFile(name, batch[i].Size)
		if !owned[i] {
			return
		}
		var known sinkFile
		if found != nil {
			known = found[i]
		}
		need, err := t.needsCopy(ctx, name, batch[i].Size, byStat, known)
		if err != nil || !need {
			t.settleDataFile(name, calls[i], err)
			errs[i] = err
			return
		}
		mu.Lock()
		mine = append(mine, i)
		mu.Unlock()
	})
	slices.Sort(mine) // in path order, for the source's pass (sourceSize)
	if err := m.copyMine(ctx, batch, names, mine, calls, errs); err != nil {
		return false, err
	}
	for _, i := range todo {
		if !owned[i] {
			errs[i] = t.awaitDataFile(ctx, calls[i], names[i], batch[i].Size)
		}
	}
	for i, err := range errs {
		if err != nil {
			return len(mine) > 0, dataFileRefusal(m.id, names[i], err)
		}
	}
	return len(mine) > 0, nil
}

// copyMine records the files of a batch this version copies (mine:
// indexes into batch and batchNames) as written without a barrier, and
// copies them.
func (m *batchMirror) copyMine(ctx context.Context, batch []catalog.File, batchNames []string, mine []int, calls []*dataFileCall, errs []error) error {
	t := m.t
	names := make([]string, len(mine))
	sizes := make([]int64, len(mine))
	for k, i := range mine {
		names[k], sizes[k] = batchNames[i], batch[i].Size
	}
	if err := t.sink.Durability().RecordUnsynced(ctx, names, sizes); err != nil {
		for k, i := range mine {
			t.settleDataFile(names[k], calls[i], err)
		}
		return err
	}
	dctx := t.sink.Durability().WithoutSync(ctx)
	defer t.readAhead(ctx, names, sizes)()
	t.each(len(mine), func(k int) {
		i, name := mine[k], names[k]
		err := t.copyFile(dctx, name, batch[i].Size)
		t.sink.Durability().WroteUnsynced(name)
		t.settleDataFile(name, calls[i], err)
		errs[i] = err
	})
	return nil
}

// Read-ahead of a batch's copies from a store that takes it (a local
// folder): files of at most readAheadFile bytes, until readAheadBatch
// bytes are announced. Larger files are read ahead by the kernel as they
// are read; the bound keeps what is announced from pushing out of the
// page cache what the copies have not read yet.
const (
	readAheadFile  = 1 << 20
	readAheadBatch = 64 << 20
)

// readAhead announces the small files among the batch's copies (names,
// of sizes) to the source, in the order they are copied, while they are
// copied; stop ends it and waits for it.
func (t *transfer) readAhead(ctx context.Context, names []string, sizes []int64) (stop func()) {
	// A dry run reads no data file (copyFile), so announces none.
	if !t.src.Data().CanReadAhead() || t.dryRun {
		return func() {}
	}
	var small []string
	var total int64
	for k, name := range names {
		if sizes[k] >= 0 && sizes[k] <= readAheadFile && total+sizes[k] <= readAheadBatch {
			small = append(small, name)
			total += sizes[k]
		}
	}
	if len(small) < 2 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.src.Data().ReadAhead(ctx, small)
	}()
	return func() {
		cancel()
		<-done
	}
}

// filesToCheck returns the indexes into batch of the data files to check
// in the sink (todo): all but those a parent lists (see knownFromParents)
// at the recorded size; and of those a parent lists, the ones only to be
// confirmed there (parents: not those of a parent this run published,
// which it copied or confirmed).
func (t *transfer) filesToCheck(batch []catalog.File, names []string, known *parentFiles) (todo, parents []int) {
	for i, f := range batch {
		name := names[i]
		listed, now := known.has(f.Path, f.Size)
		switch {
		case !listed || f.Size < 0 || t.sink.Durability().IsDistrusted(name):
			todo = append(todo, i)
		case !now:
			parents = append(parents, i)
		}
	}
	return todo, parents
}

// lookUp asks the sink, in path order through the catalog's pass
// (sink.DataCursor), about the files of a batch it checks: the parents'
// files to confirm and, unless byStat, the others (todo) but those
// distrusted, which are copied whatever the sink holds. One goroutine
// asks, in order, as a merge with the listing needs; the answers are
// then used by the checks made at once. nil where the pass lists no
// pages: each file is then asked for as it is checked.
func (m *batchMirror) lookUp(ctx context.Context, batch []catalog.File, names []string, todo, parents []int, byStat bool) []sinkFile {
	if m.sinkFiles == nil || !m.sinkFiles.Paged() {
		return nil
	}
	t := m.t
	ask := make([]bool, len(batch))
	for _, i := range parents {
		ask[i] = true
	}
	if !byStat {
		for _, i := range todo {
			ask[i] = !t.sink.Durability().IsDistrusted(names[i])
		}
	}
	found := make([]sinkFile, len(batch))
	for i := range batch {
		if ask[i] {
			size, ok, err := m.sinkFiles.File(ctx, names[i])
			found[i] = sinkFile{asked: true, size: size, ok: ok, err: err}
		}
	}
	return found
}

// gone returns the parents' files of a batch (parents: indexes into
// batch) that the sink lacks or holds at another size: a lifecycle rule
// or an operator may have removed one since the parent was published,
// and a version is published only with every file. They are checked
// and copied as the version's own. From lookUp's answers (found) where
// it asked; otherwise several at a time: on a disk, or for a catalog of
// few files, each is a stat.
func (m *batchMirror) gone(ctx context.Context, batch []catalog.File, names []string, parents []int, found []sinkFile) []int {
	t := m.t
	lost := make([]bool, len(parents))
	if found != nil {
		for k, i := range parents {
			f := found[i]
			lost[k] = f.err != nil || !f.ok || (batch[i].Size >= 0 && f.size != batch[i].Size)
		}
	} else {
		t.each(len(parents), func(k int) {
			i := parents[k]
			lost[k] = !t.sink.Data().Has(ctx, t.src.Settings().DataDir, names[i], batch[i].Size, m.many)
		})
	}
	var todo []int
	for k, i := range parents {
		if lost[k] {
			todo = append(todo, i)
		}
	}
	return todo
}

// dataFileCall is the one copy of a data file in a run; versions that
// need the same file wait on done and share its result.
type dataFileCall struct {
	done chan struct{}
	size int64
	err  error
}

// dataCalls is the run's calls for data files: those in flight, and the
// last maxSettledCalls settled, oldest first in settled.
type dataCalls struct {
	calls   map[string]*dataFileCall
	settled []string // a ring of maxSettledCalls names
	next    int      // where the next settled name goes in the ring
}

// claimDataFile returns the run's call for a data file; owner is true for
// the first version to ask, which must settle it (settleDataFile).
func (t *transfer) claimDataFile(name string, size int64) (call *dataFileCall, owner bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if call, ok := t.calls.calls[name]; ok {
		return call, false
	}
	call = &dataFileCall{done: make(chan struct{}), size: size}
	if t.calls.calls == nil {
		t.calls.calls = map[string]*dataFileCall{}
	}
	t.calls.calls[name] = call
	return call, true
}

// settleDataFile settles the call for name with err, and lets the oldest
// settled call go past maxSettledCalls: versions that have it keep it, one
// that asks later is its owner and asks the sink.
func (t *transfer) settleDataFile(name string, call *dataFileCall, err error) {
	call.err = err
	close(call.done)
	t.mu.Lock()
	defer t.mu.Unlock()
	d := &t.calls
	if len(d.settled) < maxSettledCalls {
		d.settled = append(d.settled, name)
		return
	}
	if old := d.settled[d.next]; d.calls[old] != nil && d.calls[old] != call {
		select {
		case <-d.calls[old].done:
			delete(d.calls, old)
		default: // claimed again since, and in flight
		}
	}
	d.settled[d.next] = name
	d.next = (d.next + 1) % maxSettledCalls
}

// awaitDataFile waits for the version that claimed a data file to settle
// it. Another version may record another size: each is judged on its own
// record against the file, so the refusal lands on the one that
// disagrees with it, whichever came first.
func (t *transfer) awaitDataFile(ctx context.Context, call *dataFileCall, name string, size int64) error {
	select {
	case <-call.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if size >= 0 && call.size >= 0 && call.size != size {
		return t.ensureDataFile(ctx, name, size, true)
	}
	return call.err
}
