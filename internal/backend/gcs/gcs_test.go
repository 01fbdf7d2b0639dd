package gcs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/backendtest"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/counting"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/gcs"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func open(t *testing.T, srv *testserver.GCSServer, bucket, prefix string, opts gcs.Options) *gcs.Store {
	t.Helper()
	u, err := url.Parse(srv.URL(bucket, prefix))
	if err != nil {
		t.Fatal(err)
	}
	s, err := gcs.Open(context.Background(), u, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func read(t *testing.T, r backend.Reader, name string) []byte {
	t.Helper()
	rc, err := r.Open(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBasics(t *testing.T) {
	srv := testserver.GCS(t)
	s := open(t, srv, srv.Bucket(t), "mirror/x", gcs.Options{})
	ctx := context.Background()
	if err := s.Put(ctx, "a/b.txt", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, "a/b.txt"); string(got) != "hello" {
		t.Fatalf("read %q", got)
	}
	fi, err := s.Stat(ctx, "a/b.txt")
	if err != nil || fi.Size != 5 {
		t.Fatalf("stat %v %v", fi, err)
	}
	if _, err := s.Stat(ctx, "missing"); !backend.IsNotExist(err) {
		t.Fatalf("stat missing: %v", err)
	}
	if _, err := s.Open(ctx, "missing"); !backend.IsNotExist(err) {
		t.Fatalf("open missing: %v", err)
	}
	if err := s.Create(ctx, "a/b.txt", strings.NewReader("other"), 5); !errors.Is(err, backend.ErrExist) {
		t.Fatalf("create existing: %v", err)
	}
	if err := s.Create(ctx, "c", strings.NewReader("new"), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, backend.ReservedPrefix+"lock", strings.NewReader("l"), 1); err != nil {
		t.Fatal(err)
	}
	var names []string
	if err := s.List(ctx, "", func(fi backend.FileInfo) error { names = append(names, fi.Name); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "a/b.txt,c" {
		t.Fatalf("list %v", names)
	}
	if err := s.Remove(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if s.Pages() != 1 {
		t.Fatalf("pages %d", s.Pages())
	}
}

func TestPutLargeChunked(t *testing.T) {
	srv := testserver.GCS(t)
	s := open(t, srv, srv.Bucket(t), "", gcs.Options{ChunkSize: 256 << 10})
	data := bytes.Repeat([]byte("0123456789abcdef"), 100000) // 1.6 MB, 7 chunks
	if err := s.Put(context.Background(), "big", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, "big"); !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, want %d", len(got), len(data))
	}
}

func TestConformance(t *testing.T) {
	srv := testserver.GCS(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		// A small chunk size makes the suite's large objects take the
		// resumable, several-request path.
		return open(t, srv, srv.Bucket(t), "some/prefix", gcs.Options{ChunkSize: 1 << 20})
	})
}

func TestConformanceBucketRoot(t *testing.T) {
	srv := testserver.GCS(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return open(t, srv, srv.Bucket(t), "", gcs.Options{})
	})
}

// A copy between two GCS stores is a server-side rewrite: the bytes never
// pass through this process, and the copy is exact.
func TestServerSideCopy(t *testing.T) {
	srv := testserver.GCS(t)
	ctx := context.Background()
	src := open(t, srv, srv.Bucket(t), "upstream", gcs.Options{})
	dst := open(t, srv, srv.Bucket(t), "mirror", gcs.Options{})
	data := bytes.Repeat([]byte("fdl"), 100001)
	if err := src.Put(ctx, "data/f.parquet", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	counted := counting.Wrap(src)
	ok, err := dst.CopyFrom(ctx, counted, "data/f.parquet", "data/f.parquet", int64(len(data)))
	if err != nil || !ok {
		t.Fatalf("CopyFrom = %v, %v", ok, err)
	}
	if c := counted.Counts(); c.Requests() != 0 {
		t.Errorf("the source store was used for a server-side copy: %+v", c)
	}
	if got := read(t, dst, "data/f.parquet"); !bytes.Equal(got, data) {
		t.Fatalf("copy has %d bytes, want %d", len(got), len(data))
	}

	// Within one bucket, across prefixes, too.
	same := open(t, srv, strings.SplitN(strings.TrimPrefix(src.Location(), "gs://"), "/", 2)[0], "other", gcs.Options{})
	if ok, err := same.CopyFrom(ctx, src, "data/f.parquet", "g", int64(len(data))); err != nil || !ok {
		t.Fatalf("CopyFrom within a bucket = %v, %v", ok, err)
	}
	if got := read(t, same, "g"); !bytes.Equal(got, data) {
		t.Fatalf("copy has %d bytes, want %d", len(got), len(data))
	}
}

func TestCopyRefusesWrongSizeAndPublishesNothing(t *testing.T) {
	srv := testserver.GCS(t)
	ctx := context.Background()
	bucket := srv.Bucket(t)
	src := open(t, srv, bucket, "a", gcs.Options{})
	dst := open(t, srv, bucket, "b", gcs.Options{})
	if err := src.Put(ctx, "f", strings.NewReader("12345"), 5); err != nil {
		t.Fatal(err)
	}
	if ok, err := dst.CopyFrom(ctx, src, "f", "f", 6); err == nil || ok {
		t.Fatalf("CopyFrom with the wrong size = %v, %v", ok, err)
	}
	if _, err := dst.Stat(ctx, "f"); !backend.IsNotExist(err) {
		t.Fatalf("destination after a refused copy: %v", err)
	}
	if ok, err := dst.CopyFrom(ctx, src, "missing", "m", 1); ok || !backend.IsNotExist(err) {
		t.Fatalf("CopyFrom of a missing object = %v, %v", ok, err)
	}
}

func TestCopyDeclinesOtherStores(t *testing.T) {
	srv := testserver.GCS(t)
	dst := open(t, srv, srv.Bucket(t), "", gcs.Options{})
	l, err := local.Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if ok, err := dst.CopyFrom(context.Background(), l, "f", "f", 1); ok || err != nil {
		t.Fatalf("CopyFrom(local) = %v, %v; want declined", ok, err)
	}
}

// List asks for 1000 objects per request and says how many requests.
func TestListPages(t *testing.T) {
	srv := testserver.GCS(t)
	s := open(t, srv, srv.Bucket(t), "p", gcs.Options{})
	ctx := context.Background()
	const n = 1001
	names := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for name := range names {
				if err := s.Put(ctx, name, strings.NewReader("x"), 1); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		names <- fmt.Sprintf("data/%04d", i)
	}
	close(names)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	before := s.Pages()
	count := 0
	if err := s.List(ctx, "data/", func(backend.FileInfo) error { count++; return nil }); err != nil {
		t.Fatal(err)
	}
	if count != n {
		t.Fatalf("listed %d objects, want %d", count, n)
	}
	if pages := s.Pages() - before; pages != (n+999)/1000 {
		t.Errorf("%d list requests for %d objects", pages, n)
	}
}

func TestErrorsNameTheObject(t *testing.T) {
	srv := testserver.GCS(t)
	bucket := srv.Bucket(t)
	s := open(t, srv, bucket, "pre", gcs.Options{})
	_, err := s.Open(context.Background(), "versions/x/version.json")
	if !backend.IsNotExist(err) || !strings.Contains(err.Error(), "gs://"+bucket+"/pre/versions/x/version.json") {
		t.Fatalf("error %v does not name gs://%s/pre/versions/x/version.json", err, bucket)
	}
	if s.Location() != "gs://"+bucket+"/pre/" {
		t.Fatalf("Location = %q", s.Location())
	}
}

// A missing bucket is said as such, for Stat, Open and List, and not as
// "object does not exist" (the client reports any 404 of an object read as
// ErrObjectNotExist); a missing object in a good bucket still is absent.
func TestMissingBucket(t *testing.T) {
	srv := testserver.GCS(t)
	bucket := srv.Bucket(t)
	s := open(t, srv, "no-such-bucket-"+bucket, "", gcs.Options{})
	ctx := context.Background()
	err := s.Put(ctx, "f", strings.NewReader("x"), 1)
	if err == nil {
		t.Fatal("Put into a missing bucket succeeded")
	}
	_, statErr := s.Stat(ctx, "fdl.json")
	rc, openErr := s.Open(ctx, "fdl.json")
	if rc != nil {
		rc.Close()
	}
	listErr := s.List(ctx, "", func(backend.FileInfo) error { return nil })
	for op, err := range map[string]error{"Stat": statErr, "Open": openErr, "List": listErr} {
		if !errors.Is(err, backend.ErrNoBucket) || backend.IsNotExist(err) || !strings.Contains(err.Error(), "bucket does not exist") {
			t.Errorf("%s in a missing bucket: %v", op, err)
		}
	}
	good := open(t, srv, bucket, "", gcs.Options{})
	if _, err := good.Stat(ctx, "fdl.json"); !backend.IsNotExist(err) {
		t.Errorf("Stat of a missing object: %v", err)
	}
	if _, err := good.Open(ctx, "fdl.json"); !backend.IsNotExist(err) {
		t.Errorf("Open of a missing object: %v", err)
	}
}

// Requests through a proxy that drops and fails some of them still
// succeed, each retry logged once.
func TestRetriesThroughFaultProxy(t *testing.T) {
	srv := testserver.GCS(t)
	bucket := srv.Bucket(t)
	proxy := testserver.NewFaultProxy(t, srv.Endpoint)
	proxy.TargetHost = true
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(proxy.URL, "http://"))
	core, logs := observer.New(zap.WarnLevel)
	s := open(t, srv, bucket, "p", gcs.Options{Logger: zap.New(core), MaxBackoff: 20 * time.Millisecond})
	ctx := context.Background()
	schedule := testserver.EveryNth(2, testserver.Status503, testserver.Drop, testserver.Status500)
	var drops atomic.Int64
	proxy.SetSchedule(func(n int64, r *http.Request) testserver.Fault {
		f := schedule(n, r)
		if f == testserver.Drop {
			drops.Add(1)
		}
		return f
	})
	files := map[string][]byte{}
	for i := 0; i < 6; i++ {
		files[fmt.Sprintf("f%d", i)] = bytes.Repeat([]byte{byte('a' + i)}, 1000*(i+1))
	}
	for name, data := range files {
		if err := s.Put(ctx, name, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatalf("Put %s: %v", name, err)
		}
	}
	if err := s.Create(ctx, "fdl.json", strings.NewReader("{}"), 2); err != nil {
		t.Fatalf("Create: %v", err)
	}
	for name, data := range files {
		if fi, err := s.Stat(ctx, name); err != nil || fi.Size != int64(len(data)) {
			t.Fatalf("Stat %s = %+v, %v", name, fi, err)
		}
		if got := read(t, s, name); !bytes.Equal(got, data) {
			t.Fatalf("read %s: %d bytes", name, len(got))
		}
	}
	n := 0
	if err := s.List(ctx, "", func(backend.FileInfo) error { n++; return nil }); err != nil || n != len(files)+1 {
		t.Fatalf("List: %d objects, %v", n, err)
	}
	if err := s.Remove(ctx, "f0"); err != nil {
		t.Fatal(err)
	}
	if proxy.Faults() < 10 {
		t.Fatalf("only %d faults injected", proxy.Faults())
	}
	// Every fault is retried by the client, and logged, except that Go's
	// transport itself resends a GET whose reused connection was dropped
	// before any answer.
	if logged := int64(logs.Len()); logged > proxy.Faults() || logged < proxy.Faults()-drops.Load() {
		t.Errorf("%d retries logged for %d faults (%d of them drops)", logged, proxy.Faults(), drops.Load())
	}
	for _, e := range logs.All() {
		m := e.ContextMap()
		if op, _ := m["op"].(string); op == "" || m["error"] == nil {
			t.Errorf("retry log without op or error: %v", e.ContextMap())
		}
	}
	t.Logf("%d requests, %d faults, %d retries logged", proxy.Requests(), proxy.Faults(), logs.Len())
}

// A download cut off mid-body is resumed by the client from where it
// stopped (or fails), never delivered short.
func TestCutDownloadResumedOrFailed(t *testing.T) {
	srv := testserver.GCS(t)
	bucket := srv.Bucket(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	direct := open(t, srv, bucket, "", gcs.Options{})
	if err := direct.Put(context.Background(), "big", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	proxy := testserver.NewFaultProxy(t, srv.Endpoint)
	proxy.TargetHost = true
	proxy.CutAfter = 300 << 10
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(proxy.URL, "http://"))
	s := open(t, srv, bucket, "", gcs.Options{MaxBackoff: 20 * time.Millisecond})

	proxy.SetSchedule(func(n int64, _ *http.Request) testserver.Fault {
		if n == 1 {
			return testserver.CutBody
		}
		return testserver.Pass
	})
	if got := read(t, s, "big"); !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes through one cut, want %d", len(got), len(data))
	}
	if proxy.Faults() != 1 {
		t.Fatalf("%d faults", proxy.Faults())
	}

	// Every body cut still makes progress, which the client resumes
	// from, so the read completes.
	proxy.FailAll(testserver.CutBody)
	if got := read(t, s, "big"); !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes through cuts, want %d", len(got), len(data))
	}

	// A body cut once after which the server is gone: the read fails.
	proxy.FailAll(testserver.Pass)
	start := proxy.Requests()
	proxy.SetSchedule(func(n int64, _ *http.Request) testserver.Fault {
		if n == start+1 {
			return testserver.CutBody
		}
		return testserver.Drop
	})
	rc, err := s.Open(context.Background(), "big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err == nil {
		t.Fatalf("read %d of %d bytes without an error from a server that went away", len(got), len(data))
	}
	if !strings.Contains(err.Error(), "gs://"+bucket+"/big") {
		t.Errorf("error %v does not name the object", err)
	}
}

// A large Put holds about one chunk in memory, not the object: the heap is
// sampled while a 64 MiB stream is put in 4 MiB chunks.
func TestPutMemoryIsBounded(t *testing.T) {
	srv := testserver.GCS(t)
	s := open(t, srv, srv.Bucket(t), "m", gcs.Options{ChunkSize: 4 << 20})
	const size = 64 << 20
	var err error
	grew := backendtest.HeapGrowth(func() {
		err = s.Put(context.Background(), "big", io.LimitReader(backendtest.Zeros{}, size), size)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("heap grew by at most %d MiB while putting %d MiB", grew>>20, size>>20)
	if grew > 24<<20 {
		t.Fatalf("heap grew by %d MiB while putting a %d MiB stream in 4 MiB chunks", grew>>20, size>>20)
	}
	if fi, err := s.Stat(context.Background(), "big"); err != nil || fi.Size != size {
		t.Fatalf("Stat = %+v, %v", fi, err)
	}
}

// A download whose answer stalls is retried after StallTimeout, not
// waited out.
func TestStalledDownloadRetried(t *testing.T) {
	srv := testserver.GCS(t)
	bucket := srv.Bucket(t)
	if err := open(t, srv, bucket, "", gcs.Options{}).Put(context.Background(), "f", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	proxy := testserver.NewFaultProxy(t, srv.Endpoint)
	proxy.TargetHost = true
	proxy.StallFor = 5 * time.Second
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(proxy.URL, "http://"))
	core, logs := observer.New(zap.WarnLevel)
	s := open(t, srv, bucket, "", gcs.Options{Logger: zap.New(core), StallTimeout: 300 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	proxy.SetSchedule(func(n int64, _ *http.Request) testserver.Fault {
		if n == 1 {
			return testserver.Stall
		}
		return testserver.Pass
	})
	start := time.Now()
	if got := read(t, s, "f"); string(got) != "hello" {
		t.Fatalf("read %q", got)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v: the stall was waited out", d)
	}
	if proxy.Faults() != 1 || logs.Len() != 1 {
		t.Fatalf("%d faults, %d retries logged; want 1 and 1", proxy.Faults(), logs.Len())
	}
}
