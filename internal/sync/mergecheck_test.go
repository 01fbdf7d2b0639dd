package sync_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/counting"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// A version of many files is checked in an S3 mirror by merging its
// files, in path order, with pages of the mirror's data_dir listed from
// the files it asks about: what the check costs and holds follows the
// version, not the mirror. data_dir is never listed whole.

// dataDirAsks records what a store is asked about data_dir: whole
// listings (List, of data_dir or of everything), pages (ListPage) and
// files asked for alone (Stat).
type dataDirAsks struct {
	backend.Backend
	mu                  sync.Mutex
	lists, pages, stats int
}

func (d *dataDirAsks) Unwrap() backend.Reader { return d.Backend }

// count adds one to n where under says the ask is about data_dir.
func (d *dataDirAsks) count(n *int, under bool) {
	if under {
		d.mu.Lock()
		*n++
		d.mu.Unlock()
	}
}

func (d *dataDirAsks) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	d.count(&d.lists, strings.HasPrefix(prefix, repo.DefaultDataDir) || prefix == "")
	return d.Backend.List(ctx, prefix, fn)
}

func (d *dataDirAsks) ListPage(ctx context.Context, prefix, from string) ([]backend.FileInfo, bool, error) {
	d.count(&d.pages, strings.HasPrefix(prefix, repo.DefaultDataDir))
	return backend.PageListerOf(d.Backend).ListPage(ctx, prefix, from)
}

func (d *dataDirAsks) Stat(ctx context.Context, name string) (backend.FileInfo, error) {
	d.count(&d.stats, strings.HasPrefix(name, repo.DefaultDataDir))
	return d.Backend.Stat(ctx, name)
}

