package main

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/lock"
)

// Every pair of stores users run, against the real servers: Versity S3
// Gateway, fake-gcs-server and a plain HTTP server that does not list.
// What goes into a remote store is brought back to a folder and compared
// byte for byte with the upstream; every rerun copies nothing.
func TestSyncAcrossStoresMirrorsByteForByte(t *testing.T) {
	s3 := testserver.S3(t)
	gcs := testserver.GCS(t)
	parent, up, _ := layout(t)
	gen(t, up, generate.Options{Versions: 3, FilesPerVersion: 3, DeleteFiles: true, Tags: true, ExtraFiles: true, LargeFiles: []int64{12 << 20}})
	web := testserver.HTTP(t, up)

	s3a := s3.URL(s3.Bucket(t), "mirror")
	gsa := gcs.URL(gcs.Bucket(t), "mirror")
	gsb := gcs.URL(gcs.Bucket(t), "from-s3")
	back := func(name string) string { return filepath.Join(parent, name) }

	steps := []struct{ name, src, dst string }{
		{"local to s3", up, s3a},
		{"s3 to local", s3a, back("from-s3")},
		{"local to gs", up, gsa},
		{"gs to local", gsa, back("from-gs")},
		{"s3 to gs", s3a, gsb},
		{"gs (from s3) to local", gsb, back("from-s3-gs")},
		{"http to local", web.URL, back("from-http")},
	}
	for _, st := range steps {
		if !t.Run(st.name, func(t *testing.T) {
			rep, res := syncJSON(t, st.src, st.dst)
			if res.code != 0 {
				t.Fatalf("exit %d: %+v\n%s", res.code, rep.Refused, res.stderr)
			}
			if rep.FilesCopied == 0 {
				t.Fatal("copied nothing")
			}
			again, res := syncJSON(t, st.src, st.dst)
			if res.code != 0 || again.FilesCopied != 0 || again.CatalogsRead != 0 || len(again.RefsMoved) != 0 {
				t.Errorf("rerun: exit %d, copied %d files, read %d catalogs, moved %d refs; want nothing",
					res.code, again.FilesCopied, again.CatalogsRead, len(again.RefsMoved))
			}
			if v := run(t, "verify", st.dst); v.code != 0 {
				t.Errorf("verify %s: exit %d\n%s", st.dst, v.code, v.stdout)
			}
		}) {
			return
		}
	}
	for _, dir := range []string{"from-s3", "from-gs", "from-s3-gs", "from-http"} {
		fdltest.AssertMirrored(t, up, back(dir), nil)
	}
}

// The first creation of fdl.json in an S3 sink uses If-None-Match: *, and a
// sink that holds another repository's fdl.json is refused untouched.
func TestSyncRefusesAnS3SinkHoldingAnotherRepository(t *testing.T) {
	s3 := testserver.S3(t)
	bucket := s3.Bucket(t)
	_, up, _ := layout(t)
	gen(t, up, generate.Options{Versions: 1})
	other := t.TempDir()
	gen(t, other, generate.Options{Versions: 1})
	sink := s3.URL(bucket, "m")
	if res := run(t, "sync", other, sink); res.code != 0 {
		t.Fatalf("seeding the sink: exit %d\n%s", res.code, res.stdout)
	}
	res := refusal(t, up, sink, "another repository")
	objects := listS3(t, s3, bucket, "m/")
	want := fdltest.Files(t, other)
	for name := range objects {
		if _, ok := want[name]; !ok && !strings.HasPrefix(name, ".fdl-mirror/") {
			t.Errorf("the refused sync wrote %s\n%s", name, res.stdout)
		}
	}
}

// listS3 lists a prefix of a bucket by mirroring it back to a folder.
func listS3(t *testing.T, s3 *testserver.S3Server, bucket, prefix string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	dir := filepath.Join(s3.Dir, bucket, filepath.FromSlash(prefix))
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out[filepath.ToSlash(rel)] = info.Size()
		}
		return nil
	})
	return out
}

// An HTTP upstream whose refs.json names a ref with "..": refused, and
// nothing is written outside the sink.
func TestSyncRefusesAHostileRefsJSONOverHTTP(t *testing.T) {
	parent, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 1})
	writeFile(t, filepath.Join(up, "refs.json"),
		`{"refs/heads/main": "`+repo.Versions[0]+`", "refs/heads/../../../../escaped": "`+repo.Versions[0]+`", "refs/tags/x": "../../v"}`)
	web := testserver.HTTP(t, up)
	res := refusal(t, web.URL, sink, "refs/heads/../../../../escaped")
	if !fdltest.Contains(res.stdout, "refs/tags/x", "version ID") {
		t.Errorf("the bad version ID was not named:\n%s", res.stdout)
	}
	if readRef(t, sink, "refs/heads/main") != repo.Versions[0] {
		t.Error("the good ref was not mirrored beside the bad ones")
	}
	if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
		t.Errorf("written outside the mirror: %v", extra)
	}
	for name := range fdltest.Files(t, sink) {
		if strings.Contains(name, "escaped") || strings.HasPrefix(name, "refs/tags/") {
			t.Errorf("published %s", name)
		}
	}
}

