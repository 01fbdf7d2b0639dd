package sync_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// A catalog read whole whose files are sorted on disk in runs of a few
// rows and go through the steps of mirroring two at a time mirrors every
// data file, a first run and an incremental one alike. With an alternate
// catalog every version is read whole (no difference is taken), and its
// parents' catalogs, published by the run or before it, are gone through
// beside each of its two catalogs.
func TestWholeReadsInBatchesFromRunsOnDiskMirrorEveryFile(t *testing.T) {
	for _, alternate := range []string{"", "1.0"} {
		t.Run("alternate "+alternate, func(t *testing.T) {
			opts := generate.Options{Versions: 3, FilesPerVersion: 5, DeleteFiles: true, RemoveFiles: true, FastParquet: true, AlternateCatalog: alternate}
			mirrorInBatches(t, opts)
		})
	}
}

func mirrorInBatches(t *testing.T, opts generate.Options) {
	defer catalog.SetSortMemory(200)()
	defer fdlsync.SetDataBatch(2)()
	up, mirror := filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	ctx := context.Background()
	if _, err := generate.Generate(ctx, up, opts); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		rep, _ := syncInto(t, up, mirror)
		if !rep.OK() {
			t.Fatalf("%s refused: %+v", what, rep.Refused)
		}
		files := dataFilesIn(t, up)
		if len(files) < 10 {
			t.Fatalf("%d data files upstream: too few to take several batches", len(files))
		}
		for f := range files {
			want, err := os.ReadFile(filepath.Join(up, f))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(mirror, f))
			if err != nil || string(got) != string(want) {
				t.Errorf("%s: %s in the mirror: %d bytes, err %v; want its %d upstream bytes", what, f, len(got), err, len(want))
			}
		}
		if mainOf(t, mirror) != mainOf(t, up) {
			t.Errorf("%s: main in the mirror is %q, upstream %q", what, mainOf(t, mirror), mainOf(t, up))
		}
	}
	check("the first run")
	if _, err := generate.AddVersion(ctx, up, 3, opts); err != nil {
		t.Fatal(err)
	}
	check("the incremental run")
}

// overlapSink is a local sink whose Barrier first waits, up to a second,
// for a write made without a sync to return after it started, and counts
// the barriers that saw one.
type overlapSink struct {
	backend.Backend
	mu                         sync.Mutex
	puts, barriers, overlapped int
}

func (s *overlapSink) Unwrap() backend.Reader { return s.Backend }

func (s *overlapSink) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	err := s.Backend.Put(ctx, name, r, size)
	if err == nil && backend.SyncDeferred(ctx) {
		s.mu.Lock()
		s.puts++
		s.mu.Unlock()
	}
	return err
}

func (s *overlapSink) Barrier(ctx context.Context) error {
	s.mu.Lock()
	start := s.puts
	s.barriers++
	s.mu.Unlock()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		n := s.puts
		s.mu.Unlock()
		if n > start {
			s.mu.Lock()
			s.overlapped++
			s.mu.Unlock()
			break
		}
	}
	b, _ := backend.As[backend.Barrier](s.Backend)
	return b.Barrier(ctx)
}

// A catalog's batches are copied while the barrier of the batch before
// runs: on a disk that barrier is a syncfs waiting for write-back, which
// kept the copies waiting. The mirror is still whole and the record of
// unsynced files gone.
func TestNextBatchIsCopiedWhileTheBarrierRuns(t *testing.T) {
	defer fdlsync.SetDataBatch(2)()
	up, mirror := filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	ctx := context.Background()
	if _, err := generate.Generate(ctx, up, generate.Options{Versions: 1, FilesPerVersion: 12, FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	var sink *overlapSink
	rep, err := runLocalThrough(t, up, mirror, fdlsync.Options{Concurrency: 2}, func(b backend.Backend) backend.Backend {
		sink = &overlapSink{Backend: b}
		return sink
	})
	if err != nil || !rep.OK() {
		t.Fatalf("run: %v %+v", err, rep)
	}
	t.Logf("%d barriers, %d of them while copies went on", sink.barriers, sink.overlapped)
	if sink.overlapped == 0 {
		t.Errorf("no copy returned while any of %d barriers ran: each batch waited for the barrier before it", sink.barriers)
	}
	if wrong := checkMirror(t, up, mirror); len(wrong) > 0 {
		t.Fatalf("the mirror is wrong:\n%s", strings.Join(wrong, "\n"))
	}
	if _, err := os.Stat(filepath.Join(mirror, ".fdl-mirror", fdlsync.UnsyncedFile)); !os.IsNotExist(err) {
		t.Errorf("the record of unsynced files is still there after the run: %v", err)
	}
}

// announcingSource is a local upstream that records what the run
// announces it will read (backend.ReadAheader), call by call.
type announcingSource struct {
	backend.Reader
	mu    sync.Mutex
	calls [][]string
}

func (s *announcingSource) Unwrap() backend.Reader { return s.Reader }

func (s *announcingSource) ReadAhead(ctx context.Context, names []string) {
	s.mu.Lock()
	s.calls = append(s.calls, append([]string(nil), names...))
	s.mu.Unlock()
	s.Reader.(backend.ReadAheader).ReadAhead(ctx, names)
}

// The data files a batch copies from a local upstream are announced to it
// first (read ahead), in the order they are copied, so that their reads
// do not wait one by one; every file the run copies is announced once.
func TestBatchCopiesAreReadAheadInOrder(t *testing.T) {
	defer fdlsync.SetDataBatch(4)()
	up, mirror := filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	ctx := context.Background()
	r, err := generate.Generate(ctx, up, generate.Options{Versions: 1, FilesPerVersion: 12, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.Open(up)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	src := &announcingSource{Reader: l}
	dst, err := local.Create(mirror)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	rep, err := syncStores(ctx, src, dst, fdlsync.Options{Concurrency: 2})
	if err != nil || !rep.OK() {
		t.Fatalf("run: %v %+v", err, rep)
	}
	announced := map[string]int{}
	for _, call := range src.calls {
		if len(call) > 4 {
			t.Errorf("one announcement of %d files, for batches of 4", len(call))
		}
		if !slices.IsSorted(call) {
			t.Errorf("announced out of path order: %v", call)
		}
		for _, n := range call {
			announced[n]++
		}
	}
	for _, f := range r.DataFiles {
		if announced[f] != 1 {
			t.Errorf("%s announced %d times, want once", f, announced[f])
		}
	}
	if len(announced) != len(r.DataFiles) {
		t.Errorf("announced %d files, the run copied %d data files: %v", len(announced), len(r.DataFiles), announced)
	}
	if wrong := checkMirror(t, up, mirror); len(wrong) > 0 {
		t.Fatalf("the mirror is wrong:\n%s", strings.Join(wrong, "\n"))
	}
}
