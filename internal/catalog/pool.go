package catalog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	gosync "sync"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// Pool reads the catalogs of one upstream (or of one mirror) in one run,
// each with a reader of its own, started ahead: starting a reader and
// its DuckDB costs about as much as reading a catalog of 400 files
// (BENCHMARKS.md), and is paid while a catalog is fetched.
//
// A reader is started ahead for each catalog fetched to be read, up to
// the pool's size at once: as a read takes its reader, the next
// catalog's starts, so that every read finds one ready (or on its way),
// not only the first ones.
//
// One catalog per reader: a reader started ahead has a folder of its own
// in the pool's (0700), empty until a read links the catalog into it (a
// difference's too: its parent comes as the mirror's list, never as a
// catalog). A reader taken over by one catalog therefore never sees
// another one (a later version, a parent) and can lie about none but its
// own. Once it
// has answered it is ended; one left waiting for its request longer than
// a catalog's timeout is ended too, and its CPU limit is one catalog's.
type Pool struct {
	dir    string
	sortIn string // where a read's sort makes its private folder: dir's parent
	lim    Limits
	size   int
	mu     gosync.Mutex
	idle   []*pooledReader
	closed bool
	// warming counts the readers being started ahead; warmed is closed
	// (and replaced) each time one of them is idle or failed to start.
	warming int
	warmed  chan struct{}
	// fetching counts the fetches under way of catalogs to be read, and
	// unread the catalogs fetched whose read has not taken a reader yet:
	// together, the readers a run will want next.
	fetching int
	unread   map[string]bool
	started  gosync.WaitGroup
	// stop ends the starts under way as the pool closes; ending waits
	// for the readers ended in the background after their read.
	stop   context.Context
	cancel context.CancelFunc
	ending gosync.WaitGroup
}

// pooledReader is a reader of the pool and its folder.
type pooledReader struct {
	proc  *readerProc
	dir   string
	timer *time.Timer // ends it while it waits for its request too long
}

// NewPool makes the pool's folder in parent (os.TempDir when empty) and
// keeps up to size readers started ahead.
func NewPool(parent string, size int, lim Limits) (*Pool, error) {
	dir, err := os.MkdirTemp(parent, "catalogs-")
	if err != nil {
		return nil, fmt.Errorf("a folder for catalogs: %w", err)
	}
	// MkdirTemp makes it 0700 already; made sure, as it holds the
	// catalogs and the readers' folders.
	if err := os.Chmod(dir, 0o700); err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("a folder for catalogs: %w", err)
	}
	stop, cancel := context.WithCancel(context.Background())
	return &Pool{dir: dir, sortIn: filepath.Dir(dir), lim: lim.WithDefaults(), size: max(size, 1), warmed: make(chan struct{}),
		unread: map[string]bool{}, stop: stop, cancel: cancel}, nil
}

// Dir is the pool's folder.
func (p *Pool) Dir() string { return p.dir }

// Fetch copies a catalog from r into the pool's folder (see Fetch), to
// be read with a reader of its own. While it comes, a reader is started
// ahead for it where fewer than the pool's size are: a reader's start
// (an exec, the sandbox, DuckDB) is then paid while the bytes come, not
// before the read.
func (p *Pool) Fetch(ctx context.Context, r backend.Reader, name string) (*Fetched, error) {
	p.mu.Lock()
	p.fetching++
	p.mu.Unlock()
	p.warm()
	f, err := Fetch(ctx, r, name, p.dir, p.lim.MaxSize)
	p.mu.Lock()
	p.fetching--
	if err == nil {
		p.unread[f.Path] = true
		f.pool = p
	}
	p.mu.Unlock()
	return f, err
}

// taken says the catalog at file no longer waits for a reader: its read
// took one, or it was removed unread.
func (p *Pool) taken(file string) {
	p.mu.Lock()
	delete(p.unread, file)
	p.mu.Unlock()
}

// warm starts readers, in the background, to wait for the reads to
// come: as many as the catalogs fetched or being fetched to be read, up
// to the pool's size. One that fails to start is forgotten: the read
// starts its own and says why.
func (p *Pool) warm() {
	for {
		p.mu.Lock()
		if p.closed || len(p.idle)+p.warming >= min(p.size, p.fetching+len(p.unread)) {
			p.mu.Unlock()
			return
		}
		p.warming++
		p.started.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.started.Done()
			r, err := p.start(p.stop)
			p.mu.Lock()
			p.warming--
			if err == nil && !p.closed {
				p.idleLocked(r)
				r = nil
			}
			close(p.warmed)
			p.warmed = make(chan struct{})
			p.mu.Unlock()
			if r != nil {
				r.close()
			}
		}()
	}
}

// start starts a reader in a new folder of its own.
func (p *Pool) start(ctx context.Context) (*pooledReader, error) {
	dir, err := os.MkdirTemp(p.dir, "reader-")
	if err != nil {
		return nil, fmt.Errorf("a folder for a catalog reader: %w", err)
	}
	fd, err := os.Open(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("a folder for a catalog reader: %w", err)
	}
	proc, err := startReader(ctx, fd, p.lim, pooledReads())
	fd.Close()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &pooledReader{proc: proc, dir: dir}, nil
}

