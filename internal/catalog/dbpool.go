package catalog

import (
	"context"
	"fmt"
	"path/filepath"
	gosync "sync"
)

// dbPool is the DuckDB instances of a reader (child.go) that reads
// catalog after catalog of one upstream: starting, locking down and
// closing an instance cost about a third of reading a catalog of 400
// files (28 ms of 89 on the 2-core test machine), and a mirror reads one
// per version.
//
// A pooled instance may open files in the pool's folder only (the
// mirror's private folder of this upstream's catalogs, Pool); the
// catalogs are attached one at a time, read-only and from base tables
// only, as by Read, and detached after: no SQL of a catalog ever runs
// (views and macros named ducklake_* are refused, a generated column
// too). An instance whose read failed in any way (a refusal, a limit, a
// cancelled context) is closed, never used again.
type dbPool struct {
	dir string
	lim Limits

	mu       gosync.Mutex
	idle     []*instance
	size     int
	waiting  map[string]bool          // in dir, not read yet
	checked  map[string]*objectFound  // checked ahead: what checkObjects would find (nil: nothing)
	checking map[string]chan struct{} // being checked ahead by a read: closed when that check is over
}

// checkAhead is how many catalogs waiting to be read one check of
// objects looks at besides the one being read.
const checkAhead = 7

// forget drops what the pool knows of a file it fetched, removed now.
func (p *dbPool) forget(file string) {
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

// get returns an idle instance, or starts one.
func (p *dbPool) get(ctx context.Context) (*instance, error) {
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
func (p *dbPool) put(in *instance, ok bool) {
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
func (r *reader) attachPooled(pool *dbPool, file string) error {
	in, err := pool.get(r.ctx)
	if err != nil {
		return r.errf("%w", err)
	}
	r.db, r.conn, r.pooled = in.db, in.conn, in
	return r.attach(file)
}
