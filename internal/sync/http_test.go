package sync_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlmirror "github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// An upstream that redirects a version's dataset.json to another server
// (an internal service, cloud metadata) does not get it fetched: that
// server gets no request, the version is refused naming both addresses,
// and nothing of it is published; the version before it is mirrored. With
// the host allowed by name, the same run mirrors everything.
func TestHostileRedirectRefusesTheFile(t *testing.T) {
	up := t.TempDir()
	gen, err := generate.Generate(context.Background(), up, generate.Options{Versions: 2, ExtraFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	last := gen.Versions[len(gen.Versions)-1]
	var secretHits atomic.Int64
	secret := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secretHits.Add(1)
		w.Write([]byte("secret"))
	}))
	defer secret.Close()
	files := http.FileServer(http.Dir(up))
	hostile := "/" + repo.VersionFile(last, "dataset.json")
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == hostile {
			http.Redirect(w, r, secret.URL+"/secret", http.StatusFound)
			return
		}
		files.ServeHTTP(w, r)
	}))
	defer upstream.Close()

	mirror := t.TempDir()
	rep, err := fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: upstream.URL + "/", Sink: mirror}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if secretHits.Load() != 0 {
		t.Fatalf("the other server got %d requests", secretHits.Load())
	}
	if len(rep.Refused) == 0 {
		t.Fatalf("nothing refused: %+v", rep)
	}
	found := false
	for _, r := range rep.Refused {
		if r.Version == last && strings.Contains(r.Message, upstream.URL+hostile) && strings.Contains(r.Message, secret.URL+"/secret") {
			found = true
		}
	}
	if !found {
		t.Errorf("no refusal of %s naming both addresses: %+v", last, rep.Refused)
	}
	if _, err := os.Stat(filepath.Join(mirror, repo.VersionFile(last, repo.RecordFile))); !os.IsNotExist(err) {
		t.Errorf("the refused version was published: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mirror, repo.VersionFile(last, "dataset.json"))); !os.IsNotExist(err) {
		t.Errorf("the redirected file is in the mirror: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mirror, repo.VersionFile(gen.Versions[0], repo.RecordFile))); err != nil {
		t.Errorf("the version before the refused one was not mirrored: %v", err)
	}

	allowed := t.TempDir()
	rep, err = fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: upstream.URL + "/", Sink: allowed, HTTPAllowRedirects: []string{"127.0.0.1"}}}, nil, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("with the host allowed: %v %+v", err, rep)
	}
	if got, _ := os.ReadFile(filepath.Join(allowed, repo.VersionFile(last, "dataset.json"))); string(got) != "secret" {
		t.Errorf("with the host allowed, dataset.json = %q", got)
	}
}

// noLength serves files chunked: without Content-Length, as a dynamic
// server or a proxy that recompresses does.
type noLength struct{ http.ResponseWriter }

func (w noLength) WriteHeader(code int) {
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

// Write flushes: a small body written whole before the handler returns
// would otherwise get a Content-Length from net/http.
func (w noLength) Write(b []byte) (int, error) {
	w.Header().Del("Content-Length")
	n, err := w.ResponseWriter.Write(b)
	w.ResponseWriter.(http.Flusher).Flush()
	return n, err
}

// A server that sends no Content-Length (chunked) has its repository
// mirrored whole: the catalog, records and extra files are streamed, their
// size unknown until read, and checked as ever (sha256 for the catalog).
func TestChunkedHTTPSourceMirrored(t *testing.T) {
	up := t.TempDir()
	if _, err := generate.Generate(context.Background(), up, generate.Options{Versions: 2, ExtraFiles: true}); err != nil {
		t.Fatal(err)
	}
	files := http.FileServer(http.Dir(up))
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		files.ServeHTTP(noLength{w}, r)
	}))
	defer upstream.Close()
	mirror := t.TempDir()
	rep, err := fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: upstream.URL + "/", Sink: mirror}}, nil, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("%v %+v", err, rep)
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
}

// --bwlimit: a 20 MB mirror at 5 MiB/s takes about 4 s. The rate is
// logged; only loose bounds are asserted (not faster than twice the limit,
// and the limit in force at all), so a loaded machine does not fail it.
func TestBandwidthLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("a 4 s mirror")
	}
	up := t.TempDir()
	if _, err := generate.Generate(context.Background(), up, generate.Options{Versions: 1, FastParquet: true, LargeFiles: []int64{10e6, 10e6}}); err != nil {
		t.Fatal(err)
	}
	const limit = 5 << 20
	start := time.Now()
	rep, err := fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: up, Sink: t.TempDir()}, BWLimit: limit}, nil, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("%v %+v", err, rep)
	}
	took := time.Since(start)
	rate := float64(rep.BytesCopied) / took.Seconds()
	t.Logf("--bwlimit 5M: %.1f MB in %v: %.2f MiB/s", float64(rep.BytesCopied)/1e6, took.Round(time.Millisecond), rate/(1<<20))
	if rep.BytesCopied < 20e6 {
		t.Fatalf("copied %d bytes, want at least 20 MB", rep.BytesCopied)
	}
	if rate > 2*limit {
		t.Errorf("%.2f MiB/s: faster than twice the 5 MiB/s limit", rate/(1<<20))
	}
}
