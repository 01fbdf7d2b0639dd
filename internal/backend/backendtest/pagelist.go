package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// pageNames are names whose bytes sort around the ones a listing of
// folders could get wrong: ',', '-' and '.' sort before '/', '0' after
// it, so that "g/a-b" comes before "g/a/b" in byte order though a walk
// of the folder g/ meets a/ first; and UTF-8 of two, three and four
// bytes, which sorts after every ASCII byte. No name is both a file and
// a folder: a gateway on a file system (Versity's posix) cannot hold
// both.
var pageNames = []string{
	"g/a,", "g/a-b", "g/a.b", "g/a/b", "g/a/b-", "g/a/b.c", "g/a/b0", "g/a/c/d", "g/a0", "g/a~",
	"g/aé", "g/aÿ", "g/a€", "g/a😀", "g/b", "g/b-",
}

// testListPage holds a PageLister to its contract (backend.PageLister):
// pages in byte order across more than one page, from included, nothing
// below from, the prefix honoured, nothing past the end.
func testListPage(t *testing.T, b backend.Backend) {
	if !b.Properties().PageList {
		if _, ok := b.(backend.PageLister); ok && backend.PageListerOf(b) != nil {
			t.Fatal("PageListerOf found a PageLister on a store whose Properties().PageList is false")
		}
		t.Skip("store lists no pages")
	}
	l := backend.PageListerOf(b)
	if l == nil {
		t.Fatal("Properties().PageList is true but PageListerOf finds no PageLister")
	}
	ctx := context.Background()
	var names []string
	names = append(names, pageNames...)
	const paged = 1050 // more than a page
	for i := range paged {
		names = append(names, fmt.Sprintf("g/p/%04d", i))
	}
	outside := []string{"f/x", "ga", "h/x", "g-"}
	slots := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, name := range append(slices.Clone(names), outside...) {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := b.Put(ctx, name, bytes.NewReader([]byte(name)), int64(len(name))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	slices.Sort(names) // byte order: Go compares strings bytewise

	// Every name under g/, in order, a page at a time, each page asked
	// from the last name of the one before (included, so dropped).
	var all []string
	from, pages := "", 0
	for {
		page, more, err := l.ListPage(ctx, "g/", from)
		if err != nil {
			t.Fatalf("ListPage g/ from %q: %v", from, err)
		}
		pages++
		if pages > 10 {
			t.Fatalf("ListPage g/: still more after %d pages", pages)
		}
		if more && len(page) == 0 {
			t.Fatalf("ListPage g/ from %q: an empty page with more", from)
		}
		for i, fi := range page {
			if fi.Name < from {
				t.Fatalf("ListPage g/ from %q gave %q, below from", from, fi.Name)
			}
			if i > 0 && fi.Name <= page[i-1].Name {
				t.Fatalf("ListPage g/ from %q: %q after %q, not in byte order", from, fi.Name, page[i-1].Name)
			}
			if fi.Size != int64(len(fi.Name)) {
				t.Fatalf("ListPage g/: %s has size %d, want %d", fi.Name, fi.Size, len(fi.Name))
			}
			if fi.Name == from {
				continue
			}
			all = append(all, fi.Name)
		}
		if !more {
			break
		}
		from = page[len(page)-1].Name
	}
	if pages < 2 {
		t.Errorf("ListPage listed %d names in %d page; want more than one page of ~1000", len(all), pages)
	}
	if !slices.Equal(all, names) {
		t.Fatalf("ListPage g/, page by page:\n got  %q\n want %q", all, names)
	}

	// from is included where it is a name, and where it is not the
	// listing starts at the first name after it; the prefix is a
	// string prefix, as List's.
	for _, tc := range []struct{ prefix, from string }{
		{"g/", "g/a-b"}, {"g/", "g/a/b"}, {"g/", "g/a0"}, {"g/", "g/a€"}, {"g/", "g/a😀"},
		{"g/", "g/a."}, {"g/", "g/a/"}, {"g/", "g/a/b/"}, {"g/", "g/a/b-"}, {"g/", "g/aa"}, {"g/", "g/p/0999"},
		{"g/", "g/p/1000x"}, {"g/", "a"}, {"g/", "g/"}, {"g/a", "g/a."}, {"g/a/", ""}, {"g/p/1", "g/p/0"},
	} {
		page, more, err := l.ListPage(ctx, tc.prefix, tc.from)
		if err != nil {
			t.Fatalf("ListPage %q from %q: %v", tc.prefix, tc.from, err)
		}
		var want []string
		for _, n := range names {
			if strings.HasPrefix(n, tc.prefix) && n >= tc.from {
				want = append(want, n)
			}
		}
		got := make([]string, len(page))
		for i, fi := range page {
			got[i] = fi.Name
		}
		if len(got) == 0 || len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("ListPage %q from %q:\n got  %q\n want the first of %q", tc.prefix, tc.from, got, want)
		}
		if !more && len(got) != len(want) {
			t.Fatalf("ListPage %q from %q: %d names and no more, want %d", tc.prefix, tc.from, len(got), len(want))
		}
	}

	// Past the end, and under a missing prefix: nothing, and no more.
	for _, tc := range []struct{ prefix, from string }{
		{"g/", "g/q"}, {"g/", "g/\U0010FFFF"}, {"missing/", ""}, {"g/b/", ""}, {"g/a/b/c/", ""}, {"g/a/", "g/a/d"},
	} {
		page, more, err := l.ListPage(ctx, tc.prefix, tc.from)
		if err != nil || len(page) != 0 || more {
			t.Fatalf("ListPage %q from %q = %d names from %v, more %v, %v; want nothing", tc.prefix, tc.from, len(page), firstName(page), more, err)
		}
	}
}

func firstName(page []backend.FileInfo) string {
	if len(page) == 0 {
		return ""
	}
	return page[0].Name
}
