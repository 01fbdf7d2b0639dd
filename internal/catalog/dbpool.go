package catalog

import (
	"context"
	"path/filepath"
	gosync "sync"
)

// dbPool is the DuckDB instances of a reader (child.go). A reader of one
// catalog (oneShot, every reader since issue 40) starts its one instance
// ahead, as soon as it is confined and before its request comes: starting
// and locking down a DuckDB is about half of a read of 400 files (33 ms
// of 65 on the 2-core test machine), and a reader started ahead waits
// for its request anyway. Its instance is left as it is after the read:
// the reader ends.
//
// A reader of several catalogs (a test imitating the pools before issue
// 40) keeps its instance for the next catalog instead, detached.
//
// An instance may open files in the reader's folder only (allowed_
// directories: the pool's private folder of this reader, Pool), or, for a
// reader of one file, that file (allowed); the catalogs are attached one
// at a time, read-only and from base tables only, as by Read: no SQL of a
// catalog ever runs (views named ducklake_* are refused, a generated
// column too, and the catalog's macros are never called). An instance
// whose read failed in any way (a refusal, a limit, a cancelled context)
// is closed, never used again.
type dbPool struct {
	dir     string
	allow   string // the SET that names the files it may open; "": dir
	lim     Limits
	oneShot bool // one catalog: no detach, no close after it

	mu    gosync.Mutex
	idle  []*instance
	size  int
	ahead chan startedDB // the instance started ahead, until get takes it
}

// startedDB is an instance started ahead, or why it could not be.
type startedDB struct {
	in  *instance
	err error
}

func (p *dbPool) allowed() string {
	if p.allow != "" {
		return p.allow
	}
	return "SET allowed_directories=[" + sqlString(p.dir+string(filepath.Separator)) + "]"
}

// startAhead starts an instance in the background, for the next get.
func (p *dbPool) startAhead() {
	ch := make(chan startedDB, 1)
	p.ahead = ch
	go func() {
		in, err := startDuckDB(context.Background(), p.lim, p.allowed())
		ch <- startedDB{in, err}
	}()
}

// relimit sets the limits of the instances to come: one started ahead
// with others is closed.
func (p *dbPool) relimit(lim Limits) {
	lim = lim.WithDefaults()
	if lim.Threads == p.lim.Threads && lim.MemoryLimit == p.lim.MemoryLimit {
		return
	}
	p.lim = lim
	p.mu.Lock()
	ahead := p.ahead
	p.ahead = nil
	p.mu.Unlock()
	if ahead != nil {
		if s := <-ahead; s.in != nil {
			s.in.close()
		}
	}
}

// get returns the instance started ahead, an idle one, or starts one.
func (p *dbPool) get(ctx context.Context) (*instance, error) {
	p.mu.Lock()
	if ahead := p.ahead; ahead != nil {
		p.ahead = nil
		p.mu.Unlock()
		select {
		case s := <-ahead:
			return s.in, s.err
		case <-ctx.Done():
			go func() {
				if s := <-ahead; s.in != nil {
					s.in.close()
				}
			}()
			return nil, ctx.Err()
		}
	}
	if n := len(p.idle); n > 0 {
		in := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return in, nil
	}
	p.mu.Unlock()
	return startDuckDB(ctx, p.lim, p.allowed())
}

// put takes an instance back after a read; one whose read failed, or
// beyond the idle ones kept, is closed. A reader of one catalog leaves
// it: the reader ends.
func (p *dbPool) put(in *instance, ok bool) {
	if p.oneShot && ok {
		return
	}
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
