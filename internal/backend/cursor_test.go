package backend_test

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// pages is a store of sorted names that lists them a page of pageSize
// at a time, as S3 and GCS do, and counts its pages and stats. Its
// answers can be made hostile with bad, which may rewrite each page.
type pages struct {
	list  []string // sorted
	sizes map[string]int64
	pages atomic.Int64 // ListPage calls: the cursor lists a page ahead from a goroutine
	mu    sync.Mutex
	froms []string // the names ListPage was asked to list from
	stats int
	// bad rewrites the page listed from from; nil lists as S3 does.
	bad func(from string, page []backend.FileInfo, more bool) ([]backend.FileInfo, bool)
}

const pageSize = 1000

func newPages(list ...string) *pages {
	p := &pages{list: slices.Clone(list), sizes: map[string]int64{}}
	slices.Sort(p.list)
	for i, name := range p.list {
		p.sizes[name] = int64(100 + i)
	}
	return p
}

func (p *pages) ListPage(_ context.Context, prefix, from string) ([]backend.FileInfo, bool, error) {
	p.pages.Add(1)
	p.mu.Lock()
	p.froms = append(p.froms, from)
	p.mu.Unlock()
	i, _ := slices.BinarySearch(p.list, max(prefix, from))
	var page []backend.FileInfo
	for ; i < len(p.list) && strings.HasPrefix(p.list[i], prefix) && len(page) < pageSize; i++ {
		// A copy, as a client decoding a response makes.
		page = append(page, backend.FileInfo{Name: strings.Clone(p.list[i]), Size: p.sizes[p.list[i]], MD5: "0123456789abcdef0123456789abcdef"})
	}
	more := i < len(p.list) && strings.HasPrefix(p.list[i], prefix)
	if p.bad != nil {
		page, more = p.bad(from, page, more)
	}
	return page, more, nil
}

