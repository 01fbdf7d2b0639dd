package testserver_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

func serveFile(t *testing.T, name string, content []byte) *testserver.HTTPServer {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	return testserver.HTTP(t, dir)
}

func TestHTTPServerDoesNotList(t *testing.T) {
	srv := serveFile(t, "versions/019a/version.json", []byte("{}"))
	for path, want := range map[string]int{
		"":                                       404,
		"versions/":                              404,
		"versions":                               404,
		"versions/019a/version.json":             200,
		"versions/../versions/019a/version.json": 404,
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /%s: %s, want %d", path, resp.Status, want)
		}
		if want == 404 && bytes.Contains(body, []byte("version.json")) {
			t.Errorf("GET /%s lists the folder: %q", path, body)
		}
	}
}

// Each fault has the effect it promises, on the request the schedule
// picks, as a plain client without retries sees it.
func TestFaultProxyFaults(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789"), 1000)
	srv := serveFile(t, "f", content)
	proxy := testserver.NewFaultProxy(t, srv.URL)
	proxy.StallFor = 2 * time.Second
	proxy.CutAfter = 100
	faults := []testserver.Fault{testserver.Drop, testserver.Status500, testserver.Status503,
		testserver.Stall, testserver.CutBody, testserver.StallBody}
	proxy.SetSchedule(testserver.EveryNth(2, faults...))
	client := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 300 * time.Millisecond, DisableKeepAlives: true}}
	get := func() (int, []byte, error) {
		resp, err := client.Get(proxy.URL + "/f")
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		go func() { <-ctx.Done(); resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	for i, f := range faults {
		if code, b, err := get(); err != nil || code != 200 || !bytes.Equal(b, content) {
			t.Fatalf("request %d (pass): %d, %d bytes, %v", 2*i+1, code, len(b), err)
		}
		code, b, err := get()
		switch f {
		case testserver.Drop, testserver.Stall:
			if err == nil {
				t.Errorf("%v: got %d, want a failed request", f, code)
			}
		case testserver.Status500, testserver.Status503:
			if want := map[testserver.Fault]int{testserver.Status500: 500, testserver.Status503: 503}[f]; code != want {
				t.Errorf("%v: got %d, %v", f, code, err)
			}
		case testserver.CutBody, testserver.StallBody:
			if code != 200 || err == nil || int64(len(b)) != proxy.CutAfter {
				t.Errorf("%v: %d, %d bytes, %v; want 200 and an error after %d bytes", f, code, len(b), err, proxy.CutAfter)
			}
		}
	}
	if proxy.Faults() != int64(len(faults)) || proxy.Requests() != int64(2*len(faults)) {
		t.Errorf("proxy counted %d faults in %d requests", proxy.Faults(), proxy.Requests())
	}

	proxy.FailAll(testserver.Status503)
	for i := 0; i < 3; i++ {
		if code, _, err := get(); code != 503 {
			t.Fatalf("FailAll(503): got %d, %v", code, err)
		}
	}
	proxy.FailAll(testserver.Pass)
	proxy.SetSchedule(nil)
	if code, _, err := get(); code != 200 {
		t.Fatalf("after FailAll(Pass): got %d, %v", code, err)
	}
}

// The S3 backend reads and writes through the proxy, and the retries the
// faults cost are logged; the proxy keeps the Host header that the
// signatures cover.
func TestS3ThroughFaultProxy(t *testing.T) {
	srv := testserver.S3(t)
	bucket := srv.Bucket(t)
	proxy := testserver.NewFaultProxy(t, srv.Endpoint)
	proxy.StallFor = 3 * time.Second
	proxy.CutAfter = 10
	addr := strings.Replace(srv.URL(bucket, "mirror"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
	u, err := url.Parse(addr)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	st, err := s3.Open(context.Background(), u, s3.Options{Logger: zap.New(core), MaxBackoff: 50 * time.Millisecond, StallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	files := map[string][]byte{}
	for i := 0; i < 5; i++ {
		files["data/"+string(rune('a'+i))] = bytes.Repeat([]byte{byte('a' + i)}, 1000*(i+1))
	}
	// Uploads first, with faults that lose the request (a dropped or
	// refused upload is resent whole).
	proxy.SetSchedule(testserver.EveryNth(2, testserver.Drop, testserver.Status500, testserver.Status503, testserver.Stall))
	for name, b := range files {
		if err := st.Put(ctx, name, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatalf("Put %s: %v", name, err)
		}
	}
	// Then reads and stats.
	for name, want := range files {
		if fi, err := st.Stat(ctx, name); err != nil || fi.Size != int64(len(want)) {
			t.Fatalf("Stat %s = %+v, %v", name, fi, err)
		}
		rc, err := st.Open(ctx, name)
		if err != nil {
			t.Fatalf("Open %s: %v", name, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %s: %d bytes, %v", name, len(got), err)
		}
	}
	n := 0
	if err := st.List(ctx, "", func(backend.FileInfo) error { n++; return nil }); err != nil || n != len(files) {
		t.Fatalf("List: %d objects, %v", n, err)
	}
	if proxy.Faults() < 5 || logs.Len() == 0 {
		t.Fatalf("%d faults injected, %d retries logged", proxy.Faults(), logs.Len())
	}
	t.Logf("%d requests, %d faults, %d retries logged", proxy.Requests(), proxy.Faults(), logs.Len())

	// A body cut off once is resumed or fails the read; it never ends as
	// a short file.
	want := files["data/e"]
	start := proxy.Requests()
	proxy.SetSchedule(func(n int64, _ *http.Request) testserver.Fault {
		if n == start+1 {
			return testserver.CutBody
		}
		return testserver.Pass
	})
	if rc, err := st.Open(ctx, "data/e"); err != nil {
		t.Fatalf("Open: %v", err)
	} else {
		got, err := io.ReadAll(rc)
		rc.Close()
		if err == nil && !bytes.Equal(got, want) {
			t.Errorf("one cut: read %d of %d bytes without an error", len(got), len(want))
		}
		t.Logf("one cut: %d bytes, %v", len(got), err)
	}

	// Bodies cut after every 10 bytes, more often than any bounded
	// resumption can make up for: the read must fail.
	for _, f := range []testserver.Fault{testserver.CutBody, testserver.StallBody} {
		proxy.FailAll(f)
		rc, err := st.Open(ctx, "data/e")
		if err != nil {
			t.Fatalf("%v: Open: %v", f, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err == nil {
			t.Errorf("%v: read %d of %d bytes without an error", f, len(got), len(files["data/e"]))
		}
	}
}