// pooledReads is the catalogs a pooled reader reads: one, unless a test
// imitates the pools before issue 40.
func pooledReads() int { return max(knobs.readsPerReader, 1) }

// idleLocked keeps r for a read, with a timer.
func (p *Pool) idleLocked(r *pooledReader) {
	p.idle = append(p.idle, r)
	wait := p.lim.Timeout
	if knobs.idle > 0 {
		wait = knobs.idle
	}
	r.timer = time.AfterFunc(wait, func() {
		p.mu.Lock()
		i := slices.Index(p.idle, r)
		if i >= 0 {
			p.idle = slices.Delete(p.idle, i, i+1)
		}
		p.mu.Unlock()
		if i >= 0 {
			r.close()
		}
	})
}

// close ends the reader and removes its folder.
func (r *pooledReader) close() {
	r.proc.close()
	os.RemoveAll(r.dir)
}

// Read reads the catalog at file as Read does, with one of the pool's
// readers when file is in the pool's folder (else with one of its own):
// every file in Files. ReadSorted holds no list of them.
func (p *Pool) Read(ctx context.Context, file, name string) (*Catalog, error) {
	s, err := p.ReadSorted(ctx, file, name)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Catalog()
}

// ReadSorted reads the catalog at file (in the pool's folder) with one
// of the pool's readers, and returns it read whole and checked, its files
// in path order, one per path: held in memory up to a bound, beyond it
// on disk, sorted in a private folder beside the pool's (sort.go). The
// caller closes it.
func (p *Pool) ReadSorted(ctx context.Context, file, name string) (*Sorted, error) {
	if name == "" {
		name = file
	}
	if filepath.Dir(file) != p.dir {
		return readSortedAlone(ctx, file, name, p.lim, p.sortIn)
	}
	r, err := p.get(ctx, file)
	if err != nil {
		return nil, rename(err, name)
	}
	base, err := r.link(file)
	if err != nil {
		p.done(r, false)
		return nil, fmt.Errorf("catalog %s: %w", name, err)
	}
	sorter := newFileSorter(p.sortIn, name, sortBudgetOf(p.lim, file))
	defer sorter.close()
	c, err := r.proc.readCatalog(ctx, request{name: name, file: base, lim: p.lim}, sorter)
	if err != nil {
		p.done(r, false)
		return nil, err
	}
	// A catalog the sort refuses (a path of two sizes) is a refusal
	// like any other.
	sorted, err := sorter.finish(*c)
	p.done(r, err == nil)
	if err != nil {
		return nil, err
	}
	return sorted, nil
}

// link links file (in the pool's folder) into the reader's, and returns
// its name there.
func (r *pooledReader) link(file string) (string, error) {
	base := filepath.Base(file)
	if err := os.Link(file, filepath.Join(r.dir, base)); err != nil {
		return "", fmt.Errorf("linking it for its reader: %w", err)
	}
	return base, nil
}

// unlink removes what link linked into the reader's folder.
func (r *pooledReader) unlink() {
	ents, _ := os.ReadDir(r.dir)
	for _, e := range ents {
		os.Remove(filepath.Join(r.dir, e.Name()))
	}
}

// get takes a reader started ahead for the read of file, waits for one
// being started, or starts one; the next catalog's reader is started
// ahead as this one is taken.
func (p *Pool) get(ctx context.Context, file string) (*pooledReader, error) {
	p.taken(file)
	defer p.warm()
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("catalog pool closed")
		}
		if n := len(p.idle); n > 0 {
			// Taken from idle under the lock: its timer, if it fires
			// now, finds it gone and leaves it.
			r := p.idle[0]
			p.idle = p.idle[1:]
			p.mu.Unlock()
			r.timer.Stop()
			return r, nil
		}
		warmed := p.warmed
		if p.warming == 0 {
			p.mu.Unlock()
			break
		}
		p.mu.Unlock()
		select {
		case <-warmed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return p.start(ctx)
}

// done ends a read's use of its reader: ended with its folder, or, where
// a test imitates the pools before issue 40, kept for the next.
func (p *Pool) done(r *pooledReader, ok bool) {
	r.unlink()
	if ok && r.proc.reads < pooledReads() {
		p.mu.Lock()
		if !p.closed {
			p.idleLocked(r)
			r = nil
		}
		p.mu.Unlock()
	}
	if r != nil {
		// Not waited for: it has answered, and ends as its stdin
		// closes. Close waits.
		p.ending.Add(1)
		go func() {
			defer p.ending.Done()
			r.close()
		}()
	}
}

// Close ends the readers started ahead and removes the pool's folder
// with whatever is left in it.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.started.Wait()
	p.ending.Wait()
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, r := range idle {
		r.timer.Stop()
		r.close()
	}
	return os.RemoveAll(p.dir)
}
