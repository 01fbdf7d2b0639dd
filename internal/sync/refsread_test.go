package sync_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/counting"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsink "github.com/fdl-mirror/fdl-mirror/internal/sink"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// Refs are read with bounded concurrency, and not at all where the
// listing already says what a ref file holds (issue 14: a no-op S3→S3
// run with 20,003 refs took 25 s, about 40,000 GETs).

// opens is a store that records the names it is asked to Open, and how
// many Opens were under way at once; each Open waits delay first, as a
// request over a network would.
type opens struct {
	backend.Backend
	delay   time.Duration
	mu      sync.Mutex
	names   []string
	now     atomic.Int32
	maxSeen atomic.Int32
}

func (o *opens) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	o.mu.Lock()
	o.names = append(o.names, name)
	o.mu.Unlock()
	n := o.now.Add(1)
	defer o.now.Add(-1)
	for {
		m := o.maxSeen.Load()
		if n <= m || o.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(o.delay)
	return o.Backend.Open(ctx, name)
}

func (o *opens) Unwrap() backend.Reader { return o.Backend }

// refFilesOpened are the names under refs/ that were opened.
func (o *opens) refFilesOpened() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, n := range o.names {
		if strings.HasPrefix(n, repo.RefsDir) {
			out = append(out, n)
		}
	}
	return out
}

