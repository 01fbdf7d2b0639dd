package catalog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	gosync "sync"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// Pool reads many catalogs with a few DuckDB instances, each kept for
// catalog after catalog: starting, locking down and closing an instance
// cost about a third of reading a catalog of 400 files (28 ms of 89 on
// the 2-core test machine), and a mirror reads one per version.
//
// A pooled instance may open files in the pool's folder only, a private
// one (0700) that holds nothing but the catalogs fetched into it with
// Fetch; where Read opens a catalog alone it may open that one file. The
// catalogs are attached one at a time, read-only and from base tables
// only, as by Read, and detached after: no SQL of a catalog ever runs
// (views and macros named ducklake_* are refused, a generated column
// too). An instance whose read failed in any way (a refusal, a limit, a
// cancelled context) is closed, never used again.
type Pool struct {
	dir string
	lim Limits

	mu       gosync.Mutex
	idle     []*instance
	size     int
	waiting  map[string]bool          // fetched into dir, not read yet
	checked  map[string]*objectFound  // checked ahead: what checkObjects would find (nil: nothing)
	checking map[string]chan struct{} // being checked ahead by a read: closed when that check is over
}

// checkAhead is how many catalogs waiting to be read one check of
// objects looks at besides the one being read.
const checkAhead = 7

// NewPool makes the pool's folder in parent (os.TempDir when empty) and
// keeps up to size instances idle between reads.
func NewPool(parent string, size int, lim Limits) (*Pool, error) {
	dir, err := os.MkdirTemp(parent, "catalogs-")
	if err != nil {
		return nil, fmt.Errorf("a folder for catalogs: %w", err)
	}
	// MkdirTemp makes it 0700 already; made sure, as the instances trust
	// every file in it.
	if err := os.Chmod(dir, 0o700); err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("a folder for catalogs: %w", err)
	}
	return &Pool{dir: dir, lim: lim.WithDefaults(), size: max(size, 1), waiting: map[string]bool{}, checked: map[string]*objectFound{}, checking: map[string]chan struct{}{}}, nil
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
	p.waiting[f.Path] = true
	p.mu.Unlock()
	return f, nil
}

// forget drops what the pool knows of a file it fetched, removed now.
func (p *Pool) forget(file string) {
	p.mu.Lock()
	delete(p.waiting, file)
	delete(p.checked, file)
	delete(p.checking, file)
	p.mu.Unlock()
}

// checkPooledObjects is checkObjects with a pooled DuckDB: a catalog
// checked ahead with another is not listed again, and the others waiting
// (fetched, not read yet) are attached beside this one and checked with
// the same listing. Anything that goes wrong with them leaves them to be
// checked when they are read.
//
// A catalog another read is checking ahead right now waits for that
// check rather than listing every function a second time (the listing is
// the costly part, and both instances share the same cores).
func (r *reader) checkPooledObjects() error {
	p := r.pool
	p.mu.Lock()
	delete(p.waiting, r.file)
	if ch := p.checking[r.file]; ch != nil {
		p.mu.Unlock()
		select {
		case <-ch:
		case <-r.ctx.Done():
			return r.errf("listing the catalog's objects: %w", r.ctx.Err())
		}
		p.mu.Lock()
	}
	found, done := p.checked[r.file]
	var ahead []string
	batch := make(chan struct{})
	if !done {
		for f := range p.waiting {
			_, ok := p.checked[f]
			if !ok && p.checking[f] == nil && len(ahead) < checkAhead {
				ahead = append(ahead, f)
				p.checking[f] = batch
			}
		}
	}
	p.mu.Unlock()
	if done {
		return r.objectError(found)
	}
	defer func() {
		p.mu.Lock()
		for _, f := range ahead {
			delete(p.checking, f)
		}
		p.mu.Unlock()
		close(batch)
	}()
	// The others' share of the work has a deadline of its own, a quarter
	// of this read's: a catalog waiting that is slow to attach must not
	// make this one's read run out of time.
	actx, cancel := context.WithTimeout(r.ctx, r.lim.Timeout/4)
	defer cancel()
	dbs := []string{"cat"}
	names := map[string]string{}
	for i, f := range ahead {
		db := fmt.Sprintf("ahead%d", i)
		if _, err := r.conn.ExecContext(actx, "ATTACH "+sqlString(f)+" AS "+db+" (TYPE duckdb, READ_ONLY)"); err == nil {
			dbs = append(dbs, db)
			names[db] = f
		}
	}
	// Alone, the catalog's own check has all of its read's time.
	qctx := r.ctx
	if len(names) > 0 {
		qctx = actx
	}
	all, err := findObjects(qctx, r.conn, dbs)
	for db := range names {
		if _, derr := r.conn.ExecContext(context.Background(), "DETACH "+db); derr != nil {
			r.dirty = true // not used again
		}
	}
	if err != nil && len(names) > 0 {
		// Without the others, as a read alone checks.
		names = nil
		all, err = findObjects(r.ctx, r.conn, []string{"cat"})
	}
	if err != nil {
		return r.errf("listing the catalog's objects: %w", err)
	}
	p.mu.Lock()
	for db, f := range names {
		if p.checking[f] == batch { // not removed meanwhile
			p.checked[f] = all[db]
		}
	}
	p.mu.Unlock()
	return r.objectError(all["cat"])
}

// Read reads the catalog at file as Read does, with one of the pool's
// instances when file is in the pool's folder (else with one of its own).
func (p *Pool) Read(ctx context.Context, file, name string) (*Catalog, error) {
	if filepath.Dir(file) != p.dir {
		return Read(ctx, file, name, p.lim)
	}
	return read(ctx, file, name, p.lim, p)
}

// Close closes the idle instances and removes the pool's folder with
// whatever is left in it.
func (p *Pool) Close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.size = nil, 0
	p.mu.Unlock()
	for _, in := range idle {
		in.close()
	}
	return os.RemoveAll(p.dir)
}

// get returns an idle instance, or starts one.
func (p *Pool) get(ctx context.Context) (*instance, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		in := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return in, nil
	}
	p.mu.Unlock()
	return startDuckDB(ctx, p.lim, "SET allowed_directories=["+sqlString(p.dir+string(filepath.Separator))+"]")
}

// put takes an instance back after a read; one whose read failed, or
// beyond the idle ones kept, is closed.
func (p *Pool) put(in *instance, ok bool) {
	p.mu.Lock()
	if ok && len(p.idle) < p.size {
		p.idle = append(p.idle, in)
		in = nil
	}
	p.mu.Unlock()
	if in != nil {
		in.close()
	}
}

// attachPooled attaches the catalog to one of pool's instances.
func (r *reader) attachPooled(pool *Pool, file string) error {
	in, err := pool.get(r.ctx)
	if err != nil {
		return r.errf("%w", err)
	}
	r.db, r.conn, r.pooled = in.db, in.conn, in
	return r.attach(file)
}
