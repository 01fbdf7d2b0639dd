// Package counting wraps a store to count what is asked of it: operations
// by kind and bytes moved, to see how many requests a sync costs.
//
// Its counts are read by the benchmarks and by tests, never in production:
// fdl-bench (cmd/fdl-bench) runs the engine in-process through
// it for the request counts of its local runs; internal/sync's Benchmark*
// report them per run (src-calls/op, sink-calls/op); and tests assert with
// them that a copy was server-side, or that a store was not asked at all.
// The daemon's metrics come from the engine's Report, not from here.
//
// The counts are of calls to the store, not of network requests: a List is
// one call but may be several requests on a store that pages (1000 objects
// per request on S3 and GCS), and a backend's own retries are not seen
// here. A ListPage is one request, counted as a List. A store that pages
// may report its pages through Pager; Counts then includes them as
// ListPages.
package counting

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// Pager is implemented by stores whose List sends one request per page.
type Pager interface {
	// Pages is the number of list pages requested since the store was
	// opened.
	Pages() int64
}

// Counts is a snapshot of the counters.
type Counts struct {
	Open, Stat, List, Put, Create, Remove, Copy int64
	// ListPages is the inner store's page count (see Pager), or List
	// when it does not say. It counts since the inner store was opened,
	// not since it was wrapped.
	ListPages int64
	// BytesRead are bytes read from bodies that Open returned.
	BytesRead int64
	// BytesWritten are bytes Put and Create consumed from their readers;
	// a server-side copy moves none.
	BytesWritten int64
	// Errors are calls that returned an error, absent objects included.
	Errors int64
}

// Requests is the number of calls of every kind.
func (c Counts) Requests() int64 {
	return c.Open + c.Stat + c.List + c.Put + c.Create + c.Remove + c.Copy
}

// Sub is c minus an earlier snapshot: what happened in between.
func (c Counts) Sub(old Counts) Counts {
	return Counts{
		Open: c.Open - old.Open, Stat: c.Stat - old.Stat, List: c.List - old.List,
		Put: c.Put - old.Put, Create: c.Create - old.Create, Remove: c.Remove - old.Remove,
		Copy: c.Copy - old.Copy, ListPages: c.ListPages - old.ListPages,
		BytesRead: c.BytesRead - old.BytesRead, BytesWritten: c.BytesWritten - old.BytesWritten,
		Errors: c.Errors - old.Errors,
	}
}

type counters struct {
	open, stat, list, put, create, remove, copy atomic.Int64
	bytesRead, bytesWritten, errors             atomic.Int64
}

// Reader counts the calls to a read-only store.
type Reader struct {
	r backend.Reader
	c *counters
}

// Wrap returns r counted.
func Wrap(r backend.Reader) *Reader { return &Reader{r: r, c: &counters{}} }

// Unwrap returns the store underneath.
func (r *Reader) Unwrap() backend.Reader { return r.r }

// Counts returns the counts so far.
func (r *Reader) Counts() Counts {
	c := r.c
	n := Counts{
		Open: c.open.Load(), Stat: c.stat.Load(), List: c.list.Load(), Put: c.put.Load(),
		Create: c.create.Load(), Remove: c.remove.Load(), Copy: c.copy.Load(),
		BytesRead: c.bytesRead.Load(), BytesWritten: c.bytesWritten.Load(), Errors: c.errors.Load(),
	}
	n.ListPages = n.List
	if p, ok := r.r.(Pager); ok {
		n.ListPages = p.Pages()
	}
	return n
}

func (r *Reader) count(n *atomic.Int64, err error) error {
	n.Add(1)
	if err != nil {
		r.c.errors.Add(1)
	}
	return err
}

func (r *Reader) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, err := r.r.Open(ctx, name)
	if r.count(&r.c.open, err) != nil {
		return nil, err
	}
	return &body{ReadCloser: rc, n: &r.c.bytesRead}, nil
}

func (r *Reader) Stat(ctx context.Context, name string) (backend.FileInfo, error) {
	fi, err := r.r.Stat(ctx, name)
	return fi, r.count(&r.c.stat, err)
}

func (r *Reader) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	return r.count(&r.c.list, r.r.List(ctx, prefix, fn))
}