// manyRefs generates a small repository with n tags besides main, in a
// local folder.
func manyRefs(t *testing.T, n int) (dir string, g *generate.Repo) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "local")
	g, err := generate.Generate(context.Background(), dir, generate.Options{Versions: 3, FilesPerVersion: 1, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	refs := repo.Refs{}
	for i := range n {
		refs[fmt.Sprintf("refs/tags/t%04d", i)] = g.Versions[i%len(g.Versions)]
	}
	setRefs(t, dir, refs)
	return dir, g
}

func mustSync(t *testing.T, src backend.Reader, dst backend.Backend) *fdlsync.Report {
	t.Helper()
	rep, err := syncStores(context.Background(), src, dst, fdlsync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	return rep
}

// s3WithRefs is an upstream in an S3 bucket holding manyRefs(n), and an
// empty mirror bucket on the same gateway.
func s3WithRefs(t *testing.T, n int) (up, mirror backend.Backend, g *generate.Repo) {
	t.Helper()
	srv := testserver.S3(t)
	dir, g := manyRefs(t, n)
	up = openS3(t, srv.URL(srv.Bucket(t), "up"))
	mirror = openS3(t, srv.URL(srv.Bucket(t), "mirror"))
	mustSync(t, mustOpen(t, dir), up)
	return up, mirror, g
}

func TestRefFilesAreReadConcurrently(t *testing.T) {
	const n = 100
	dir, _ := manyRefs(t, n)
	src := &opens{Backend: mustOpen(t, dir).(backend.Backend), delay: 20 * time.Millisecond}
	dst, err := local.Create(filepath.Join(t.TempDir(), "mirror"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	mustSync(t, src, dst)
	if got := len(src.refFilesOpened()); got != n+1 {
		t.Errorf("opened %d ref files, want %d", got, n+1)
	}
	if m := src.maxSeen.Load(); m < 8 || m > repo.RefReaders+8 {
		// The +8: catalogs and version records are read beside the refs.
		t.Errorf("at most %d reads at once, want between 8 and %d", m, repo.RefReaders+8)
	}
}

// A no-op rerun from S3 to S3 reads no ref file on either side: the
// sink's values come from refs.json, the source's from the listing's
// ETags against the values the last run saw.
func TestNoopRerunObjectStoreReadsNoRefFile(t *testing.T) {
	const n = 200
	t.Run("s3", func(t *testing.T) {
		up, mirror, _ := s3WithRefs(t, n)
		noopReadsNoRefFile(t, up, mirror, n)
	})
	t.Run("gcs", func(t *testing.T) {
		srv := testserver.GCS(t)
		dir, _ := manyRefs(t, n)
		up := openWritable(t, srv.URL(srv.Bucket(t), "up"))
		mirror := openWritable(t, srv.URL(srv.Bucket(t), "mirror"))
		mustSync(t, mustOpen(t, dir), up)
		noopReadsNoRefFile(t, up, mirror, n)
	})
}

func openWritable(t *testing.T, addr string) backend.Backend {
	t.Helper()
	b, closeIt, err := location.OpenWritable(context.Background(), addr, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeIt() })
	return b
}

func noopReadsNoRefFile(t *testing.T, up, mirror backend.Backend, n int) {
	mustSync(t, up, mirror)

	src, dst := &opens{Backend: up}, &opens{Backend: mirror}
	cs, cd := counting.Wrap(src), counting.WrapBackend(dst)
	rep := mustSync(t, cs, cd)
	if len(rep.RefsMoved) != 0 || rep.Lag != 0 {
		t.Fatalf("no-op moved %v, lag %d", rep.RefsMoved, rep.Lag)
	}
	if got := src.refFilesOpened(); len(got) != 0 {
		t.Errorf("source: %d ref files read (%v…), want none", len(got), got[0])
	}
	if got := dst.refFilesOpened(); len(got) != 0 {
		t.Errorf("sink: %d ref files read (%v…), want none", len(got), got[0])
	}
	if c := cs.Counts().Requests() + cd.Counts().Requests(); c > 20 {
		t.Errorf("no-op with %d refs: %d store calls", n+1, c)
	}
}

// A ref upstream rewritten to another version (the same size, a new
// ETag) is read again and followed.
func TestRefChangedUpstreamIsReadAgain(t *testing.T) {
	up, mirror, g := s3WithRefs(t, 20)
	mustSync(t, up, mirror)

	const tag = "refs/heads/other"
	// A new branch and a moved one: both must be read.
	content := repo.RefFileContent(g.Versions[0])
	if err := up.Put(context.Background(), tag, bytes.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
	moved := repo.RefFileContent(g.Versions[2])
	if len(moved) != len(repo.RefFileContent(g.Versions[1])) {
		t.Fatal("generated version IDs differ in length; the test needs the same size")
	}
	if err := up.Put(context.Background(), "refs/tags/t0001", bytes.NewReader(moved), int64(len(moved))); err != nil {
		t.Fatal(err)
	}
	src := &opens{Backend: up}
	rep, err := syncStores(context.Background(), src, mirror, fdlsync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := src.refFilesOpened()
	sort.Strings(got)
	if strings.Join(got, " ") != "refs/heads/other refs/tags/t0001" {
		t.Errorf("source ref files read: %v, want refs/heads/other and refs/tags/t0001", got)
	}
	// A tag never moves: the rewritten one is refused, which shows it was
	// seen; the new branch is mirrored.
	refusedTag := false
	for _, r := range rep.Refused {
		refusedTag = refusedTag || (r.Ref == "refs/tags/t0001" && r.Reason == fdlsync.ReasonTagMoved)
	}
	if !refusedTag {
		t.Errorf("moved tag not refused: %+v", rep.Refused)
	}
	if len(rep.RefsMoved) != 1 || rep.RefsMoved[0].Ref != tag {
		t.Errorf("refs moved: %+v, want %s", rep.RefsMoved, tag)
	}
}

// A run that stopped between a ref file and refs.json left the marker:
// the next run reads every ref file of the mirror instead of trusting
// refs.json, and removes the marker once refs.json is right again.
func TestRefsMovingMarkerForcesReadingTheSinksRefs(t *testing.T) {
	dir, g := manyRefs(t, 5)
	mirrorDir := filepath.Join(t.TempDir(), "mirror")
	dst, err := local.Create(mirrorDir)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	src := mustOpen(t, dir)
	mustSync(t, src, dst)

	// What a run moving main from the second version to the third leaves
	// when stopped after main's file: refs.json still says the second.
	refs, _, err := repo.ReadRefs(context.Background(), dst)
	if err != nil {
		t.Fatal(err)
	}
	refs[generate.MainRef] = g.Versions[1]
	stale := repo.RefsJSON(refs)
	if err := os.WriteFile(filepath.Join(mirrorDir, repo.RefsFile), stale, 0o644); err != nil {
		t.Fatal(err)
	}

	// Without the marker refs.json is trusted: main's file is not read.
	withoutMarker := &opens{Backend: dst}
	if _, err := syncStores(context.Background(), src, withoutMarker, fdlsync.Options{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if got := withoutMarker.refFilesOpened(); len(got) != 0 {
		t.Fatalf("without the marker, ref files read: %v", got)
	}

	marker := filepath.Join(mirrorDir, backend.ReservedPrefix+fdlsink.RefsMovingFile)
	if err := os.WriteFile(marker, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withMarker := &opens{Backend: dst}
	rep := mustSync(t, src, withMarker)
	if got := withMarker.refFilesOpened(); len(got) != 6 {
		t.Errorf("with the marker, %d ref files read (%v), want all 6", len(got), got)
	}
	// main's file already said the third version: nothing to move, and
	// refs.json says so again.
	if len(rep.RefsMoved) != 0 {
		t.Errorf("refs moved: %+v; main's file already held the third version", rep.RefsMoved)
	}
	raw, _ := os.ReadFile(filepath.Join(mirrorDir, repo.RefsFile))
	if bytes.Equal(raw, stale) || !strings.Contains(string(raw), g.Versions[2]) {
		t.Errorf("refs.json not rewritten from the ref files:\n%s", raw)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("marker still there after refs.json was written: %v", err)
	}
}

// A ref file that fails to be written leaves the marker, so that the
// next run does not trust refs.json over it.
func TestFailedRefWriteLeavesTheMarker(t *testing.T) {
	dir, _ := manyRefs(t, 2)
	mirrorDir := filepath.Join(t.TempDir(), "mirror")
	dst, err := local.Create(mirrorDir)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	rep, err := syncStores(context.Background(), mustOpen(t, dir), failPut{dst, "refs/tags/t0001"}, fdlsync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Refused) != 1 || rep.Refused[0].Reason != fdlsync.ReasonCopy {
		t.Fatalf("refused: %+v, want the one ref write", rep.Refused)
	}
	marker := filepath.Join(mirrorDir, backend.ReservedPrefix+fdlsink.RefsMovingFile)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("no marker after a failed ref write: %v", err)
	}
	mustSync(t, mustOpen(t, dir), dst)
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("marker still there after a complete run: %v", err)
	}
}

// failPut is a store whose Put of one name fails.
type failPut struct {
	backend.Backend
	name string
}

func (f failPut) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if name == f.name {
		return fmt.Errorf("%s: write refused by the test", name)
	}
	return f.Backend.Put(ctx, name, r, size)
}

func (f failPut) Unwrap() backend.Reader { return f.Backend }

// A run that takes the lock reads upstream's refs again once it holds it;
// a ref file whose listing says it still holds the value just read is not
// read a second time: a first mirror reads each ref file once.
func TestRunTakingTheLockReadsEachRefFileOnce(t *testing.T) {
	const n = 100
	up, mirror, _ := s3WithRefs(t, n)
	src := &opens{Backend: up}
	locks := 0
	rep, err := syncStores(context.Background(), src, mirror, fdlsync.Options{Lock: func(ctx context.Context) (context.Context, func(), error) {
		locks++
		return ctx, func() {}, nil
	}})
	if err != nil || !rep.OK() || len(rep.RefsMoved) != n+1 {
		t.Fatalf("first mirror: %v, moved %d refs, refused %+v", err, len(rep.RefsMoved), rep.Refused)
	}
	if locks != 1 {
		t.Fatalf("the run took the lock %d times, want once", locks)
	}
	opened := map[string]int{}
	for _, name := range src.refFilesOpened() {
		opened[name]++
	}
	if len(opened) != n+1 {
		t.Errorf("%d distinct ref files read, want %d", len(opened), n+1)
	}
	for name, k := range opened {
		if k != 1 {
			t.Errorf("%s read %d times, want once", name, k)
		}
	}
}

// refPuts is a sink that records how many ref files were being written at
// once; each such Put waits delay first, as a request would.
type refPuts struct {
	backend.Backend
	delay   time.Duration
	now     atomic.Int32
	maxSeen atomic.Int32
}

func (p *refPuts) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if strings.HasPrefix(name, repo.RefsDir) {
		n := p.now.Add(1)
		defer p.now.Add(-1)
		for m := p.maxSeen.Load(); n > m && !p.maxSeen.CompareAndSwap(m, n); m = p.maxSeen.Load() {
		}
		time.Sleep(p.delay)
	}
	return p.Backend.Put(ctx, name, r, size)
}

func (p *refPuts) Unwrap() backend.Reader { return p.Backend }

// Stage two writes the ref files several at once (refs.json after all of
// them): one at a time, a first mirror of 20,000 tags took 40 s on S3.
func TestRefFilesAreWrittenConcurrently(t *testing.T) {
	const n = 100
	dir, _ := manyRefs(t, n)
	dst, err := local.Create(filepath.Join(t.TempDir(), "mirror"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	sink := &refPuts{Backend: dst, delay: 10 * time.Millisecond}
	rep := mustSync(t, mustOpen(t, dir), sink)
	if len(rep.RefsMoved) != n+1 {
		t.Fatalf("moved %d refs, want %d", len(rep.RefsMoved), n+1)
	}
	if m := sink.maxSeen.Load(); m < 8 || m > repo.RefReaders {
		t.Errorf("at most %d ref files written at once, want between 8 and %d", m, repo.RefReaders)
	}
	for i := 1; i < len(rep.RefsMoved); i++ {
		if rep.RefsMoved[i-1].Ref >= rep.RefsMoved[i].Ref {
			t.Fatalf("refs moved not reported in name order: %s before %s", rep.RefsMoved[i-1].Ref, rep.RefsMoved[i].Ref)
		}
	}
}

// A dry run plans the ref files in name order, as a run writes them
// (several at once) and reports them.
func TestDryRunPlansRefsInNameOrder(t *testing.T) {
	dir, _ := manyRefs(t, 40)
	dst, err := local.Create(filepath.Join(t.TempDir(), "mirror"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	rep, err := syncStores(context.Background(), mustOpen(t, dir), dst, fdlsync.Options{DryRun: true})
	if err != nil || !rep.OK() {
		t.Fatalf("dry run: %v %+v", err, rep.Refused)
	}
	var refs []string
	for _, name := range rep.Planned {
		if strings.HasPrefix(name, repo.RefsDir) {
			refs = append(refs, name)
		}
	}
	if len(refs) != 41 || !slices.IsSorted(refs) {
		t.Fatalf("dry run planned %d ref files, in this order: %v; want 41 in name order", len(refs), refs)
	}
}
