package sync_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// The engine between every pair of stores users run, against the real
// servers: Versity S3 Gateway, fake-gcs-server and a plain HTTP server
// that does not list.

// What goes into a remote store is brought back to a folder and compared
// byte for byte with the upstream; every rerun copies nothing.
func TestRunAcrossStoresMirrorsByteForByte(t *testing.T) {
	s3 := testserver.S3(t)
	gcs := testserver.GCS(t)
	parent, up, _ := fdltest.Layout(t)
	fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 3, FilesPerVersion: 3, DeleteFiles: true, Tags: true, ExtraFiles: true, LargeFiles: []int64{12 << 20}})
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
			rep, err := syncAddr(t, st.src, st.dst, fdlsync.Options{})
			if err != nil || !rep.OK() {
				t.Fatalf("run: %v; refused %+v", err, rep.Refused)
			}
			if rep.FilesCopied == 0 {
				t.Fatal("copied nothing")
			}
			again, err := syncAddr(t, st.src, st.dst, fdlsync.Options{})
			if err != nil || !again.OK() || again.FilesCopied != 0 || again.CatalogsRead != 0 || len(again.RefsMoved) != 0 {
				t.Errorf("rerun: %v, refused %+v, copied %d files, read %d catalogs, moved %d refs; want nothing",
					err, again.Refused, again.FilesCopied, again.CatalogsRead, len(again.RefsMoved))
			}
			if p := problemsAt(t, st.dst); len(p) > 0 {
				t.Errorf("verify %s: %v", st.dst, p)
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
func TestS3SinkHoldingAnotherRepositoryStopsTheRun(t *testing.T) {
	s3 := testserver.S3(t)
	bucket := s3.Bucket(t)
	_, up, _ := fdltest.Layout(t)
	fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 1})
	other := t.TempDir()
	fdltest.Generate(t, other, generate.Options{FastParquet: true, Versions: 1})
	sink := s3.URL(bucket, "m")
	if rep, err := syncAddr(t, other, sink, fdlsync.Options{}); err != nil || !rep.OK() {
		t.Fatalf("seeding the sink: %v; refused %+v", err, rep.Refused)
	}
	rep, err := syncAddr(t, up, sink, fdlsync.Options{})
	assertFatal(t, rep, err, "another repository")
	want := fdltest.Files(t, other)
	for name := range s3.Objects(bucket, "m/") {
		if _, ok := want[name]; !ok && !strings.HasPrefix(name, ".fdl-mirror/") {
			t.Errorf("the refused run wrote %s", name)
		}
	}
}

// An HTTP upstream whose refs.json names a ref with "..": refused, and
// nothing is written outside the sink.
func TestHostileRefsJSONOverHTTPIsRefused(t *testing.T) {
	parent, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1})
	fdltest.WriteFile(t, filepath.Join(up, "refs.json"),
		`{"refs/heads/main": "`+r.Versions[0]+`", "refs/heads/../../../../escaped": "`+r.Versions[0]+`", "refs/tags/x": "../../v"}`)
	web := testserver.HTTP(t, up)
	rep, err := syncAddr(t, web.URL, mirror, fdlsync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	assertRefused(t, rep, fdlsync.ReasonBadRef, "refs/heads/../../../../escaped")
	assertRefused(t, rep, fdlsync.ReasonBadRef, "refs/tags/x", "version ID")
	if fdltest.ReadRef(t, mirror, "refs/heads/main") != r.Versions[0] {
		t.Error("the good ref was not mirrored beside the bad ones")
	}
	if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
		t.Errorf("written outside the mirror: %v", extra)
	}
	for name := range fdltest.Files(t, mirror) {
		if strings.Contains(name, "escaped") || strings.HasPrefix(name, "refs/tags/") {
			t.Errorf("published %s", name)
		}
	}
}

