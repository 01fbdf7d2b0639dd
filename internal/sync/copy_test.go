package sync_test

import (
	"context"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/counting"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

func openS3(t *testing.T, addr string) *s3.Store {
	t.Helper()
	u, err := url.Parse(addr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s3.Open(context.Background(), u, s3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Within one S3 endpoint the data files are copied server-side: their
// bytes never pass through the mirror. Between stores they are streamed.
func TestSyncCopiesServerSideWithinOneS3Endpoint(t *testing.T) {
	srv := testserver.S3(t)
	up := t.TempDir()
	repo, err := generate.Generate(context.Background(), up, generate.Options{Versions: 2, FilesPerVersion: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := openS3(t, srv.URL(srv.Bucket(t), "a"))
	b := openS3(t, srv.URL(srv.Bucket(t), "b"))
	lsrc, _ := local.Open(up)

	// Streamed: local to S3.
	toA := counting.WrapBackend(a)
	if rep, err := syncStores(ctx, lsrc, toA, fdlsync.Options{}); err != nil || !rep.OK() {
		t.Fatalf("local to s3: %v %+v", err, rep)
	}
	if c := toA.Counts(); c.Copy != 0 || c.Put == 0 {
		t.Errorf("local to s3: %d server-side copies, %d puts; want streamed puts", c.Copy, c.Put)
	}

	// Server-side: S3 to S3 on the same endpoint.
	fromA := counting.Wrap(a)
	toB := counting.WrapBackend(b)
	rep, err := syncStores(ctx, fromA, toB, fdlsync.Options{})
	if err != nil || !rep.OK() {
		t.Fatalf("s3 to s3: %v %+v", err, rep)
	}
	c := toB.Counts()
	if c.Copy < int64(len(repo.DataFiles)) {
		t.Errorf("s3 to s3: %d server-side copies for %d data files", c.Copy, len(repo.DataFiles))
	}
	// What the mirror reads from the source is records, catalogs and refs:
	// a handful of objects, not one per data file.
	if opens := fromA.Counts().Open; opens >= int64(len(repo.DataFiles))/2 {
		t.Errorf("s3 to s3 opened %d source objects for %d data files", opens, len(repo.DataFiles))
	}
	back := t.TempDir()
	lback, _ := local.Create(back)
	if rep, err := syncStores(ctx, b, lback, fdlsync.Options{}); err != nil || !rep.OK() {
		t.Fatalf("s3 back to local: %v %+v", err, rep)
	}
	fdltest.AssertMirrored(t, up, back, nil)
}

// listedPrefixes records the prefixes a store was asked to list.
type listedPrefixes struct {
	backend.Reader
	mu       sync.Mutex
	prefixes []string
}

func (l *listedPrefixes) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	l.mu.Lock()
	l.prefixes = append(l.prefixes, prefix)
	l.mu.Unlock()
	return l.Reader.List(ctx, prefix, fn)
}

func (l *listedPrefixes) Unwrap() backend.Reader { return l.Reader }

// A server-side copy checks the source file's size first. A run adding
// a few files asks for those sizes one by one; only a run copying as many
// files as a listing of the source's data_dir has pages lists it.
func TestFewServerSideCopiesAskSizesOneByOne(t *testing.T) {
	srv := testserver.S3(t)
	up := t.TempDir()
	ctx := context.Background()
	if _, err := generate.Generate(ctx, up, generate.Options{Versions: 2, FilesPerVersion: 10, FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	a := openS3(t, srv.URL(srv.Bucket(t), "a"))
	b := openS3(t, srv.URL(srv.Bucket(t), "b"))
	lsrc, _ := local.Open(up)
	mustRun := func(src backend.Reader, dst backend.Backend) {
		t.Helper()
		if rep, err := syncStores(ctx, src, dst, fdlsync.Options{}); err != nil || !rep.OK() {
			t.Fatalf("run: %v %+v", err, rep)
		}
	}
	mustRun(lsrc, a)
	first := &listedPrefixes{Reader: a}
	counted := counting.Wrap(first)
	mustRun(counted, b)
	if !slices.Contains(first.prefixes, "data/") {
		t.Errorf("a first mirror of 20 files listed %v, not data/: a size request per file", first.prefixes)
	}
	if n := counted.Counts().Stat; n > 1 {
		t.Errorf("a first mirror asked for %d sizes one by one; want at most one before listing", n)
	}

	if _, err := generate.AddVersion(ctx, up, 1, generate.Options{FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	mustRun(lsrc, a)
	next := &listedPrefixes{Reader: a}
	counted = counting.Wrap(next)
	rep, err := syncStores(ctx, counted, counting.WrapBackend(b), fdlsync.Options{})
	if err != nil || !rep.OK() || rep.FilesCopied == 0 {
		t.Fatalf("incremental: %v %+v", err, rep)
	}
	if slices.Contains(next.prefixes, "data/") {
		t.Errorf("adding one data file listed the source's data/ (%v)", next.prefixes)
	}
	if n := counted.Counts().Stat; n != 1 {
		t.Errorf("adding one data file asked for %d source sizes, want 1", n)
	}
	back := t.TempDir()
	lback, _ := local.Create(back)
	mustRun(b, lback)
	fdltest.AssertMirrored(t, up, back, nil)
}