func (p *pages) List(_ context.Context, prefix string, fn func(backend.FileInfo) error) error {
	for _, name := range p.list {
		if strings.HasPrefix(name, prefix) {
			if err := fn(backend.FileInfo{Name: strings.Clone(name), Size: p.sizes[name]}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *pages) Stat(_ context.Context, name string) (backend.FileInfo, error) {
	p.stats++
	size, ok := p.sizes[name]
	if !ok {
		return backend.FileInfo{}, fmt.Errorf("stat %s: %w", name, backend.ErrNotExist)
	}
	return backend.FileInfo{Name: name, Size: size}, nil
}

func (p *pages) Open(context.Context, string) (io.ReadCloser, error) { panic("not opened") }
func (p *pages) Properties() backend.Properties {
	return backend.Properties{CanList: true, PageList: true}
}
func (p *pages) Location() string { return "pages" }

// dataNames are n names of data files under d/, in order.
func dataNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("d/t/ducklake-%06d.parquet", i*2) // odd numbers absent
	}
	return names
}

// checkAnswers asks c about names in the order given and fails on any
// answer other than what p holds.
func checkAnswers(t *testing.T, c *backend.Cursor, p *pages, names ...string) {
	t.Helper()
	for _, name := range names {
		size, ok, err := c.Size(context.Background(), name)
		want, has := p.sizes[name]
		if err != nil || ok != has || size != want {
			t.Fatalf("Size(%s) = %d, %v, %v; the store holds it: %v, size %d", name, size, ok, err, has, want)
		}
	}
}

// Asks far apart cost a page each, not a listing of the folder.
func TestCursorSparseAsksCostAPageEach(t *testing.T) {
	p := newPages(dataNames(20_000)...)
	c := backend.NewCursor(p, "d/")
	var asks []string
	for i := 0; i < 20_000; i += 2_500 {
		asks = append(asks, fmt.Sprintf("d/t/ducklake-%06d.parquet", i*2), fmt.Sprintf("d/t/ducklake-%06d.parquet", i*2+1))
	}
	checkAnswers(t, c, p, asks...)
	if p.pages.Load() != 8 || p.stats != 0 {
		t.Errorf("%d asks in 8 places: %d pages, %d stats; want 8 pages, no stat", len(asks), p.pages.Load(), p.stats)
	}
}

// Asks close together cost a page per thousand names, as a listing of
// the whole folder would, and no more.
func TestCursorDenseAsksCostAPagePerThousand(t *testing.T) {
	names := dataNames(10_000)
	p := newPages(names...)
	c := backend.NewCursor(p, "d/")
	var asks []string
	for i := range 20_000 {
		asks = append(asks, fmt.Sprintf("d/t/ducklake-%06d.parquet", i)) // half of them absent
	}
	checkAnswers(t, c, p, asks...)
	checkAnswers(t, c, p, "d/u", "d/z/last") // past the end: no page more
	if p.pages.Load() != 10 || p.stats != 0 {
		t.Errorf("every name of a folder of 10,000: %d pages, %d stats; want 10 pages, as a listing", p.pages.Load(), p.stats)
	}
}

// Asks that go through the pages in order have the next page listed
// ahead, from just after the last name held, while the one held answers;
// asks far apart never do (a page no ask needs would be a request more).
func TestCursorListsThePageAheadOfAsksInOrder(t *testing.T) {
	ahead := func(p *pages) (n int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, from := range p.froms {
			if strings.HasSuffix(from, "\x00") {
				n++
			}
		}
		return n
	}
	p := newPages(dataNames(10_000)...)
	c := backend.NewCursor(p, "d/")
	checkAnswers(t, c, p, dataNames(10_000)...)
	// The first page is listed from an ask, the second too (the first
	// shows the asks are dense), the other eight ahead.
	if n := ahead(p); n != 8 || p.pages.Load() != 10 {
		t.Errorf("asks through 10 pages in order: %d pages, %d listed ahead; want 10, 8 of them ahead", p.pages.Load(), n)
	}

	p = newPages(dataNames(20_000)...)
	c = backend.NewCursor(p, "d/")
	for i := 0; i < 20_000; i += 2_500 {
		checkAnswers(t, c, p, fmt.Sprintf("d/t/ducklake-%06d.parquet", i*2))
	}
	if n := ahead(p); n != 0 {
		t.Errorf("asks far apart: %d pages listed ahead; want none", n)
	}
}

// A name asked below the page held is asked for alone, and the page
// stays: the asks in order after it cost nothing more.
func TestCursorOutOfOrderAskIsAStat(t *testing.T) {
	p := newPages(dataNames(3_000)...)
	c := backend.NewCursor(p, "d/")
	checkAnswers(t, c, p, "d/t/ducklake-002000.parquet", "d/t/ducklake-000004.parquet", "d/t/ducklake-000005.parquet", "d/t/ducklake-002002.parquet")
	if p.pages.Load() != 1 || p.stats != 2 {
		t.Errorf("one page, then two names below it, then one in it: %d pages, %d stats; want 1 and 2", p.pages.Load(), p.stats)
	}
	// Names not under the prefix are no one's page.
	checkAnswers(t, c, p, "e/x", "d")
	if p.pages.Load() != 1 || p.stats != 4 {
		t.Errorf("names outside d/: %d pages, %d stats; want 1 and 4", p.pages.Load(), p.stats)
	}
}

// A store with no PageLister is asked for each name alone.
func TestCursorWithoutPagesStatsEachName(t *testing.T) {
	p := newPages(dataNames(10)...)
	c := backend.NewCursor(statOnly{p}, "d/")
	checkAnswers(t, c, p, dataNames(10)...)
	if p.pages.Load() != 0 || p.stats != 10 {
		t.Errorf("%d pages, %d stats; want none and 10", p.pages.Load(), p.stats)
	}
}

type statOnly struct{ *pages }

func (s statOnly) Properties() backend.Properties { return backend.Properties{CanList: true} }

// A store whose pages cannot be trusted (names below the one asked, out
// of order, a page with more and no name, the same page whatever is
// asked) never answers from a page: every name is then asked for alone,
// each answer is right, and no ask lists again.
func TestCursorHostilePagesFallBackToStat(t *testing.T) {
	names := dataNames(5_000)
	for _, tc := range []struct {
		name string
		bad  func(from string, page []backend.FileInfo, more bool) ([]backend.FileInfo, bool)
	}{
		{"the first page whatever is asked", nil},
		{"a name below from", func(from string, page []backend.FileInfo, more bool) ([]backend.FileInfo, bool) {
			return append([]backend.FileInfo{{Name: "d/a", Size: 1}}, page...), more
		}},
		{"names out of order", func(from string, page []backend.FileInfo, more bool) ([]backend.FileInfo, bool) {
			if len(page) > 3 {
				page[1], page[2] = page[2], page[1]
			}
			return page, more
		}},
		{"a name twice", func(from string, page []backend.FileInfo, more bool) ([]backend.FileInfo, bool) {
			if len(page) > 3 {
				page[2] = page[1]
			}
			return page, more
		}},
		{"an empty page with more", func(string, []backend.FileInfo, bool) ([]backend.FileInfo, bool) {
			return nil, true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPages(names...)
			if tc.bad == nil {
				first, _, _ := p.ListPage(context.Background(), "d/", "")
				p.pages.Store(0)
				tc.bad = func(string, []backend.FileInfo, bool) ([]backend.FileInfo, bool) { return first, true }
			}
			p.bad = tc.bad
			c := backend.NewCursor(p, "d/")
			var asks []string
			for i := 1_000; i < 1_400; i++ {
				asks = append(asks, fmt.Sprintf("d/t/ducklake-%06d.parquet", i))
			}
			checkAnswers(t, c, p, asks...)
			if p.pages.Load() != 1 || !c.Stats() || p.stats != len(asks) {
				t.Errorf("%d pages, %d stats for %d asks (turned to stats: %v); want one page, then a stat each", p.pages.Load(), p.stats, len(asks), c.Stats())
			}
		})
	}
}

// A page that names a file outside the prefix is an error, as it is for
// a LazyListing: the store is not what it says.
func TestCursorNameOutsideThePrefixIsAnError(t *testing.T) {
	p := newPages(dataNames(10)...)
	p.bad = func(from string, page []backend.FileInfo, more bool) ([]backend.FileInfo, bool) {
		return append(page, backend.FileInfo{Name: "e/elsewhere"}), more
	}
	_, _, err := backend.NewCursor(p, "d/").Size(context.Background(), "d/t/ducklake-000002.parquet")
	if err == nil || !strings.Contains(err.Error(), "e/elsewhere") {
		t.Fatalf("Size through a page naming e/elsewhere: %v; want an error naming it", err)
	}
}

// heldAfter is the heap a structure built by build still holds once
// the collector ran.
func heldAfter(build func() any) int64 {
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	kept := build()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// The cursor holds a page, whatever the size of the folder: at 100,000
// names of 70 bytes, every one of them asked, a LazyListing holds them
// all (85 bytes each), the cursor one page of them.
func TestCursorHoldsAPageNotTheFolder(t *testing.T) {
	const n = 100_000
	list := make([]string, n)
	for i := range list {
		list[i] = fmt.Sprintf("data/main/events/ducklake-01a23acf-6cf3-7000-a5a1-%012x.parquet", i)
	}
	p := newPages(list...)
	ctx := context.Background()
	cursor := heldAfter(func() any {
		c := backend.NewCursor(p, "data/")
		for _, name := range list {
			if _, _, err := c.Size(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		return c
	})
	listing := heldAfter(func() any {
		var l backend.LazyListing
		if err := l.Load(ctx, p, "data/"); err != nil {
			t.Fatal(err)
		}
		for _, name := range list {
			l.Size(name)
		}
		return &l
	})
	t.Logf("%d names asked in order: LazyListing holds %d bytes, Cursor %d bytes (%d pages)", n, listing, cursor, p.pages.Load())
	if cursor > 400_000 || listing < 5_000_000 {
		t.Errorf("held after asking %d names: cursor %d bytes, listing %d; want the cursor under 400 kB (a page or two), the listing over 5 MB", n, cursor, listing)
	}
}

// BenchmarkDataLookup asks every name of a folder of 100,000 in order,
// through a LazyListing and through a Cursor: held-B is what each still
// holds at the end.
func BenchmarkDataLookup(b *testing.B) {
	const n = 100_000
	list := make([]string, n)
	for i := range list {
		list[i] = fmt.Sprintf("data/main/events/ducklake-01a23acf-6cf3-7000-a5a1-%012x.parquet", i)
	}
	p := newPages(list...)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		look func() any
	}{
		{"LazyListing", func() any {
			var l backend.LazyListing
			l.Load(ctx, p, "data/")
			for _, name := range list {
				l.Size(name)
			}
			return &l
		}},
		{"Cursor", func() any {
			c := backend.NewCursor(p, "data/")
			for _, name := range list {
				c.Size(ctx, name)
			}
			return c
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var held int64
			for b.Loop() {
				held = heldAfter(tc.look)
			}
			b.ReportMetric(float64(held), "held-B")
		})
	}
}
