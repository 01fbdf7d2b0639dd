package catalog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	gosync "sync"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// Pool reads the catalogs of one upstream (or of one mirror) in one run
// with a few readers, each kept for catalog after catalog: starting a
// reader and its DuckDB costs about as much as reading a catalog of 400
// files (BENCHMARKS.md), and a mirror reads one per version.
//
// A pooled reader may read the files of the pool's folder only, a
// private one (0700) that holds nothing but the catalogs fetched into it
// with Fetch: the catalogs of the one upstream the pool serves, so a
// reader taken over by one of them can learn or say nothing that upstream
// could not already. A pool is never shared between upstreams or
// mirrors. A reader whose read failed in any way (a refusal, a limit, a
// crash, a cancelled context) is killed, never used again; one that has
// read readsPerReader catalogs is replaced, so that its CPU time limit
// stays that of a few reads.
type Pool struct {
	dir    string
	sortIn string   // where a read's sort makes its private folder: dir's parent
	dirFD  *os.File // the folder, open read-only: each reader's one descriptor
	lim    Limits
	size   int
	mu     gosync.Mutex
	idle   []*readerProc
	closed bool
	// waiting are the catalogs fetched into dir and not read yet; a read
	// asks its reader to check a few of them for views and macros with
	// its own (checkPooledObjects), and aheadBy remembers which reader
	// did, so that reading one of them goes to that reader where it is
	// idle.
	waiting map[string]bool
	aheadBy map[string]*readerProc
}

// NewPool makes the pool's folder in parent (os.TempDir when empty) and
// keeps up to size readers idle between reads.
func NewPool(parent string, size int, lim Limits) (*Pool, error) {
	dir, err := os.MkdirTemp(parent, "catalogs-")
	if err != nil {
		return nil, fmt.Errorf("a folder for catalogs: %w", err)
	}
	// MkdirTemp makes it 0700 already; made sure, as the readers may read
	// every file in it.
	if err := os.Chmod(dir, 0o700); err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("a folder for catalogs: %w", err)
	}
	fd, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("a folder for catalogs: %w", err)
	}
	return &Pool{dir: dir, sortIn: filepath.Dir(dir), dirFD: fd, lim: lim.WithDefaults(), size: max(size, 1), waiting: map[string]bool{}, aheadBy: map[string]*readerProc{}}, nil
}

// Dir is the pool's folder.
func (p *Pool) Dir() string { return p.dir }

// Fetch copies a catalog from r into the pool's folder (see Fetch).
func (p *Pool) Fetch(ctx context.Context, r backend.Reader, name string) (*Fetched, error) {
	f, err := Fetch(ctx, r, name, p.dir, p.lim.MaxSize)
	if err != nil {
		return nil, err
	}
	f.pool = p
	p.mu.Lock()
	p.waiting[filepath.Base(f.Path)] = true
	p.mu.Unlock()
	return f, nil
}

// forget drops what the pool knows of a file it fetched, removed now.
func (p *Pool) forget(file string) {
	p.mu.Lock()
	delete(p.waiting, filepath.Base(file))
	delete(p.aheadBy, filepath.Base(file))
	p.mu.Unlock()
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
	base := filepath.Base(file)
	proc, ahead, err := p.get(ctx, base)
	if err != nil {
		return nil, rename(err, name)
	}
	sorter := newFileSorter(p.sortIn, name, sortBudgetOf(p.lim, file))
	defer sorter.close()
	c, err := proc.readCatalog(ctx, request{name: name, file: base, ahead: ahead, lim: p.lim}, sorter)
	p.forget(file)
	if err != nil {
		p.drop(proc)
		return nil, err
	}
	// A catalog the sort refuses (a path of two sizes) is a refusal
	// like any other: its reader is not used again.
	sorted, err := sorter.finish(*c)
	if err != nil {
		p.drop(proc)
		return nil, err
	}
	p.put(proc)
	return sorted, nil
}

// get takes an idle reader (the one that checked base ahead, where it is
// idle) or starts one, and picks the catalogs waiting that it may check
// ahead with base.
func (p *Pool) get(ctx context.Context, base string) (*readerProc, []string, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, fmt.Errorf("catalog pool closed")
	}
	delete(p.waiting, base)
	var proc *readerProc
	pick := len(p.idle) - 1
	for i, r := range p.idle {
		if p.aheadBy[base] == r {
			pick = i
		}
	}
	if pick >= 0 {
		proc = p.idle[pick]
		p.idle = append(p.idle[:pick], p.idle[pick+1:]...)
	}
	p.mu.Unlock()
	if proc == nil {
		var err error
		if proc, err = startReader(ctx, p.dirFD, p.lim, readsPerReader); err != nil {
			return nil, nil, err
		}
	}
	p.mu.Lock()
	var ahead []string
	for f := range p.waiting {
		if len(ahead) == checkAhead {
			break
		}
		if p.aheadBy[f] == nil {
			ahead = append(ahead, f)
			p.aheadBy[f] = proc
		}
	}
	p.mu.Unlock()
	return proc, ahead, nil
}

// put takes a reader back after a good read; one past its reads, or
// beyond the idle ones kept, is closed.
func (p *Pool) put(proc *readerProc) {
	p.mu.Lock()
	if !p.closed && proc.reads < readsPerReader && len(p.idle) < p.size {
		p.idle = append(p.idle, proc)
		proc = nil
	}
	p.mu.Unlock()
	if proc != nil {
		p.drop(proc)
	}
}

// drop ends a reader (killed already where its read failed) and forgets
// what it checked ahead.
func (p *Pool) drop(proc *readerProc) {
	proc.close()
	p.mu.Lock()
	for f, r := range p.aheadBy {
		if r == proc {
			delete(p.aheadBy, f)
		}
	}
	p.mu.Unlock()
}

// Close ends the idle readers and removes the pool's folder with
// whatever is left in it.
func (p *Pool) Close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, r := range idle {
		r.close()
	}
	p.dirFD.Close()
	return os.RemoveAll(p.dir)
}
