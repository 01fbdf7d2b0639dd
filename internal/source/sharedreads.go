package source

import (
	"bufio"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/scratch"
)

// A fan-out's catalogs are read once. Reading a catalog (a confined
// reader's DuckDB query) is most of what a sink costs on its own: 63 % of
// the CPU of a run to one sink of the medium repository, where writing a
// gigabyte of data files durably is the rest. Every sink reads the same
// catalogs, as the version to copy and again as the parent its child is
// checked against (from the sink's own copy, the same bytes), so the
// first read of a catalog's bytes is kept for the rest of the run and
// every later one takes it.
//
// A read is named by the sha256 of the bytes read (the copy's, as
// catalog.Fetch hashed it on the way to the disk), the catalog's name in
// the repository (which a refusal names) and, for a difference, the
// sha256 of the parent's list's entries: the same bytes under the same name read by
// the same reader under the same limits (a run's) give the same files.
// Only a read that succeeded is kept; an error, a refusal among them, is
// the asking sink's own, and the next sink reads again.
//
// What is kept is the read's files, written to a private folder of the
// run (scratch.Private), not held in memory: the medium repository's 50
// catalogs name 510,000 files in all, about 50 MiB held. A catalog of
// more than maxSharedFiles files (whose sort went to disk) is not kept.

// maxSharedFiles is the most files a kept read lists: about what a
// catalog's sort holds in memory before it goes to disk (catalog's
// sortMemory of 8 MiB), so that a later sink's copy in memory is no
// larger than its own read would have made.
const maxSharedFiles = 50_000

// sharedRead is a catalog read (or a difference) as the first sink to ask
// made it; later askers wait for it (done) and read its file.
type sharedRead struct {
	key  string
	done chan struct{}
	file string // the read, gob-encoded; "" where it was not kept
}

// keptRead is what a sharedRead's file holds: one of the two.
type keptRead struct {
	Catalog *catalog.Catalog
	Diff    *catalog.Difference
}

// reads is the fan-out's catalog reads, by key (readKey).
type reads struct {
	dir     *scratch.Dir // made at the first read kept
	flights map[string]*sharedRead
	n       int
}

// ReadSorted reads the fetched catalog (named name in the repository)
// with one of pool's readers (catalog.Pool.ReadSorted); in a fan-out's
// run, the first read of these bytes under this name is kept and every
// later one takes it.
func (c Catalogs) ReadSorted(ctx context.Context, pool *catalog.Pool, fetched *catalog.Fetched, name string) (*catalog.Sorted, error) {
	read := func() (*catalog.Sorted, error) { return pool.ReadSorted(ctx, fetched.Path, name) }
	sh := &c.s.shared
	f, leader := sh.flight(readKey("read", name, fetched.SHA256))
	if f == nil {
		return read()
	}
	if !leader {
		if k, ok := sh.wait(ctx, f); ok && k.Catalog != nil {
			return catalog.Listed(k.Catalog), nil
		}
		return read()
	}
	defer sh.land(f)
	s, err := read()
	if err != nil || s.Len() > maxSharedFiles {
		return s, err
	}
	cat, err := s.Catalog()
	if err == nil {
		sh.keep(f, keptRead{Catalog: cat})
	}
	return s, nil
}

