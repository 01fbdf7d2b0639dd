package backend_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// names is a store that lists names, in the order given, with sizes from
// their index; it counts its listings.
type names struct {
	list  []string
	lists int
}

func (n *names) List(_ context.Context, prefix string, fn func(backend.FileInfo) error) error {
	n.lists++
	for i, name := range n.list {
		if err := fn(backend.FileInfo{Name: name, Size: int64(i)}); err != nil {
			return err
		}
	}
	return nil
}

func (n *names) Open(context.Context, string) (io.ReadCloser, error) { panic("not listed") }
func (n *names) Stat(context.Context, string) (backend.FileInfo, error) {
	panic("not listed")
}
func (n *names) Properties() backend.Properties { return backend.Properties{CanList: true} }
func (n *names) Location() string               { return "names" }

func TestLazyListingFindsEveryNameListedAndNoOther(t *testing.T) {
	// Names that sort differently by path and by folder walk ("a-b"
	// before "a/"), one a prefix of another, in no order.
	listed := []string{"d/a/x", "d/a-b", "d/a", "d/a/x/y", "d/b", "d/a.b", "d/ab"}
	r := &names{list: listed}
	var l backend.LazyListing
	for range 2 {
		if err := l.Load(context.Background(), r, "d/"); err != nil {
			t.Fatal(err)
		}
	}
	if r.lists != 1 || !l.Loaded() || l.Len() != len(listed) {
		t.Fatalf("listed %d times, Loaded %v, Len %d; want once, true, %d", r.lists, l.Loaded(), l.Len(), len(listed))
	}
	for i, name := range listed {
		if size, ok := l.Size(name); !ok || size != int64(i) {
			t.Errorf("Size(%q) = %d, %v; want %d, true", name, size, ok, i)
		}
	}
	for _, name := range []string{"", "d/", "d/a/", "d/a/x/", "d/aa", "d/c", "d/a/x/y/z", "a"} {
		if size, ok := l.Size(name); ok {
			t.Errorf("Size(%q) = %d, true; it was not listed", name, size)
		}
	}
}

// A listing of a large folder is kept in little more than the bytes of
// its names: at 100,000 names of 70 bytes a map of them held 115 bytes a
// name.
func TestLazyListingHoldsLittleMoreThanItsNames(t *testing.T) {
	const n = 100_000
	r := &names{}
	for _, i := range rand.Perm(n) {
		r.list = append(r.list, fmt.Sprintf("data/main/events/ducklake-01a23acf-6cf3-7000-a5a1-%012x.parquet", i))
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var l backend.LazyListing
	if err := l.Load(context.Background(), r, "data/"); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perName := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.1f bytes a name of 70", perName)
	if perName > 100 {
		t.Errorf("the listing holds %.1f bytes a name of 70; want at most 100", perName)
	}
	runtime.KeepAlive(r)
	runtime.KeepAlive(&l)
}