// syncToS3 syncs the folder up into addr, an S3 mirror seen through the
// counting wrapper and a dataDirAsks.
func syncToS3(t *testing.T, up, addr string) (*fdlsync.Report, *dataDirAsks, counting.Counts) {
	t.Helper()
	ctx := context.Background()
	src, err := local.Open(up)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, closeDst, err := location.OpenWritable(ctx, addr, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeDst()
	counted := counting.WrapBackend(dst)
	store := &dataDirAsks{Backend: counted}
	rep, err := syncStores(ctx, src, store, fdlsync.Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	return rep, store, counted.Counts()
}

func TestAVersionOfManyFilesIsCheckedInAnS3MirrorPageByPage(t *testing.T) {
	defer fdlsync.SetMaxStatChecks(2)()
	srv := testserver.S3(t)
	bucket := srv.Bucket(t)
	addr := srv.URL(bucket, "mirror")
	up := filepath.Join(t.TempDir(), "up")
	// An alternate catalog has each version read whole: its parents'
	// files are confirmed in the mirror, as a version's own are checked.
	opts := generate.Options{Versions: 2, FilesPerVersion: 3, FastParquet: true, AlternateCatalog: "1.0"}
	g, err := generate.Generate(context.Background(), up, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The mirror's data_dir holds 2,400 files besides the repository's,
	// before and after them in name order: listed whole it is three
	// pages, which the check of a version of a few files never needs.
	const padding = 1200
	client := srv.Client()
	padDataDir(t, srv, bucket, "mirror/", padding)
	if t.Failed() {
		return
	}

	checkPaged := func(t *testing.T, rep *fdlsync.Report, store *dataDirAsks, counts counting.Counts, maxPages int) {
		t.Helper()
		if store.lists != 0 {
			t.Errorf("data_dir listed whole %d times; want it merged a page at a time", store.lists)
		}
		// One more page than the passes': the one that finds data_dir
		// longer than a page (see sink.DataCursor).
		if store.pages < 2 || store.pages > maxPages+1 {
			t.Errorf("%d pages of data_dir listed; want 2 to %d (the first, then a page per version's pass; listed whole it is %d)", store.pages, maxPages+1, (2*padding)/1000+1)
		}
		if counts.List < int64(store.pages) {
			t.Errorf("the counting wrapper saw %d list requests, fewer than the %d pages", counts.List, store.pages)
		}
	}

	t.Run("first mirror", func(t *testing.T) {
		rep, store, counts := syncToS3(t, up, addr)
		if !rep.OK() {
			t.Fatalf("refused: %+v", rep.Refused)
		}
		checkPaged(t, rep, store, counts, 2*len(g.Versions))
		if p := problemsAt(t, addr); len(p) > 0 {
			t.Errorf("verify: %v", p)
		}
	})

	gone := repo.DefaultDataDir + strings.TrimPrefix(g.DataFiles[0], repo.DefaultDataDir)
	t.Run("a file removed from the mirror is copied again", func(t *testing.T) {
		if _, err := client.DeleteObject(context.Background(), &awss3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("mirror/" + gone)}); err != nil {
			t.Fatal(err)
		}
		if _, err := generate.AddVersion(context.Background(), up, 2, opts); err != nil {
			t.Fatal(err)
		}
		rep, store, counts := syncToS3(t, up, addr)
		if !rep.OK() {
			t.Fatalf("refused: %+v", rep.Refused)
		}
		checkPaged(t, rep, store, counts, 2)
		if _, ok := srv.Objects(bucket, "mirror")[gone]; !ok {
			t.Errorf("%s, removed from the mirror, was not copied again", gone)
		}
		if p := problemsAt(t, addr); len(p) > 0 {
			t.Errorf("verify: %v", p)
		}
	})

	t.Run("a file of another size is refused and left alone", func(t *testing.T) {
		bad := repo.DefaultDataDir + strings.TrimPrefix(g.DataFiles[1], repo.DefaultDataDir)
		if _, err := client.PutObject(context.Background(), &awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("mirror/" + bad), Body: bytes.NewReader([]byte("short"))}); err != nil {
			t.Fatal(err)
		}
		if _, err := generate.AddVersion(context.Background(), up, 2, opts); err != nil {
			t.Fatal(err)
		}
		rep, store, counts := syncToS3(t, up, addr)
		checkPaged(t, rep, store, counts, 2)
		refused := false
		for _, r := range rep.Refused {
			refused = refused || (r.Reason == fdlsync.ReasonSizeMismatch && strings.Contains(r.Message, bad))
		}
		if !refused {
			t.Errorf("no size refusal naming %s: %+v", bad, rep.Refused)
		}
		if size := srv.Objects(bucket, "mirror")[bad]; size != 5 {
			t.Errorf("%s is %d bytes in the mirror; want the 5 it had, left alone", bad, size)
		}
	})
}

// padDataDir puts 2×n one-byte objects in the data_dir of the mirror at
// prefix in bucket, n named before any data file and n after: a data_dir
// that takes pages to list, as a mirror of many files has.
func padDataDir(t *testing.T, srv *testserver.S3Server, bucket, prefix string, n int) {
	t.Helper()
	client := srv.Client()
	slots := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range 2 * n {
		key := fmt.Sprintf("%s%saaa-other/%04d", prefix, repo.DefaultDataDir, i)
		if i >= n {
			key = fmt.Sprintf("%s%szzz-other/%04d", prefix, repo.DefaultDataDir, i)
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if _, err := client.PutObject(context.Background(), &awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader([]byte("x"))}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// A first mirror's data_dir holds nothing yet (or what an interrupted run
// left): one page says so, and that listing answers every version's check,
// as the files the run copies since need no asking; passes would list the
// run's own copies again, version after version.
func TestAFirstS3MirrorListsItsDataDirOnce(t *testing.T) {
	defer fdlsync.SetMaxStatChecks(2)()
	srv := testserver.S3(t)
	addr := srv.URL(srv.Bucket(t), "mirror")
	up := filepath.Join(t.TempDir(), "up")
	opts := generate.Options{Versions: 3, FilesPerVersion: 3, FastParquet: true, AlternateCatalog: "1.0"}
	if _, err := generate.Generate(context.Background(), up, opts); err != nil {
		t.Fatal(err)
	}
	rep, store, _ := syncToS3(t, up, addr)
	if !rep.OK() || len(rep.VersionsPublished) != 3 {
		t.Fatalf("published %v, refused %+v; want all 3 versions", rep.VersionsPublished, rep.Refused)
	}
	if store.pages != 1 || store.lists != 1 {
		t.Errorf("data_dir: %d pages and %d whole listings; want the one page that finds it short, then one listing", store.pages, store.lists)
	}
	if p := problemsAt(t, addr); len(p) > 0 {
		t.Errorf("verify: %v", p)
	}
}

// A server-side copy checks the upstream file's size first. The copies of
// a catalog of many files go in path order, so their sizes come from the
// catalog's own pass over the upstream's data_dir, a page at a time:
// neither a request per file nor a listing of the whole of data_dir.
func TestServerSideCopiesOfManyFilesTakeSizesFromPages(t *testing.T) {
	defer fdlsync.SetMaxStatChecks(2)()
	srv := testserver.S3(t)
	ctx := context.Background()
	up := t.TempDir()
	g, err := generate.Generate(ctx, up, generate.Options{Versions: 2, FilesPerVersion: 6, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	a, closeA, err := location.OpenWritable(ctx, srv.URL(srv.Bucket(t), "a"), location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeA()
	lsrc, err := local.Open(up)
	if err != nil {
		t.Fatal(err)
	}
	defer lsrc.Close()
	if rep, err := syncStores(ctx, lsrc, a, fdlsync.Options{}); err != nil || !rep.OK() {
		t.Fatalf("local to s3: %v %+v", err, rep)
	}

	// mirror syncs a into a new mirror in its own bucket (its data_dir
	// first padded past a page with pad files) and says what a was asked.
	mirror := func(t *testing.T, pad int) *dataDirAsks {
		t.Helper()
		bucket := srv.Bucket(t)
		if pad > 0 {
			padDataDir(t, srv, bucket, "m/", pad)
		}
		b, closeB, err := location.OpenWritable(ctx, srv.URL(bucket, "m"), location.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer closeB()
		src := &dataDirAsks{Backend: a}
		toB := counting.WrapBackend(b)
		rep, err := syncStores(ctx, src, toB, fdlsync.Options{Concurrency: 4})
		if err != nil || !rep.OK() {
			t.Fatalf("s3 to s3: %v %+v", err, rep)
		}
		if c := toB.Counts(); c.Copy < int64(len(g.DataFiles)) {
			t.Fatalf("%d server-side copies for %d data files; the sizes checked here are a server-side copy's", c.Copy, len(g.DataFiles))
		}
		back := t.TempDir()
		lback, _ := local.Create(back)
		if rep, err := syncStores(ctx, b, lback, fdlsync.Options{}); err != nil || !rep.OK() {
			t.Fatalf("s3 back to local: %v %+v", err, rep)
		}
		fdltest.AssertMirrored(t, up, back, nil)
		return src
	}
	fromPages := func(t *testing.T, src *dataDirAsks) {
		t.Helper()
		if src.pages == 0 || src.lists != 0 {
			t.Errorf("the upstream's data_dir: %d pages, %d whole listings; want the copies' sizes from pages, never a whole listing", src.pages, src.lists)
		}
		if src.stats > 1 {
			t.Errorf("%d upstream sizes asked one by one for %d files copied; want them from the pages", src.stats, len(g.DataFiles))
		}
	}

	// The sink's data_dir takes pages to list, as a mirror of many files'
	// does.
	t.Run("into a mirror of many files", func(t *testing.T) {
		fromPages(t, mirror(t, 1200))
	})
	// A first mirror's data_dir fits a page and is listed whole, and the
	// upstream's with it, once for the run (source.Size): a pass per
	// version would list again the pages each version's copies fall in.
	t.Run("a first mirror lists the upstream once", func(t *testing.T) {
		src := mirror(t, 0)
		if src.lists != 1 || src.pages != 0 {
			t.Errorf("the upstream's data_dir: %d whole listings, %d pages; want the one listing", src.lists, src.pages)
		}
	})
	// Unless a catalog lists more files than that listing should hold.
	t.Run("a first mirror of a catalog past sourcePassFiles", func(t *testing.T) {
		defer fdlsync.SetSourcePassFiles(3)()
		fromPages(t, mirror(t, 0))
	})
}