// Diff reads the fetched catalog (name) as its difference from the
// parent's list (catalog.Pool.Diff, its files in Files), whose entries'
// sha256 listSum says (asked for only in a fan-out's run, before the
// read: a run to one sink hashes no list again); in a fan-out's run, the
// first difference of these catalog bytes from a list of these entries
// is kept and every later one takes it (the difference depends on
// nothing else: each sink's list of the same entries gives the same).
func (c Catalogs) Diff(ctx context.Context, pool *catalog.Pool, fetched *catalog.Fetched, name string, parent catalog.ParentList, listSum func() string) (*catalog.Difference, error) {
	read := func() (*catalog.Difference, error) {
		return pool.Diff(ctx, fetched.Path, name, parent, nil)
	}
	sh := &c.s.shared
	var key string
	if sh.sharing() {
		if sum := listSum(); sum != "" {
			key = readKey("diff", name, fetched.SHA256, "list", sum)
		}
	}
	f, leader := sh.flight(key)
	if f == nil {
		return read()
	}
	if !leader {
		if k, ok := sh.wait(ctx, f); ok && k.Diff != nil {
			return k.Diff, nil
		}
		return read()
	}
	defer sh.land(f)
	d, err := read()
	if err == nil && len(d.Files) <= maxSharedFiles {
		sh.keep(f, keptRead{Diff: d})
	}
	return d, err
}

// readKey names a read by what it read; "" where a sum is missing (such
// a read is never shared).
func readKey(kind string, parts ...string) string {
	key := kind
	for i, p := range parts {
		if p == "" && i%2 == 1 {
			return ""
		}
		key += "\x00" + p
	}
	return key
}

// sharing says whether reads are kept for later sinks (a fan-out's run).
func (sh *share) sharing() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.on
}

// flight is the read of key: leader true where the caller is the first
// to ask and makes it (then closes f.done); nil where nothing is shared
// (no fan-out, no key).
func (sh *share) flight(key string) (f *sharedRead, leader bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.on || key == "" {
		return nil, false
	}
	if sh.reads.flights == nil {
		sh.reads.flights = map[string]*sharedRead{}
	}
	if f := sh.reads.flights[key]; f != nil {
		return f, false
	}
	f = &sharedRead{key: key, done: make(chan struct{})}
	sh.reads.flights[key] = f
	return f, true
}

// land ends the leader's read f: one not kept is forgotten, so that the
// next to ask reads (and may keep) it; those waiting read for themselves.
func (sh *share) land(f *sharedRead) {
	if f.file == "" {
		sh.mu.Lock()
		delete(sh.reads.flights, f.key)
		sh.mu.Unlock()
	}
	close(f.done)
}

// wait waits for f's read and reads what was kept of it; ok false where
// nothing was (the caller reads for itself).
func (sh *share) wait(ctx context.Context, f *sharedRead) (k keptRead, ok bool) {
	select {
	case <-f.done:
	case <-ctx.Done():
		return k, false
	}
	if f.file == "" {
		return k, false
	}
	file, err := os.Open(f.file)
	if err != nil {
		return k, false
	}
	defer file.Close()
	if err := gob.NewDecoder(bufio.NewReader(file)).Decode(&k); err != nil {
		return keptRead{}, false
	}
	return k, true
}

// keep writes k, f's read, for the later askers (before f.done is
// closed); a read that cannot be written is not kept (they read for
// themselves).
func (sh *share) keep(f *sharedRead, k keptRead) {
	sh.mu.Lock()
	if sh.reads.dir == nil {
		dir, err := scratch.Private()
		if err != nil {
			sh.mu.Unlock()
			return
		}
		sh.reads.dir = dir
	}
	sh.reads.n++
	name := filepath.Join(sh.reads.dir.Path(), "read-"+strconv.Itoa(sh.reads.n))
	sh.mu.Unlock()
	if err := writeKept(name, k); err != nil {
		os.Remove(name)
		return
	}
	f.file = name
}

func writeKept(name string, k keptRead) error {
	file, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(file)
	err = gob.NewEncoder(w).Encode(k)
	if err == nil {
		err = w.Flush()
	}
	return errors.Join(err, file.Close())
}

// closeReads removes what was kept.
func (sh *share) closeReads() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.reads.flights = nil
	if sh.reads.dir == nil {
		return nil
	}
	err := sh.reads.dir.Close()
	sh.reads.dir = nil
	if err != nil {
		return fmt.Errorf("fan-out's kept catalog reads: %w", err)
	}
	return nil
}