// ListPage forwards to the store's PageLister, counted as a List (one
// request); backend.PageListerOf finds it only where the store underneath
// has one.
func (r *Reader) ListPage(ctx context.Context, prefix, from string) ([]backend.FileInfo, bool, error) {
	l := backend.PageListerOf(r.r)
	if l == nil {
		return nil, false, r.count(&r.c.list, fmt.Errorf("%s: listing a page: %w", r.r.Location(), backend.ErrNotSupported))
	}
	page, more, err := l.ListPage(ctx, prefix, from)
	return page, more, r.count(&r.c.list, err)
}

func (r *Reader) Properties() backend.Properties { return r.r.Properties() }
func (r *Reader) Location() string               { return r.r.Location() }

// Backend counts the calls to a writable store. It always has CopyFrom,
// which forwards to the store underneath when that is a Copier and
// declines (ok=false, as a Copier may) when it is not.
type Backend struct {
	Reader
	b backend.Backend
}

// WrapBackend returns b counted.
func WrapBackend(b backend.Backend) *Backend {
	return &Backend{Reader: Reader{r: b, c: &counters{}}, b: b}
}

func (b *Backend) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	return b.count(&b.c.put, b.b.Put(ctx, name, &counted{r: r, n: &b.c.bytesWritten}, size))
}

func (b *Backend) Create(ctx context.Context, name string, r io.Reader, size int64) error {
	return b.count(&b.c.create, b.b.Create(ctx, name, &counted{r: r, n: &b.c.bytesWritten}, size))
}

func (b *Backend) Remove(ctx context.Context, name string) error {
	return b.count(&b.c.remove, b.b.Remove(ctx, name))
}

// CanCopyFrom forwards to the store underneath.
func (b *Backend) CanCopyFrom(src backend.Reader) bool {
	c, ok := b.b.(backend.Copier)
	return ok && c.CanCopyFrom(src)
}

// CopyFrom forwards to the store underneath; a copy it declines (ok=false,
// nothing done) is not counted.
func (b *Backend) CopyFrom(ctx context.Context, src backend.Reader, srcName, dstName string, size int64) (bool, error) {
	c, ok := b.b.(backend.Copier)
	if !ok {
		return false, nil
	}
	ok, err := c.CopyFrom(ctx, src, srcName, dstName, size)
	if ok || err != nil {
		b.count(&b.c.copy, err)
	}
	return ok, err
}

// OpenVersion, PutIfMatch and RemoveIfMatch forward to the store's
// Conditional, counted as Open, Put and Remove; ConditionalOf finds them
// only where the store underneath has ConditionalWrite.
func (b *Backend) OpenVersion(ctx context.Context, name string) (io.ReadCloser, backend.FileInfo, error) {
	rc, fi, err := backend.ConditionalOf(b.b).OpenVersion(ctx, name)
	if b.count(&b.c.open, err) != nil {
		return nil, fi, err
	}
	return &body{ReadCloser: rc, n: &b.c.bytesRead}, fi, nil
}

func (b *Backend) PutIfMatch(ctx context.Context, name string, r io.Reader, size int64, version string) error {
	return b.count(&b.c.put, backend.ConditionalOf(b.b).PutIfMatch(ctx, name, &counted{r: r, n: &b.c.bytesWritten}, size, version))
}

func (b *Backend) RemoveIfMatch(ctx context.Context, name, version string) error {
	return b.count(&b.c.remove, backend.ConditionalOf(b.b).RemoveIfMatch(ctx, name, version))
}

// counted counts the bytes read through it.
type counted struct {
	r io.Reader
	n *atomic.Int64
}

func (c *counted) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type body struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

var (
	_ backend.Reader      = (*Reader)(nil)
	_ backend.Unwrapper   = (*Reader)(nil)
	_ backend.PageLister  = (*Reader)(nil)
	_ backend.Backend     = (*Backend)(nil)
	_ backend.Copier      = (*Backend)(nil)
	_ backend.Conditional = (*Backend)(nil)
	_ backend.Unwrapper   = (*Backend)(nil)
)

// WriteTo lets io.Copy reach the reader underneath, so that a copy
// between files can still use copy_file_range.
func (c *counted) WriteTo(w io.Writer) (int64, error) {
	n, err := io.Copy(w, c.r)
	c.n.Add(n)
	return n, err
}

// WriteTo: as counted.WriteTo.
func (b *body) WriteTo(w io.Writer) (int64, error) {
	n, err := io.Copy(w, b.ReadCloser)
	b.n.Add(n)
	return n, err
}
