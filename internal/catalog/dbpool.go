package catalog

import (
	"context"
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
// (views named ducklake_* are refused, a generated column too, and the
// catalog's macros are never called). An instance whose read failed in
// any way (a refusal, a limit, a cancelled context) is closed, never
// used again.
type dbPool struct {
	dir string
	lim Limits

	mu   gosync.Mutex
	idle []*instance
	size int
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