// Through a proxy that drops connections, answers 500 and 503 and stalls,
// runs from HTTP and into S3 still complete.
func TestRunCompletesThroughFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: retries through a stalling proxy take tens of seconds")
	}
	_, up, _ := fdltest.Layout(t)
	fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 2, FilesPerVersion: 4, LargeFiles: []int64{3 << 20}})

	t.Run("http source", func(t *testing.T) {
		web := testserver.HTTP(t, up)
		proxy := testserver.NewFaultProxy(t, web.URL)
		proxy.StallFor = 1500 * time.Millisecond
		proxy.SetSchedule(testserver.EveryNth(4, testserver.Drop, testserver.Status500, testserver.Status503, testserver.CutBody))
		mirror := t.TempDir()
		if rep, err := syncAddr(t, proxy.URL+"/", mirror, fdlsync.Options{}); err != nil || !rep.OK() {
			t.Fatalf("run: %v; refused %+v", err, rep.Refused)
		}
		if proxy.Faults() == 0 {
			t.Fatal("the proxy injected no fault")
		}
		fdltest.AssertMirrored(t, up, mirror, nil)
	})
	t.Run("s3 sink", func(t *testing.T) {
		s3 := testserver.S3(t)
		bucket := s3.Bucket(t)
		proxy := testserver.NewFaultProxy(t, s3.Endpoint)
		proxy.SetSchedule(testserver.EveryNth(5, testserver.Drop, testserver.Status503, testserver.Status500))
		addr := strings.Replace(s3.URL(bucket, "m"), url.QueryEscape(s3.Endpoint), url.QueryEscape(proxy.URL), 1)
		if rep, err := syncAddr(t, up, addr, fdlsync.Options{}); err != nil || !rep.OK() {
			t.Fatalf("run: %v; refused %+v", err, rep.Refused)
		}
		if proxy.Faults() == 0 {
			t.Fatal("the proxy injected no fault")
		}
		back := t.TempDir()
		if rep, err := syncAddr(t, s3.URL(bucket, "m"), back, fdlsync.Options{}); err != nil || !rep.OK() {
			t.Fatalf("reading back: %v; refused %+v", err, rep.Refused)
		}
		fdltest.AssertMirrored(t, up, back, nil)
	})
}

// Bytes damaged on the way from an object store are never published. A
// proxy flips a bit in the first answer for every data file and catalog:
// the store's checksum of a data file's transfer (the S3 SDK's, the GCS
// client's) fails that copy, which is tried again; a catalog, read
// without that check since its record's SHA-256 checks every byte, is
// fetched again with it when the sums differ. Before the stores' checksum
// errors were heeded, the damaged data files were published.
func TestDamagedTransfersAreNotPublished(t *testing.T) {
	for _, store := range []string{"s3", "gcs"} {
		t.Run(store, func(t *testing.T) {
			_, up, mirror := fdltest.Layout(t)
			fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 2, FilesPerVersion: 4})
			var upstream string
			var proxy *testserver.FaultProxy
			if store == "s3" {
				srv := testserver.S3(t)
				upstream = srv.URL(srv.Bucket(t), "up")
				seed(t, up, upstream)
				proxy = testserver.NewFaultProxy(t, srv.Endpoint)
				upstream = strings.Replace(upstream, url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
			} else {
				srv := testserver.GCS(t)
				upstream = srv.URL(srv.Bucket(t), "up")
				seed(t, up, upstream)
				proxy = testserver.NewFaultProxy(t, srv.Endpoint)
				proxy.TargetHost = true
				t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(proxy.URL, "http://"))
			}
			proxy.CutAfter = 64
			var mu sync.Mutex
			damaged := map[string]bool{}
			proxy.SetSchedule(func(_ int64, r *http.Request) testserver.Fault {
				p := r.URL.Path
				if r.Method != http.MethodGet || !(strings.Contains(p, "/up/data/") || strings.HasSuffix(p, "/ducklake.duckdb")) {
					return testserver.Pass
				}
				mu.Lock()
				defer mu.Unlock()
				if damaged[p] {
					return testserver.Pass
				}
				damaged[p] = true
				return testserver.FlipByte
			})
			rep, err := syncAddr(t, upstream, mirror, fdlsync.Options{})
			if err != nil || !rep.OK() {
				t.Fatalf("run: %v; refused %+v", err, rep.Refused)
			}
			mu.Lock()
			catalogs := 0
			for p := range damaged {
				if strings.HasSuffix(p, "/ducklake.duckdb") {
					catalogs++
				}
			}
			mu.Unlock()
			if proxy.Faults() < 8 || catalogs < 2 {
				t.Fatalf("the proxy damaged %d answers (%d catalogs), want every data file's and catalog's first", proxy.Faults(), catalogs)
			}
			fdltest.AssertMirrored(t, up, mirror, nil)
		})
	}
}