// Through a proxy that drops connections, answers 500 and 503 and stalls,
// syncs from HTTP and into S3 still complete.
func TestSyncCompletesThroughFaults(t *testing.T) {
	_, up, _ := layout(t)
	gen(t, up, generate.Options{Versions: 2, FilesPerVersion: 4, LargeFiles: []int64{3 << 20}})

	t.Run("http source", func(t *testing.T) {
		web := testserver.HTTP(t, up)
		proxy := testserver.NewFaultProxy(t, web.URL)
		proxy.StallFor = 1500 * time.Millisecond
		proxy.SetSchedule(testserver.EveryNth(4, testserver.Drop, testserver.Status500, testserver.Status503, testserver.CutBody))
		sink := t.TempDir()
		if res := run(t, "sync", proxy.URL+"/", sink); res.code != 0 {
			t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
		}
		if proxy.Faults() == 0 {
			t.Fatal("the proxy injected no fault")
		}
		fdltest.AssertMirrored(t, up, sink, nil)
	})
	t.Run("s3 sink", func(t *testing.T) {
		s3 := testserver.S3(t)
		bucket := s3.Bucket(t)
		proxy := testserver.NewFaultProxy(t, s3.Endpoint)
		proxy.SetSchedule(testserver.EveryNth(5, testserver.Drop, testserver.Status503, testserver.Status500))
		addr := strings.Replace(s3.URL(bucket, "m"), url.QueryEscape(s3.Endpoint), url.QueryEscape(proxy.URL), 1)
		if res := run(t, "sync", up, addr); res.code != 0 {
			t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
		}
		if proxy.Faults() == 0 {
			t.Fatal("the proxy injected no fault")
		}
		back := t.TempDir()
		if res := run(t, "sync", s3.URL(bucket, "m"), back); res.code != 0 {
			t.Fatalf("reading back: exit %d\n%s", res.code, res.stdout)
		}
		fdltest.AssertMirrored(t, up, back, nil)
	})
}

// An upstream that fails everything after the mirror has an older state:
// the sync fails, and no ref in the mirror points at an incomplete version.
func TestSyncThatCannotCompletePublishesNoIncompleteVersion(t *testing.T) {
	_, up, sink := layout(t)
	opts := generate.Options{Versions: 1, FilesPerVersion: 3}
	repo := gen(t, up, opts)
	web := testserver.HTTP(t, up)
	proxy := testserver.NewFaultProxy(t, web.URL)
	if res := run(t, "sync", proxy.URL+"/", sink); res.code != 0 {
		t.Fatalf("first sync: exit %d\n%s", res.code, res.stdout)
	}
	newID, err := generate.AddVersion(t.Context(), up, 4, opts)
	if err != nil {
		t.Fatal(err)
	}
	// refs.json, the record and the catalog come through; data files fail.
	proxy.SetSchedule(func(n int64, r *http.Request) testserver.Fault {
		if strings.HasSuffix(r.URL.Path, ".parquet") {
			return testserver.Status503
		}
		return testserver.Pass
	})
	res := run(t, "sync", "--retries", "2", proxy.URL+"/", sink)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", res.code, res.stdout)
	}
	assertNotPublished(t, sink, newID)
	if got := readRef(t, sink, "refs/heads/main"); got != repo.Versions[0] {
		t.Errorf("main is %q, want it left at the complete %s", got, repo.Versions[0])
	}
	if p := fdltest.Complete(t, sink); len(p) > 0 {
		t.Errorf("mirror has refs to incomplete versions: %v", p)
	}
}

// Two syncs into one S3 sink at once: one waits for the other's lock (or
// gives up cleanly, naming the lock), and the mirror is complete after.
func TestTwoConcurrentSyncsIntoOneS3Sink(t *testing.T) {
	s3 := testserver.S3(t)
	bucket := s3.Bucket(t)
	_, up, _ := layout(t)
	gen(t, up, generate.Options{Versions: 3, FilesPerVersion: 20, FastParquet: true})
	sink := s3.URL(bucket, "m")
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = run(t, "sync", "--lock-wait", "2m", up, sink)
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("sync %d: exit %d\n%s\n%s", i, r.code, r.stdout, r.stderr)
		}
	}
	// The one that waited found the mirror complete and copied nothing of
	// what the other copied; between them, each file was copied once.
	if v := run(t, "verify", sink); v.code != 0 {
		t.Errorf("verify: exit %d\n%s", v.code, v.stdout)
	}

	// While another holder has the lock, a sync that will not wait gives
	// up cleanly, naming the lock, and writes nothing.
	ctx := context.Background()
	store, closeStore, err := location.OpenWritable(ctx, sink, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	held, err := lock.Lock(ctx, store, lock.Options{Owner: "test-holder"})
	if err != nil {
		t.Fatal(err)
	}
	// A run with nothing new does not need the lock: it neither waits
	// nor fails.
	if res := run(t, "sync", "--lock-wait", "0s", up, sink); res.code != 0 {
		t.Errorf("a no-op sync facing a held lock: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if _, err := generate.AddVersion(ctx, up, 2, generate.Options{}); err != nil {
		t.Fatal(err)
	}
	before := listS3(t, s3, bucket, "m/")
	gaveUp := run(t, "sync", "--lock-wait", "0s", up, sink)
	if gaveUp.code != 1 || !fdltest.Contains(gaveUp.stdout+gaveUp.stderr, "test-holder") {
		t.Errorf("a sync facing a held lock: exit %d, want 1 naming the holder\n%s\n%s", gaveUp.code, gaveUp.stdout, gaveUp.stderr)
	}
	after := listS3(t, s3, bucket, "m/")
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("a sync without the lock wrote %s", name)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if res := run(t, "sync", "--lock-wait", "0s", up, sink); res.code != 0 {
		t.Errorf("a sync after the lock was released: exit %d\n%s", res.code, res.stdout)
	}
}
