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
	// warming is closed once the reader started ahead (warm) is idle or
	// failed to start; nil while none is starting. Close waits for it
	// (started).
	warming chan struct{}
	started gosync.WaitGroup
	busy    int // readers reading
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
	return &Pool{dir: dir, sortIn: filepath.Dir(dir), dirFD: fd, lim: lim.WithDefaults(), size: max(size, 1)}, nil
}

// Dir is the pool's folder.
func (p *Pool) Dir() string { return p.dir }

// Fetch copies a catalog from r into the pool's folder (see Fetch).
// While it comes, a reader is started for it where none is idle: a
// reader's start (an exec, the sandbox, DuckDB) is then paid while the
// bytes come, not before the read.
func (p *Pool) Fetch(ctx context.Context, r backend.Reader, name string) (*Fetched, error) {
	p.warm()
	return Fetch(ctx, r, name, p.dir, p.lim.MaxSize)
}

// warm starts a reader, in the background, to be idle for the next
// read, where the pool has none at all: one, so that a run that fetches
// two catalogs for one difference starts one reader. One that fails to
// start is forgotten: the read starts its own and says why.
func (p *Pool) warm() {
	p.mu.Lock()
	if p.closed || len(p.idle) > 0 || p.warming != nil || p.busy > 0 {
		p.mu.Unlock()
		return
	}
	warming := make(chan struct{})
	p.warming = warming
	p.started.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.started.Done()
		proc, err := startReader(context.Background(), p.dirFD, p.lim, readsPerReader)
		p.mu.Lock()
		p.warming = nil
		if err == nil && !p.closed && len(p.idle) < p.size {
			p.idle = append(p.idle, proc)
			proc = nil
		}
		p.mu.Unlock()
		close(warming)
		if proc != nil {
			proc.close()
		}
	}()
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
	proc, err := p.get(ctx)
	if err != nil {
		return nil, rename(err, name)
	}
	defer p.idleAgain()
	sorter := newFileSorter(p.sortIn, name, sortBudgetOf(p.lim, file))
	defer sorter.close()
	c, err := proc.readCatalog(ctx, request{name: name, file: filepath.Base(file), lim: p.lim}, sorter)
	if err != nil {
		proc.close()
		return nil, err
	}
	// A catalog the sort refuses (a path of two sizes) is a refusal
	// like any other: its reader is not used again.
	sorted, err := sorter.finish(*c)
	if err != nil {
		proc.close()
		return nil, err
	}
	p.put(proc)
	return sorted, nil
}

// get takes an idle reader, waits for the one being started ahead, or
// starts one.
func (p *Pool) get(ctx context.Context) (*readerProc, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("catalog pool closed")
		}
		if n := len(p.idle); n > 0 {
			proc := p.idle[n-1]
			p.idle = p.idle[:n-1]
			p.busy++
			p.mu.Unlock()
			return proc, nil
		}
		warming := p.warming
		if warming == nil {
			p.busy++
			p.mu.Unlock()
			break
		}
		p.mu.Unlock()
		select {
		case <-warming:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	proc, err := startReader(ctx, p.dirFD, p.lim, readsPerReader)
	if err != nil {
		p.idleAgain()
	}
	return proc, err
}

// idleAgain ends a read's use of its reader, put back or closed.
func (p *Pool) idleAgain() {
	p.mu.Lock()
	p.busy--
	p.mu.Unlock()
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
		proc.close()
	}
}

// Close ends the idle readers and removes the pool's folder with
// whatever is left in it.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.started.Wait()
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, r := range idle {
		r.close()
	}
	p.dirFD.Close()
	return os.RemoveAll(p.dir)
}
