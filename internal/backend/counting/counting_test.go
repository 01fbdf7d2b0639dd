package counting_test

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/backendtest"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/counting"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/gcs"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

func newLocal(t *testing.T) *local.Local {
	t.Helper()
	l, err := local.Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// The wrapper must keep every promise of the store it wraps.
func TestConformanceThroughWrapper(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend { return counting.WrapBackend(newLocal(t)) })
}

func TestCountsOperationsAndBytes(t *testing.T) {
	ctx := context.Background()
	b := counting.WrapBackend(newLocal(t))
	content := []byte("0123456789")
	if err := b.Put(ctx, "a", bytes.NewReader(content), 10); err != nil {
		t.Fatal(err)
	}
	if err := b.Create(ctx, "b", bytes.NewReader(content[:4]), 4); err != nil {
		t.Fatal(err)
	}
	if err := b.Create(ctx, "b", bytes.NewReader(content[:4]), 4); err == nil {
		t.Fatal("second Create of b succeeded")
	}
	rc, err := b.Open(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if _, err := b.Stat(ctx, "missing"); !backend.IsNotExist(err) {
		t.Fatalf("Stat missing: %v", err)
	}
	var listed int
	if err := b.List(ctx, "", func(backend.FileInfo) error { listed++; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}

	got := b.Counts()
	want := counting.Counts{
		Open: 1, Stat: 1, List: 1, Put: 1, Create: 2, Remove: 1, ListPages: 1,
		BytesRead: int64(len(content)), Errors: 2,
	}
	// The refused Create may or may not have consumed its reader.
	if got.BytesWritten < 14 || got.BytesWritten > 18 {
		t.Errorf("BytesWritten = %d, want 14 (+4 for the refused Create)", got.BytesWritten)
	}
	got.BytesWritten = 0
	if got != want {
		t.Errorf("Counts = %+v\nwant     %+v", got, want)
	}
	if got.Requests() != 7 {
		t.Errorf("Requests = %d, want 7", got.Requests())
	}
	if d := b.Counts().Sub(got); d.Open != 0 || d.BytesWritten == 0 {
		t.Errorf("Sub = %+v", d)
	}
}

func TestReaderUnwrapsToInnermost(t *testing.T) {
	l := newLocal(t)
	r := counting.Wrap(counting.WrapBackend(l))
	if backend.Innermost(r) != backend.Reader(l) {
		t.Fatalf("Innermost = %T, want the local store", backend.Innermost(r))
	}
}

// A copy within GCS through wrappers on both sides is still server-side:
// the source is never opened and no byte passes through the wrappers.
func TestCopierForwardedToGCS(t *testing.T) {
	srv := testserver.GCS(t)
	ctx := context.Background()
	openGCS := func(bucket string) *gcs.Store {
		u, _ := url.Parse(srv.URL(bucket, "p"))
		s, err := gcs.Open(ctx, u, gcs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	src := counting.WrapBackend(openGCS(srv.Bucket(t)))
	dst := counting.WrapBackend(openGCS(srv.Bucket(t)))
	content := strings.Repeat("x", 5000)
	if err := src.Put(ctx, "f", strings.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
	before := src.Counts()
	ok, err := dst.CopyFrom(ctx, src, "f", "g", int64(len(content)))
	if err != nil || !ok {
		t.Fatalf("CopyFrom = %v, %v; want a server-side copy", ok, err)
	}
	if d := src.Counts().Sub(before); d.Requests() != 0 || d.BytesRead != 0 {
		t.Errorf("source wrapper saw %+v during a server-side copy", d)
	}
	if c := dst.Counts(); c.Copy != 1 || c.BytesWritten != 0 || c.Put != 0 {
		t.Errorf("destination counts %+v, want one copy and no bytes", c)
	}
	b, err := backend.ReadAll(ctx, dst, "g", 1<<20)
	if err != nil || string(b) != content {
		t.Fatalf("copied object: %d bytes, %v", len(b), err)
	}

	// From a store that is not GCS the copy is declined, and not counted.
	ok, err = dst.CopyFrom(ctx, newLocal(t), "f", "h", 1)
	if ok || err != nil {
		t.Fatalf("CopyFrom(local) = %v, %v; want declined", ok, err)
	}
	if c := dst.Counts(); c.Copy != 1 {
		t.Errorf("declined copy counted: %+v", c)
	}
}

// A page listed through the wrappers (counting, read-only) is a request
// the counts see, as a List, and a page on the store's own count; a
// store that lists no pages is given none through the wrapper.
func TestListPageCountedAsList(t *testing.T) {
	srv := testserver.GCS(t)
	ctx := context.Background()
	u, _ := url.Parse(srv.URL(srv.Bucket(t), "p"))
	s, err := gcs.Open(ctx, u, gcs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, name := range []string{"d/a", "d/b", "d/c"} {
		if err := s.Put(ctx, name, strings.NewReader(name), int64(len(name))); err != nil {
			t.Fatal(err)
		}
	}
	c := counting.WrapBackend(s)
	l := backend.PageListerOf(backend.ReadOnly(c))
	if l == nil {
		t.Fatal("no PageLister found through ReadOnly and the counting wrapper over GCS")
	}
	before, pages := c.Counts(), s.Pages()
	page, more, err := l.ListPage(ctx, "d/", "d/b")
	if err != nil || more || len(page) != 2 || page[0].Name != "d/b" || page[1].Name != "d/c" {
		t.Fatalf("ListPage d/ from d/b = %v, more %v, %v; want d/b and d/c", page, more, err)
	}
	if d := c.Counts().Sub(before); d.List != 1 || d.Requests() != 1 || d.ListPages != 1 {
		t.Errorf("one page listed, counted %+v; want one List", d)
	}
	if s.Pages()-pages != 1 {
		t.Errorf("one page listed, the store counted %d", s.Pages()-pages)
	}
	if backend.PageListerOf(counting.WrapBackend(newLocal(t))) != nil {
		t.Error("PageListerOf found a PageLister over a local folder, which lists no pages")
	}
}