// seed mirrors the local repository up into the store at addr.
func seed(t *testing.T, up, addr string) {
	t.Helper()
	if rep, err := syncAddr(t, up, addr, fdlsync.Options{}); err != nil || !rep.OK() {
		t.Fatalf("seeding %s: %v; refused %+v", addr, err, rep.Refused)
	}
}

// An upstream that fails every data file after the mirror has an older
// state: the new version is refused as copy-failed, naming the file, and
// no ref in the mirror points at an incomplete version.
func TestRunThatCannotCompletePublishesNoIncompleteVersion(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	opts := generate.Options{FastParquet: true, Versions: 1, FilesPerVersion: 3}
	r := fdltest.Generate(t, up, opts)
	web := testserver.HTTP(t, up)
	proxy := testserver.NewFaultProxy(t, web.URL)
	if rep, err := syncAddr(t, proxy.URL+"/", mirror, fdlsync.Options{}); err != nil || !rep.OK() {
		t.Fatalf("first run: %v; refused %+v", err, rep.Refused)
	}
	before := fdltest.Files(t, filepath.Join(up, "data"))
	newID, err := generate.AddVersion(t.Context(), up, 4, opts)
	if err != nil {
		t.Fatal(err)
	}
	var added []string
	for name := range fdltest.Files(t, filepath.Join(up, "data")) {
		if _, ok := before[name]; !ok {
			added = append(added, name)
		}
	}
	// refs.json, the record and the catalog come through; data files fail.
	proxy.SetSchedule(func(n int64, r *http.Request) testserver.Fault {
		if strings.HasSuffix(r.URL.Path, ".parquet") {
			return testserver.Status503
		}
		return testserver.Pass
	})
	rep, err := syncAddrWith(t, proxy.URL+"/", mirror, location.Options{Retries: 2}, fdlsync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	failed := assertRefused(t, rep, fdlsync.ReasonCopy, newID, ".parquet", "503")
	if !slices.ContainsFunc(added, func(name string) bool { return strings.Contains(failed.File, name) }) {
		t.Errorf("the refusal names %q, none of the new data files %v", failed.File, added)
	}
	fdltest.AssertNotPublished(t, mirror, newID)
	if got := fdltest.ReadRef(t, mirror, "refs/heads/main"); got != r.Versions[0] {
		t.Errorf("main is %q, want it left at the complete %s", got, r.Versions[0])
	}
	if p := fdltest.Complete(t, mirror); len(p) > 0 {
		t.Errorf("mirror has refs to incomplete versions: %v", p)
	}
}

// A catalog goes into an S3 mirror with the SHA-256 its record gives,
// checked by the store on write: the object the mirror holds is the one
// that was verified, and the store says so (ChecksumSHA256).
func TestS3SinkStoresCatalogsWithTheRecordsSHA256(t *testing.T) {
	srv := testserver.S3(t)
	_, up, _ := fdltest.Layout(t)
	g := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 2, FilesPerVersion: 2})
	bucket := srv.Bucket(t)
	rep, err := syncAddr(t, up, srv.URL(bucket, "mirror"), fdlsync.Options{})
	if err != nil || !rep.OK() {
		t.Fatalf("run: %v; refused %+v", err, rep.Refused)
	}
	for _, id := range g.Versions {
		raw, err := os.ReadFile(filepath.Join(up, "versions", id, "version.json"))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := repo.ParseRecord(id, raw)
		if err != nil {
			t.Fatal(err)
		}
		out, err := srv.Client().GetObject(context.Background(), &awss3.GetObjectInput{
			Bucket:       aws.String(bucket),
			Key:          aws.String("mirror/versions/" + id + "/ducklake.duckdb"),
			ChecksumMode: types.ChecksumModeEnabled,
		})
		if err != nil {
			t.Fatal(err)
		}
		out.Body.Close()
		sum, err := base64.StdEncoding.DecodeString(aws.ToString(out.ChecksumSHA256))
		if err != nil || hex.EncodeToString(sum) != rec.SHA256 {
			t.Errorf("version %s: the stored catalog's SHA-256 checksum is %q (%v), want the record's %s",
				id, aws.ToString(out.ChecksumSHA256), err, rec.SHA256)
		}
	}
}
