// Package backendtest is the conformance suite for internal/backend: one
// set of tests that every store runs against its real (or emulated)
// server. A backend is done when it passes. The tests check the contract
// written in internal/backend/backend.go, one behaviour per subtest.
package backendtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// Run tests a writable store. open returns a new, empty store; it is
// called once per subtest.
func Run(t *testing.T, open func(t *testing.T) backend.Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, backend.Backend)
	}{
		{"Properties", testProperties},
		{"PutOpenStat", testPutOpenStat},
		{"PutReplaces", testPutReplaces},
		{"PutReplacesAtomically", testPutReplacesAtomically},
		{"FailedPutPublishesNothing", testFailedPutPublishesNothing},
		{"FailedPutKeepsOldObject", testFailedPutKeepsOldObject},
		{"CreateIfAbsent", testCreateIfAbsent},
		{"FailedCreatePublishesNothing", testFailedCreatePublishesNothing},
		{"ConcurrentCreateOneWins", testConcurrentCreate},
		{"ListRecursiveByPrefix", testList},
		{"ListMissingPrefix", testListMissingPrefix},
		{"ListStopsOnCallbackError", testListCallbackError},
		{"ListInPartsListsEverythingOnce", testListInParts},
		{"ListSkipsReserved", testListSkipsReserved},
		{"ListPageInByteOrderFromAName", testListPage},
		{"NotExist", testNotExist},
		{"InvalidNamesRefusedBeforeIO", testInvalidNames},
		{"LargeStream", testLargeStream},
		{"RemoveIdempotent", testRemove},
		{"ConditionalStated", testConditionalStated},
		{"ConditionalVersionsAgree", testConditionalVersionsAgree},
		{"PutIfMatchRefusesAStaleVersion", testPutIfMatch},
		{"PutIfMatchLargeRefusedPublishesNothing", testPutIfMatchLarge},
		{"ConcurrentPutIfMatchOneWins", testConcurrentPutIfMatch},
		{"RemoveIfMatchRefusesAStaleVersion", testRemoveIfMatch},
		{"ReplaceIfUnchanged", testReplaceIfUnchanged},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// RunReader tests a read-only store. open returns a store serving exactly
// files (name → content); it is called once per subtest.
func RunReader(t *testing.T, open func(t *testing.T, files map[string][]byte) backend.Reader) {
	files := map[string][]byte{
		"fdl.json":                        []byte(`{"id":"x"}`),
		"refs.json":                       []byte(`{"main":"019a"}`),
		"versions/019a/version.json":      bytes.Repeat([]byte("v"), 1000),
		"versions/019a/ducklake.duckdb":   generated(1, 3<<20+17),
		"data/with space/ü+%#?.parquet":   []byte("odd name"),
		"empty":                           {},
		backend.ReservedPrefix + "lock":   []byte("not repository content"),
		backend.ReservedPrefix + "tmp/xx": []byte("partial"),
	}
	visible := map[string][]byte{}
	for name, b := range files {
		if !isReserved(name) {
			visible[name] = b
		}
	}
	t.Run("OpenStat", func(t *testing.T) {
		r := open(t, files)
		for name, want := range visible {
			checkContent(t, r, name, want)
		}
	})
	t.Run("NotExist", func(t *testing.T) {
		checkNotExist(t, open(t, files), "missing", "versions/missing/version.json", "versions")
	})
	t.Run("InvalidNamesRefusedBeforeIO", func(t *testing.T) {
		checkInvalidNamesRefused(t, open(t, files), nil)
	})
	t.Run("List", func(t *testing.T) {
		r := open(t, files)
		got, err := listAll(r, "")
		if !r.Properties().CanList {
			if !errors.Is(err, backend.ErrNotSupported) {
				t.Fatalf("List on a store that cannot list: err = %v, want ErrNotSupported", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		checkListing(t, "", got, sizes(visible))
	})
	t.Run("Location", func(t *testing.T) {
		if open(t, files).Location() == "" {
			t.Fatal("Location is empty")
		}
	})
}

func testProperties(t *testing.T, b backend.Backend) {
	p := b.Properties()
	if !p.CanWrite {
		t.Fatalf("Properties().CanWrite is false on a store opened for writing")
	}
	if b.Location() == "" {
		t.Fatal("Location is empty")
	}
}

// names used by the round-trip tests: nesting, an empty object, and
// characters that need escaping in URLs.
var roundTrip = map[string][]byte{
	"a":                          []byte("alpha"),
	"dir/b":                      bytes.Repeat([]byte("b"), 4097),
	"dir/sub/c.json":             []byte(`{"c":true}`),
	"empty":                      {},
	"data/with space/ü+%#?.bin":  []byte("odd name"),
	"versions/019a/catalog.dat":  generated(2, 1<<20+3),
	"versions/019a/version.json": []byte(`{}`),
}

func testPutOpenStat(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	for name, content := range roundTrip {
		if err := b.Put(ctx, name, bytes.NewReader(content), int64(len(content))); err != nil {
			t.Fatalf("Put %s: %v", name, err)
		}
	}
	for name, want := range roundTrip {
		checkContent(t, b, name, want)
	}
}

func testPutReplaces(t *testing.T, b backend.Backend) {
	put(t, b, "x", bytes.Repeat([]byte("1"), 100))
	put(t, b, "x", []byte("second, shorter"))
	checkContent(t, b, "x", []byte("second, shorter"))
}

// testPutReplacesAtomically replaces an object while readers read it: each
// read must see one whole version, never a mix or a truncated one.
func testPutReplacesAtomically(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	versions := [][]byte{bytes.Repeat([]byte("A"), 256<<10), bytes.Repeat([]byte("B"), 100<<10)}
	put(t, b, "atomic", versions[0])
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for i := 1; i <= 20; i++ {
			v := versions[i%2]
			if err := b.Put(ctx, "atomic", bytes.NewReader(v), int64(len(v))); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() {
		for range errs {
		}
		close(done)
	}()
	reads := 0
	for {
		select {
		case <-done:
			if reads == 0 {
				t.Fatal("no read happened while the object was being replaced")
			}
			return
		default:
		}
		got := MustRead(t, b, "atomic")
		if !bytes.Equal(got, versions[0]) && !bytes.Equal(got, versions[1]) {
			t.Fatalf("read %d bytes that are neither whole version", len(got))
		}
		reads++
	}
}

// failingReaders are readers that do not deliver exactly size bytes.
func failingReaders(size int64) map[string]func() io.Reader {
	boom := errors.New("reader failed on purpose")
	return map[string]func() io.Reader{
		"short": func() io.Reader { return newGenerator(3, size-1) },
		"long":  func() io.Reader { return newGenerator(3, size+1) },
		"error": func() io.Reader {
			return io.MultiReader(newGenerator(3, size/2), errReader{boom})
		},
		// Readers that are also io.ReaderAt (a local file, bytes in
		// memory), which a store may send from where they are.
		"short-at": func() io.Reader { return bytes.NewReader(generated(3, size-1)) },
		"long-at":  func() io.Reader { return bytes.NewReader(generated(3, size+1)) },
		"error-at": func() io.Reader {
			return io.NewSectionReader(holeReaderAt{generated(3, size), size / 2, boom}, 0, size)
		},
	}
}

// holeReaderAt reads data, but for the byte at hole, which fails with err:
// its ends read well, the middle does not.
type holeReaderAt struct {
	data []byte
	hole int64
	err  error
}

func (h holeReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(h.data)) {
		return 0, io.EOF
	}
	end := off + int64(len(p))
	if off <= h.hole && h.hole < end {
		return copy(p, h.data[off:h.hole]), h.err
	}
	n := copy(p, h.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// failureSizes covers a small object and one above a 16 MiB multipart
// threshold, so that an aborted multipart upload is tested too.
var failureSizes = []int64{1000, 17<<20 + 5}

func testFailedPutPublishesNothing(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	for _, size := range failureSizes {
		for kind, r := range failingReaders(size) {
			name := fmt.Sprintf("failed/%s-%d", kind, size)
			if err := b.Put(ctx, name, r(), size); err == nil {
				t.Fatalf("Put %s (%s reader, size %d) succeeded", name, kind, size)
			}
			checkNotExist(t, b, name)
		}
	}
	if got, _ := listAll(b, ""); len(got) != 0 {
		t.Fatalf("failed Puts left objects behind: %v", got)
	}
}

func testFailedPutKeepsOldObject(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	old := []byte("the old object")
	put(t, b, "keep", old)
	for kind, r := range failingReaders(1000) {
		if err := b.Put(ctx, "keep", r(), 1000); err == nil {
			t.Fatalf("Put with a %s reader succeeded", kind)
		}
		checkContent(t, b, "keep", old)
	}
}

func testCreateIfAbsent(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	first := []byte(`{"id":"first"}`)
	if err := b.Create(ctx, "fdl.json", bytes.NewReader(first), int64(len(first))); err != nil {
		t.Fatalf("first Create: %v", err)
	}
	second := []byte(`{"id":"second, longer"}`)
	err := b.Create(ctx, "fdl.json", bytes.NewReader(second), int64(len(second)))
	if !errors.Is(err, backend.ErrExist) {
		t.Fatalf("second Create: err = %v, want ErrExist", err)
	}
	checkContent(t, b, "fdl.json", first)
}

func testFailedCreatePublishesNothing(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	for kind, r := range failingReaders(1000) {
		name := "create-" + kind
		if err := b.Create(ctx, name, r(), 1000); err == nil {
			t.Fatalf("Create with a %s reader succeeded", kind)
		}
		checkNotExist(t, b, name)
		// The failed attempt must not block a later one.
		content := []byte("now whole")
		if err := b.Create(ctx, name, bytes.NewReader(content), int64(len(content))); err != nil {
			t.Fatalf("Create %s after a failed Create: %v", name, err)
		}
		checkContent(t, b, name, content)
	}
}

func testConcurrentCreate(t *testing.T, b backend.Backend) {
	const n = 8
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, n)
	contents := make([][]byte, n)
	start := make(chan struct{})
	for i := range n {
		contents[i] = []byte(fmt.Sprintf(`{"writer":%d}`, i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = b.Create(ctx, "race", bytes.NewReader(contents[i]), int64(len(contents[i])))
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("Creates %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, backend.ErrExist):
			t.Fatalf("Create %d: err = %v, want nil or ErrExist", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no Create succeeded")
	}
	checkContent(t, b, "race", contents[winner])
}

var listed = map[string][]byte{
	"l/a":               []byte("1"),
	"l/b/c":             []byte("22"),
	"l/b/d/e":           []byte("333"),
	"l/with space/ü+%#": []byte("4444"),
	"lx":                []byte("55555"),
	"m":                 []byte("666666"),
}

func testList(t *testing.T, b backend.Backend) {
	if !b.Properties().CanList {
		t.Skip("store cannot list")
	}
	for name, content := range listed {
		put(t, b, name, content)
	}
	for _, prefix := range []string{"", "l/", "l/b/", "l/b", "l", "l/b/d/e", "m"} {
		got, err := listAll(b, prefix)
		if err != nil {
			t.Fatalf("List %q: %v", prefix, err)
		}
		want := map[string]int64{}
		for name, content := range listed {
			if len(name) >= len(prefix) && name[:len(prefix)] == prefix {
				want[name] = int64(len(content))
			}
		}
		checkListing(t, prefix, got, want)
	}
}

// testListInParts lists with bounds (backend.WithListBounds) of every
// kind a caller's guess can be: names present and absent, out of order,
// repeated, outside the prefix, past the end. The listing is the plain
// one each time, every name once, across more than one page (1,000).
func testListInParts(t *testing.T, b backend.Backend) {
	if !b.Properties().CanList {
		t.Skip("store cannot list")
	}
	const n = 1050
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p/%04d", i)
	}
	slots := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, name := range append(names, "a", "p0", "q/x") {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := b.Put(context.Background(), name, bytes.NewReader([]byte(name)), int64(len(name))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	want, err := listAllCtx(context.Background(), b, "p/")
	if err != nil || len(want) != n {
		t.Fatalf("plain List p/: %d names, %v; want %d", len(want), err, n)
	}
	for _, bounds := range [][]string{
		backend.SplitBounds(names, 100, 8),
		{"p/0100", "p/0500", "p/0999"},
		{"p/0500x", "p/07"},
		{"p/0900", "p/0100", "p/0100"},
		{"a", "p/", "p/0001", "z"},
		{"p/9999"},
	} {
		// And with what a caller may expect of each part: nothing, the
		// right counts, too few, too many, counts that do not match the
		// bounds.
		for _, expect := range [][]int{nil, countsUpTo(names, bounds), slices.Repeat([]int{1}, len(bounds)), slices.Repeat([]int{5000}, len(bounds)), {7}} {
			split := backend.ListSplit{Bounds: bounds, Expect: expect}
			got, err := listAllCtx(backend.WithListBounds(context.Background(), func() backend.ListSplit { return split }), b, "p/")
			if err != nil {
				t.Fatalf("List p/ with bounds %v, expecting %v: %v", bounds, expect, err)
			}
			checkListing(t, fmt.Sprintf("p/ with bounds %v, expecting %v", bounds, expect), got, want)
		}
	}
	stop := errors.New("stop here")
	calls := 0
	err = b.List(backend.WithListBounds(context.Background(), func() backend.ListSplit { return backend.ListSplit{Bounds: []string{"p/0300", "p/0600"}} }), "p/", func(backend.FileInfo) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 3 {
		t.Fatalf("List in parts went on after fn failed: %d calls, err %v", calls, err)
	}
}

// countsUpTo is how many of names each part of a split at bounds holds
// but the last, as a caller that knows them would expect.
func countsUpTo(names, bounds []string) []int {
	counts := make([]int, len(bounds))
	for i, b := range bounds {
		lo := ""
		if i > 0 {
			lo = bounds[i-1]
		}
		for _, n := range names {
			if n > lo && n <= b {
				counts[i]++
			}
		}
	}
	return counts
}

func testListMissingPrefix(t *testing.T, b backend.Backend) {
	if !b.Properties().CanList {
		t.Skip("store cannot list")
	}
	put(t, b, "present/x", []byte("x"))
	for _, prefix := range []string{"missing/", "missing", "present/y", "present/x/"} {
		got, err := listAll(b, prefix)
		if err != nil {
			t.Fatalf("List %q: %v", prefix, err)
		}
		if len(got) != 0 {
			t.Fatalf("List %q: got %v, want nothing", prefix, got)
		}
	}
}

func testListCallbackError(t *testing.T, b backend.Backend) {
	if !b.Properties().CanList {
		t.Skip("store cannot list")
	}
	for i := range 3 {
		put(t, b, fmt.Sprintf("s/%d", i), []byte("x"))
	}
	stop := errors.New("stop here")
	calls := 0
	err := b.List(context.Background(), "s/", func(backend.FileInfo) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) {
		t.Fatalf("List returned %v, want the callback's error", err)
	}
	if calls != 1 {
		t.Fatalf("callback ran %d times after returning an error, want 1", calls)
	}
}

// testListSkipsReserved writes an object under backend.ReservedPrefix, as
// the object-store lock does. Stores that refuse such names (the local
// folder keeps its own files there) are checked by their own tests.
func testListSkipsReserved(t *testing.T, b backend.Backend) {
	if !b.Properties().CanList {
		t.Skip("store cannot list")
	}
	ctx := context.Background()
	put(t, b, "visible", []byte("v"))
	lock := backend.ReservedPrefix + "lock"
	err := b.Put(ctx, lock, bytes.NewReader([]byte("{}")), 2)
	if errors.Is(err, backend.ErrInvalidName) {
		t.Logf("store refuses %s; its own test must check the reserved prefix", lock)
	} else if err != nil {
		t.Fatalf("Put %s: %v", lock, err)
	} else {
		checkContent(t, b, lock, []byte("{}"))
	}
	for _, prefix := range []string{"", backend.ReservedPrefix, ".fdl-mirror", lock} {
		got, err := listAll(b, prefix)
		if err != nil {
			t.Fatalf("List %q: %v", prefix, err)
		}
		want := map[string]int64{}
		if prefix == "" {
			want["visible"] = 1
		}
		checkListing(t, prefix, got, want)
	}
}

func testNotExist(t *testing.T, b backend.Backend) {
	put(t, b, "dir/file", []byte("x"))
	checkNotExist(t, b, "missing", "dir/missing", "missing/dir/file", "dir")
}

func testInvalidNames(t *testing.T, b backend.Backend) {
	checkInvalidNamesRefused(t, b, b)
	if got, err := listAll(b, ""); err == nil && len(got) != 0 {
		t.Fatalf("refused writes left objects: %v", got)
	}
}

// testLargeStream round-trips 40 MiB from a generator, so neither side of
// the test holds it, and it crosses a multipart threshold of up to 40 MiB.
func testLargeStream(t *testing.T, b backend.Backend) {
	const size = 40<<20 + 12345
	ctx := context.Background()
	if err := b.Put(ctx, "large/stream", newGenerator(4, size), size); err != nil {
		t.Fatalf("Put 40 MiB: %v", err)
	}
	fi, err := b.Stat(ctx, "large/stream")
	if err != nil || fi.Size != size {
		t.Fatalf("Stat = %+v, %v; want size %d", fi, err, size)
	}
	rc, err := b.Open(ctx, "large/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := sha256.New()
	n, err := io.Copy(got, rc)
	if err != nil {
		t.Fatalf("reading back after %d bytes: %v", n, err)
	}
	want := sha256.New()
	io.Copy(want, newGenerator(4, size))
	if n != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("read back %d bytes with a different sha256 than the %d written", n, size)
	}
}

func testRemove(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	put(t, b, "rm/x", []byte("x"))
	put(t, b, "rm/y", []byte("y"))
	for range 2 {
		if err := b.Remove(ctx, "rm/x"); err != nil {
			t.Fatalf("Remove rm/x: %v", err)
		}
		checkNotExist(t, b, "rm/x")
	}
	if err := b.Remove(ctx, "never/was"); err != nil {
		t.Fatalf("Remove of an absent object: %v", err)
	}
	checkContent(t, b, "rm/y", []byte("y"))
}

// Conditional writes (backend.Conditional): what a run that lost its
// lease while paused relies on to have its late writes refused.

// conditional is the store's Conditional, or nil (after checking that the
// store states none) when it has no conditional writes.
func conditional(t *testing.T, b backend.Backend) backend.Conditional {
	t.Helper()
	c := backend.ConditionalOf(b)
	if b.Properties().ConditionalWrite != (c != nil) {
		t.Fatalf("Properties().ConditionalWrite = %v, but ConditionalOf found %v", b.Properties().ConditionalWrite, c)
	}
	return c
}

// testConditionalStated: a store without conditional writes says so, and
// its Stat gives no version a caller could take for a token.
func testConditionalStated(t *testing.T, b backend.Backend) {
	if conditional(t, b) != nil {
		return // the tests below are for it
	}
	put(t, b, "v", []byte("v"))
	fi, err := b.Stat(context.Background(), "v")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Version != "" {
		t.Errorf("a store without ConditionalWrite gives Version %q", fi.Version)
	}
	// ReplaceIfUnchanged is then a plain Put, whatever the version.
	if err := backend.ReplaceIfUnchanged(context.Background(), b, "v", []byte("w"), "stale"); err != nil {
		t.Fatalf("ReplaceIfUnchanged on a store without conditions: %v", err)
	}
	checkContent(t, b, "v", []byte("w"))
}

// testConditionalVersionsAgree: Stat, List and OpenVersion give one token
// for one version of an object, and another once it is replaced.
func testConditionalVersionsAgree(t *testing.T, b backend.Backend) {
	c := conditional(t, b)
	if c == nil {
		return
	}
	ctx := context.Background()
	put(t, b, "cv/ref", []byte("019a\n"))
	st, err := b.Stat(ctx, "cv/ref")
	if err != nil {
		t.Fatal(err)
	}
	if st.Version == "" {
		t.Fatal("Stat gives no Version on a store with ConditionalWrite")
	}
	rc, fi, err := c.OpenVersion(ctx, "cv/ref")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if fi.Version != st.Version || string(got) != "019a\n" {
		t.Errorf("OpenVersion = %q at %q; Stat said %q", got, fi.Version, st.Version)
	}
	var listedVersion string
	if err := b.List(ctx, "cv/", func(fi backend.FileInfo) error {
		listedVersion = fi.Version
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if listedVersion != st.Version {
		t.Errorf("List gives Version %q, Stat %q", listedVersion, st.Version)
	}
	put(t, b, "cv/ref", []byte("019b\n"))
	again, err := b.Stat(ctx, "cv/ref")
	if err != nil {
		t.Fatal(err)
	}
	if again.Version == st.Version {
		t.Errorf("replaced with other bytes, the object keeps Version %q", st.Version)
	}
	data, version, err := backend.ReadAllVersion(ctx, b, "cv/ref", 100)
	if err != nil || string(data) != "019b\n" || version != again.Version {
		t.Errorf("ReadAllVersion = %q, %q, %v; want 019b at %q", data, version, err, again.Version)
	}
}

// testPutIfMatch: a write on the version read succeeds; a write on a
// version another writer replaced, or removed, is refused with
// ErrPreconditionFailed (permanent: never retried) and writes nothing.
func testPutIfMatch(t *testing.T, b backend.Backend) {
	c := conditional(t, b)
	if c == nil {
		return
	}
	ctx := context.Background()
	put(t, b, "refs/heads/main", []byte("old\n"))
	read, err := b.Stat(ctx, "refs/heads/main")
	if err != nil {
		t.Fatal(err)
	}
	// Another writer moves the ref on (run B, after a takeover).
	newer := []byte("newer\n")
	if err := c.PutIfMatch(ctx, "refs/heads/main", bytes.NewReader(newer), int64(len(newer)), read.Version); err != nil {
		t.Fatalf("PutIfMatch on the version read: %v", err)
	}
	checkContent(t, b, "refs/heads/main", newer)
	// The paused writer, resumed, writes on what it read before.
	stale := []byte("stale, from the run that lost its lease\n")
	err = c.PutIfMatch(ctx, "refs/heads/main", bytes.NewReader(stale), int64(len(stale)), read.Version)
	if !errors.Is(err, backend.ErrPreconditionFailed) || !backend.IsPermanent(err) {
		t.Fatalf("PutIfMatch on a replaced version: err = %v, want a permanent ErrPreconditionFailed", err)
	}
	checkContent(t, b, "refs/heads/main", newer)
	// Removed meanwhile: nothing to match, nothing written.
	cur, err := b.Stat(ctx, "refs/heads/main")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, "refs/heads/main"); err != nil {
		t.Fatal(err)
	}
	err = c.PutIfMatch(ctx, "refs/heads/main", bytes.NewReader(stale), int64(len(stale)), cur.Version)
	if !errors.Is(err, backend.ErrPreconditionFailed) {
		t.Fatalf("PutIfMatch on a removed object: err = %v, want ErrPreconditionFailed", err)
	}
	checkNotExist(t, b, "refs/heads/main")
}

// testPutIfMatchLarge: the condition holds for an object sent in parts
// (S3 multipart, GCS resumable chunks): refused, nothing of it published.
func testPutIfMatchLarge(t *testing.T, b backend.Backend) {
	c := conditional(t, b)
	if c == nil {
		return
	}
	const size = 20<<20 + 321
	ctx := context.Background()
	put(t, b, "big", []byte("small first"))
	read, err := b.Stat(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	put(t, b, "big", []byte("replaced"))
	err = c.PutIfMatch(ctx, "big", newGenerator(5, size), size, read.Version)
	if !errors.Is(err, backend.ErrPreconditionFailed) {
		t.Fatalf("PutIfMatch of %d bytes on a replaced version: err = %v, want ErrPreconditionFailed", size, err)
	}
	checkContent(t, b, "big", []byte("replaced"))
	cur, err := b.Stat(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PutIfMatch(ctx, "big", newGenerator(5, size), size, cur.Version); err != nil {
		t.Fatalf("PutIfMatch of %d bytes on the current version: %v", size, err)
	}
	if fi, err := b.Stat(ctx, "big"); err != nil || fi.Size != size {
		t.Fatalf("after PutIfMatch: Stat = %+v, %v", fi, err)
	}
}

// testConcurrentPutIfMatch: of writers that all read one version,
// exactly one replaces it.
func testConcurrentPutIfMatch(t *testing.T, b backend.Backend) {
	c := conditional(t, b)
	if c == nil {
		return
	}
	const n = 6
	ctx := context.Background()
	put(t, b, "cas", []byte("base"))
	read, err := b.Stat(ctx, "cas")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	contents := make([][]byte, n)
	start := make(chan struct{})
	for i := range n {
		contents[i] = []byte(fmt.Sprintf("writer %d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = c.PutIfMatch(ctx, "cas", bytes.NewReader(contents[i]), int64(len(contents[i])), read.Version)
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("PutIfMatch %d and %d on one version both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, backend.ErrPreconditionFailed):
			t.Fatalf("PutIfMatch %d: err = %v, want nil or ErrPreconditionFailed", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no PutIfMatch succeeded")
	}
	checkContent(t, b, "cas", contents[winner])
}

// testRemoveIfMatch: a removal of a version another writer replaced is
// refused and removes nothing; of the version read, it removes; of an
// object already gone, it is no error.
func testRemoveIfMatch(t *testing.T, b backend.Backend) {
	c := conditional(t, b)
	if c == nil {
		return
	}
	ctx := context.Background()
	put(t, b, "data/x.parquet", []byte("planned for removal"))
	planned, err := b.Stat(ctx, "data/x.parquet")
	if err != nil {
		t.Fatal(err)
	}
	put(t, b, "data/x.parquet", []byte("written again since"))
	err = c.RemoveIfMatch(ctx, "data/x.parquet", planned.Version)
	if !errors.Is(err, backend.ErrPreconditionFailed) || !backend.IsPermanent(err) {
		t.Fatalf("RemoveIfMatch of a replaced version: err = %v, want a permanent ErrPreconditionFailed", err)
	}
	checkContent(t, b, "data/x.parquet", []byte("written again since"))
	cur, err := b.Stat(ctx, "data/x.parquet")
	if err != nil {
		t.Fatal(err)
	}
	if err := backend.RemoveIfUnchanged(ctx, b, "data/x.parquet", cur.Version); err != nil {
		t.Fatalf("RemoveIfMatch of the current version: %v", err)
	}
	checkNotExist(t, b, "data/x.parquet")
	if err := c.RemoveIfMatch(ctx, "data/x.parquet", cur.Version); err != nil {
		t.Fatalf("RemoveIfMatch of an object already gone: %v", err)
	}
}

// testReplaceIfUnchanged: the one call a writer of refs makes, with the
// version it read or "" for an object it found absent.
func testReplaceIfUnchanged(t *testing.T, b backend.Backend) {
	c := conditional(t, b)
	if c == nil {
		return
	}
	ctx := context.Background()
	if err := backend.ReplaceIfUnchanged(ctx, b, "HEAD", []byte("ref: main\n"), ""); err != nil {
		t.Fatalf("ReplaceIfUnchanged of an absent object: %v", err)
	}
	// A second writer that also found it absent is refused.
	err := backend.ReplaceIfUnchanged(ctx, b, "HEAD", []byte("ref: other\n"), "")
	if !errors.Is(err, backend.ErrPreconditionFailed) {
		t.Fatalf("ReplaceIfUnchanged of an object found absent, now there: err = %v, want ErrPreconditionFailed", err)
	}
	checkContent(t, b, "HEAD", []byte("ref: main\n"))
	data, version, err := backend.ReadAllVersion(ctx, b, "HEAD", 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := backend.ReplaceIfUnchanged(ctx, b, "HEAD", append(data, '#'), version); err != nil {
		t.Fatalf("ReplaceIfUnchanged on the version read: %v", err)
	}
	err = backend.ReplaceIfUnchanged(ctx, b, "HEAD", []byte("late\n"), version)
	if !errors.Is(err, backend.ErrPreconditionFailed) {
		t.Fatalf("ReplaceIfUnchanged on a replaced version: err = %v", err)
	}
	checkContent(t, b, "HEAD", append(data, '#'))
}

// Helpers.

func put(t *testing.T, b backend.Backend, name string, content []byte) {
	t.Helper()
	if err := b.Put(context.Background(), name, bytes.NewReader(content), int64(len(content))); err != nil {
		t.Fatalf("Put %s: %v", name, err)
	}
}

// MustRead reads a whole object, failing the test on any error.
func MustRead(t *testing.T, r backend.Reader, name string) []byte {
	t.Helper()
	rc, err := r.Open(context.Background(), name)
	if err != nil {
		t.Fatalf("Open %s: %v", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return b
}

func checkContent(t *testing.T, r backend.Reader, name string, want []byte) {
	t.Helper()
	if got := MustRead(t, r, name); !bytes.Equal(got, want) {
		t.Fatalf("%s holds %d bytes %.40q, want %d bytes %.40q", name, len(got), got, len(want), want)
	}
	fi, err := r.Stat(context.Background(), name)
	if err != nil {
		t.Fatalf("Stat %s: %v", name, err)
	}
	if fi.Name != name || fi.Size != int64(len(want)) {
		t.Fatalf("Stat %s = %+v, want size %d", name, fi, len(want))
	}
}

func checkNotExist(t *testing.T, r backend.Reader, names ...string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range names {
		if rc, err := r.Open(ctx, name); !errors.Is(err, backend.ErrNotExist) {
			if err == nil {
				rc.Close()
			}
			t.Fatalf("Open %s: err = %v, want ErrNotExist", name, err)
		}
		if _, err := r.Stat(ctx, name); !errors.Is(err, backend.ErrNotExist) {
			t.Fatalf("Stat %s: err = %v, want ErrNotExist", name, err)
		}
	}
}

var invalidNames = []string{"../x", "/x", "a//b", "a/./b", "a/..", "..", ".", "", "a/", "a\\b", "nul\x00"}

// checkInvalidNamesRefused calls every method with names that could leave
// the root. A canceled context and a body that fails the test when read
// show that the name was refused before any I/O: a backend that sent a
// request would fail with the context's error instead.
func checkInvalidNamesRefused(t *testing.T, r backend.Reader, b backend.Backend) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(op, name string, err error) {
		t.Helper()
		if !errors.Is(err, backend.ErrInvalidName) {
			t.Errorf("%s %q: err = %v, want ErrInvalidName", op, name, err)
		}
	}
	body := mustNotRead{t}
	for _, name := range invalidNames {
		rc, err := r.Open(ctx, name)
		if err == nil {
			rc.Close()
		}
		check("Open", name, err)
		_, err = r.Stat(ctx, name)
		check("Stat", name, err)
		if name != "" && name != "a/" {
			err = r.List(ctx, name, func(fi backend.FileInfo) error {
				t.Errorf("List %q listed %s", name, fi.Name)
				return nil
			})
			if !errors.Is(err, backend.ErrNotSupported) {
				check("List", name, err)
			}
		}
		if b == nil {
			continue
		}
		check("Put", name, b.Put(ctx, name, body, 1))
		check("Create", name, b.Create(ctx, name, body, 1))
		check("Remove", name, b.Remove(ctx, name))
	}
}

type mustNotRead struct{ t *testing.T }

func (m mustNotRead) Read([]byte) (int, error) {
	m.t.Error("the body of a write to an invalid name was read")
	return 0, io.EOF
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func listAll(r backend.Reader, prefix string) (map[string]int64, error) {
	return listAllCtx(context.Background(), r, prefix)
}

func listAllCtx(ctx context.Context, r backend.Reader, prefix string) (map[string]int64, error) {
	got := map[string]int64{}
	var mu sync.Mutex
	err := r.List(ctx, prefix, func(fi backend.FileInfo) error {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := got[fi.Name]; dup {
			return fmt.Errorf("%s listed twice", fi.Name)
		}
		got[fi.Name] = fi.Size
		return nil
	})
	return got, err
}

func checkListing(t *testing.T, prefix string, got, want map[string]int64) {
	t.Helper()
	if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(want)) {
		t.Fatalf("List %q:\n got  %v\n want %v", prefix, sorted(got), sorted(want))
	}
}

func sorted(m map[string]int64) []string {
	var s []string
	for name, size := range m {
		s = append(s, fmt.Sprintf("%s=%d", name, size))
	}
	sort.Strings(s)
	return s
}

func sizes(files map[string][]byte) map[string]int64 {
	m := map[string]int64{}
	for name, b := range files {
		m[name] = int64(len(b))
	}
	return m
}

func isReserved(name string) bool {
	return len(name) >= len(backend.ReservedPrefix) && name[:len(backend.ReservedPrefix)] == backend.ReservedPrefix
}

// newGenerator returns size pseudo-random bytes determined by seed,
// produced as they are read.
func newGenerator(seed uint64, size int64) io.Reader {
	var key [32]byte
	key[0] = byte(seed)
	return io.LimitReader(rand.NewChaCha8(key), size)
}

func generated(seed uint64, size int64) []byte {
	b, _ := io.ReadAll(newGenerator(seed, size))
	return b
}
