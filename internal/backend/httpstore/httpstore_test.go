package httpstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/backendtest"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/httpstore"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func writeFiles(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func open(t *testing.T, base string, opts httpstore.Options) *httpstore.Store {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	s, err := httpstore.Open(context.Background(), u, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fast keeps retries quick in tests.
func fast(o httpstore.Options) httpstore.Options {
	o.RetryWaitMin, o.RetryWaitMax = 5*time.Millisecond, 50*time.Millisecond
	return o
}

func TestConformanceReader(t *testing.T) {
	backendtest.RunReader(t, func(t *testing.T, files map[string][]byte) backend.Reader {
		srv := testserver.HTTP(t, writeFiles(t, files))
		// Without the trailing slash, which Open adds.
		return open(t, strings.TrimSuffix(srv.URL, "/"), httpstore.Options{})
	})
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func readAll(ctx context.Context, r backend.Reader, name string) ([]byte, error) {
	rc, err := r.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestUnderPathAndProperties(t *testing.T) {
	dir := writeFiles(t, map[string][]byte{"repo/fdl.json": []byte("{}"), "other.json": []byte("x")})
	srv := testserver.HTTP(t, dir)
	s := open(t, srv.URL+"repo", httpstore.Options{})
	if got, err := readAll(context.Background(), s, "fdl.json"); err != nil || string(got) != "{}" {
		t.Fatalf("fdl.json under repo/: %q, %v", got, err)
	}
	if _, err := s.Stat(context.Background(), "other.json"); !backend.IsNotExist(err) {
		t.Fatalf("a file beside the base is reachable: %v", err)
	}
	if p := s.Properties(); p.CanList || p.CanWrite {
		t.Fatalf("Properties = %+v, want neither list nor write", p)
	}
	if err := s.List(context.Background(), "", func(backend.FileInfo) error { return nil }); !errors.Is(err, backend.ErrNotSupported) {
		t.Fatalf("List: %v", err)
	}
	if s.Location() != srv.URL+"repo/" {
		t.Fatalf("Location = %q", s.Location())
	}
}

func TestPasswordNotInLocationOrErrors(t *testing.T) {
	srv := testserver.HTTP(t, t.TempDir())
	u, _ := url.Parse(srv.URL)
	u.User = url.UserPassword("me", "s3cret-pw")
	s := open(t, u.String(), httpstore.Options{})
	_, err := s.Stat(context.Background(), "missing")
	if !backend.IsNotExist(err) {
		t.Fatalf("Stat missing: %v", err)
	}
	for _, msg := range []string{s.Location(), err.Error()} {
		if strings.Contains(msg, "s3cret-pw") {
			t.Fatalf("password in %q", msg)
		}
	}
}

func TestHeaderOption(t *testing.T) {
	srv := testserver.HTTP(t, writeFiles(t, map[string][]byte{"refs.json": []byte("{}")}))
	srv.RequireHeader("Authorization", "Bearer tok-123456")
	ctx := context.Background()

	without := open(t, srv.URL, fast(httpstore.Options{}))
	_, err := readAll(ctx, without, "refs.json")
	var serr *httpstore.StatusError
	if !errors.As(err, &serr) || serr.Code != 403 || backend.IsNotExist(err) {
		t.Fatalf("without the header: %v, want a 403 StatusError", err)
	}
	if !strings.Contains(err.Error(), srv.URL+"refs.json") {
		t.Errorf("error %q does not name the URL", err)
	}

	wrong := open(t, srv.URL, fast(httpstore.Options{Headers: []string{"Authorization: Bearer wrong-secret"}}))
	if _, err := wrong.Stat(ctx, "refs.json"); err == nil || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("with a wrong header: %v (want an error without the header's value)", err)
	}

	with := open(t, srv.URL, httpstore.Options{Headers: []string{"Authorization: Bearer tok-123456"}})
	if got, err := readAll(ctx, with, "refs.json"); err != nil || string(got) != "{}" {
		t.Fatalf("with the header: %q, %v", got, err)
	}
	if fi, err := with.Stat(ctx, "refs.json"); err != nil || fi.Size != 2 {
		t.Fatalf("Stat with the header: %+v, %v", fi, err)
	}
}

func TestMalformedHeaderRefusedWithoutValue(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1/")
	for _, h := range []string{"Authorization Bearer secret-value", ": secret-value", "X-Token: secret-value\r\nX-Other: 1"} {
		_, err := httpstore.Open(context.Background(), u, httpstore.Options{Headers: []string{"X-Ok: 1", h}})
		if err == nil {
			t.Fatalf("header %q was accepted", h)
		}
		if strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "#2") {
			t.Fatalf("error %q shows the header or does not say which one", err)
		}
	}
}

func TestNotFoundAndDirectories(t *testing.T) {
	srv := testserver.HTTP(t, writeFiles(t, map[string][]byte{"versions/019a/version.json": []byte("{}")}))
	s := open(t, srv.URL, fast(httpstore.Options{}))
	ctx := context.Background()
	for _, name := range []string{"missing", "versions", "versions/019a"} {
		if _, err := s.Open(ctx, name); !backend.IsNotExist(err) {
			t.Errorf("Open %s: %v, want ErrNotExist", name, err)
		}
		if _, err := s.Stat(ctx, name); !backend.IsNotExist(err) {
			t.Errorf("Stat %s: %v, want ErrNotExist", name, err)
		}
	}
	// 404 is an answer, not a failure: no retries.
	if s.Retries() != 0 {
		t.Errorf("%d retries after 404s", s.Retries())
	}
}

func TestStatFallsBackToGETWhenHEADRefused(t *testing.T) {
	content := randomBytes(1, 12345)
	srv := testserver.HTTP(t, writeFiles(t, map[string][]byte{"f": content}))
	srv.RefuseHead(true)
	s := open(t, srv.URL, httpstore.Options{})
	fi, err := s.Stat(context.Background(), "f")
	if err != nil || fi.Size != int64(len(content)) {
		t.Fatalf("Stat = %+v, %v; want size %d", fi, err, len(content))
	}
	if got := srv.RequestsFor("/f"); got != 2 {
		t.Errorf("%d requests, want HEAD then GET", got)
	}
}

// A body that keeps ending short of its Content-Length is an error from
// Read after the resumptions run out, never a short file.
func TestShortBodyIsAnError(t *testing.T) {
	content := randomBytes(2, 100000)
	srv := testserver.HTTP(t, writeFiles(t, map[string][]byte{"data.parquet": content}))
	proxy := testserver.NewFaultProxy(t, srv.URL)
	proxy.CutAfter = 1000
	proxy.FailAll(testserver.CutBody)
	s := open(t, proxy.URL+"/", fast(httpstore.Options{RetryMax: 3}))
	rc, err := s.Open(context.Background(), "data.parquet")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err == nil {
		t.Fatalf("read %d of %d bytes without an error", len(got), len(content))
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "cut off") {
		t.Errorf("error %v does not say the body was cut off", err)
	}
	// Each resumption got CutAfter more bytes, all of them correct.
	if want := 4 * proxy.CutAfter; int64(len(got)) != want || !bytes.Equal(got, content[:len(got)]) {
		t.Errorf("read %d bytes before the error, want the first %d", len(got), want)
	}
	if s.Retries() != 3 || proxy.Requests() != 4 {
		t.Errorf("retries %d, requests %d; want 3 resumptions after the first GET", s.Retries(), proxy.Requests())
	}
}

// A body cut off once is resumed with a Range request and read whole.
func TestCutBodyResumed(t *testing.T) {
	content := randomBytes(3, 3<<20+5)
	srv := testserver.HTTP(t, writeFiles(t, map[string][]byte{"big": content}))
	proxy := testserver.NewFaultProxy(t, srv.URL)
	proxy.CutAfter = 1 << 20
	proxy.SetSchedule(func(n int64, _ *http.Request) testserver.Fault {
		if n == 1 {
			return testserver.CutBody
		}
		return testserver.Pass
	})
	s := open(t, proxy.URL, fast(httpstore.Options{}))
	got, err := readAll(context.Background(), s, "big")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("read %d bytes, not the %d of the file", len(got), len(content))
	}
	if s.Retries() != 1 || proxy.Requests() != 2 {
		t.Errorf("retries %d, requests %d; want one resumption", s.Retries(), proxy.Requests())
	}
}

// A file replaced between the cut and the resumption is not stitched
// together from two versions: If-Range makes the server send the whole new
// file, which the reader refuses.
func TestResumeRefusesChangedFile(t *testing.T) {
	dir := writeFiles(t, map[string][]byte{"f": randomBytes(4, 50000)})
	srv := testserver.HTTP(t, dir)
	proxy := testserver.NewFaultProxy(t, srv.URL)
	proxy.CutAfter = 10000
	proxy.SetSchedule(func(n int64, _ *http.Request) testserver.Fault {
		switch n {
		case 1:
			return testserver.CutBody
		case 2:
			// The file is replaced before the resumption reaches it.
			p := filepath.Join(dir, "f")
			if err := os.WriteFile(p, randomBytes(5, 50000), 0o644); err != nil {
				t.Error(err)
			}
			os.Chtimes(p, time.Now(), time.Now().Add(time.Hour))
		}
		return testserver.Pass
	})
	s := open(t, proxy.URL, fast(httpstore.Options{}))
	_, err := readAll(context.Background(), s, "f")
	if err == nil {
		t.Fatal("a body resumed from a changed file was accepted")
	}
}

// Reads through a proxy that drops, fails and stalls requests still
// succeed, and every retry is logged.
func TestRetriesThroughFaultProxy(t *testing.T) {
	files := map[string][]byte{}
	for i, name := range []string{"fdl.json", "refs.json", "versions/019a/version.json", "data/a.parquet", "data/b.parquet"} {
		files[name] = randomBytes(uint64(10+i), 1000*(i+1))
	}
	srv := testserver.HTTP(t, writeFiles(t, files))
	proxy := testserver.NewFaultProxy(t, srv.URL)
	proxy.StallFor = 2 * time.Second
	proxy.CutAfter = 100
	proxy.SetSchedule(testserver.EveryNth(2, testserver.Drop, testserver.Status500, testserver.Status503,
		testserver.Stall, testserver.CutBody, testserver.StallBody))
	core, logs := observer.New(zap.WarnLevel)
	s := open(t, proxy.URL, fast(httpstore.Options{
		Logger:          zap.New(core),
		HeaderTimeout:   300 * time.Millisecond,
		ReadIdleTimeout: 300 * time.Millisecond,
	}))
	ctx := context.Background()
	for round := 0; round < 2; round++ {
		for name, want := range files {
			fi, err := s.Stat(ctx, name)
			if err != nil || fi.Size != int64(len(want)) {
				t.Fatalf("Stat %s = %+v, %v", name, fi, err)
			}
			got, err := readAll(ctx, s, name)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read %s: %d bytes, %v", name, len(got), err)
			}
		}
	}
	// Every fault cost exactly one retry, and nothing else did. Go's
	// transport itself resends a GET or HEAD whose reused connection
	// closed before any answer (a Drop): those retries are the requests
	// the proxy saw beyond the ones the store sent.
	transportRetries := proxy.Requests() - s.Requests()
	if proxy.Faults() < 10 || s.Retries()+transportRetries != proxy.Faults() {
		t.Errorf("%d retries (%d by the store, %d by the transport) for %d injected faults",
			s.Retries()+transportRetries, s.Retries(), transportRetries, proxy.Faults())
	}
	if n := int64(logs.Len()); n != s.Retries() {
		t.Errorf("%d log lines for %d retries", n, s.Retries())
	}
}

// An upstream that fails everything is given up on after RetryMax
// retries, with an error naming the URL and the last status.
func TestGivesUpAfterRetryMax(t *testing.T) {
	srv := testserver.HTTP(t, writeFiles(t, map[string][]byte{"refs.json": []byte("{}")}))
	proxy := testserver.NewFaultProxy(t, srv.URL)
	proxy.FailAll(testserver.Status503)
	s := open(t, proxy.URL, fast(httpstore.Options{RetryMax: 4}))
	_, err := s.Open(context.Background(), "refs.json")
	var serr *httpstore.StatusError
	if !errors.As(err, &serr) || serr.Code != 503 || !strings.Contains(err.Error(), proxy.URL+"/refs.json") {
		t.Fatalf("error %v, want 503 naming the URL", err)
	}
	if proxy.Requests() != 5 {
		t.Errorf("%d requests, want 1 + 4 retries", proxy.Requests())
	}

	proxy.FailAll(testserver.Drop)
	if _, err := s.Stat(context.Background(), "refs.json"); err == nil || backend.IsNotExist(err) {
		t.Fatalf("Stat through a dropping proxy: %v", err)
	}
	if proxy.Requests() != 10 {
		t.Errorf("%d requests, want 5 more", proxy.Requests())
	}
}

// secretServer is an internal service a hostile upstream would like the
// mirror to read: it counts every request it gets.
func secretServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte("secret"))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// A redirect to another origin (here another port of 127.0.0.1) is
// refused before anything is sent there, for HEAD and GET alike, with an
// error naming both addresses, permanent, and not retried.
func TestRedirectToAnotherOriginRefused(t *testing.T) {
	secret, secretHits := secretServer(t)
	var homeHits atomic.Int64
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		homeHits.Add(1)
		http.Redirect(w, r, secret.URL+"/secret", http.StatusFound)
	}))
	defer home.Close()
	s := open(t, home.URL+"/repo/", fast(httpstore.Options{}))
	ctx := context.Background()
	name := "versions/019a/dataset.json"
	_, statErr := s.Stat(ctx, name)
	rc, openErr := s.Open(ctx, name)
	if rc != nil {
		rc.Close()
	}
	for op, err := range map[string]error{"Stat": statErr, "Open": openErr} {
		var rerr *httpstore.RedirectError
		if !errors.As(err, &rerr) || !backend.IsPermanent(err) || backend.IsNotExist(err) {
			t.Fatalf("%s: %v, want a permanent RedirectError", op, err)
		}
		for _, want := range []string{home.URL + "/repo/" + name, secret.URL + "/secret", "--http-allow-redirect 127.0.0.1"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not name %s", op, err, want)
			}
		}
	}
	if n := secretHits.Load(); n != 0 {
		t.Errorf("the other server got %d requests", n)
	}
	if n := homeHits.Load(); n != 2 || s.Retries() != 0 {
		t.Errorf("home got %d requests, %d retries; want one HEAD and one GET, no retry", n, s.Retries())
	}
}

// A cut-off body whose resumption (a Range request) is redirected to
// another origin is refused the same way: the file fails, and the other
// server is never asked.
func TestRedirectOfResumptionRefused(t *testing.T) {
	secret, secretHits := secretServer(t)
	content := randomBytes(7, 10000)
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			http.Redirect(w, r, secret.URL+"/secret", http.StatusFound)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(content)))
		w.Write(content[:1000])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-body
	}))
	defer home.Close()
	s := open(t, home.URL, fast(httpstore.Options{}))
	got, err := readAll(context.Background(), s, "data/f.parquet")
	var rerr *httpstore.RedirectError
	if !errors.As(err, &rerr) || !strings.Contains(err.Error(), secret.URL+"/secret") {
		t.Fatalf("read %d bytes, %v; want the resumption's redirect refused", len(got), err)
	}
	if n := secretHits.Load(); n != 0 {
		t.Errorf("the other server got %d requests", n)
	}
}

// A redirect to a host the operator allowed is followed, without the
// operator's headers (an API key); a redirect within the origin keeps
// them; a host:port entry allows that port only.
func TestRedirectsAllowedByNameDropHeaders(t *testing.T) {
	var leaked, kept []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked = append(leaked, r.Header.Get("X-Api-Key"))
		w.Write([]byte("{}"))
	}))
	defer other.Close()
	var home *httptest.Server
	home = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away.json":
			http.Redirect(w, r, other.URL+"/x.json", http.StatusFound)
		case "/here.json":
			http.Redirect(w, r, home.URL+"/same.json", http.StatusFound)
		default:
			kept = append(kept, r.Header.Get("X-Api-Key"))
			w.Write([]byte("{}"))
		}
	}))
	defer home.Close()
	otherHost := strings.TrimPrefix(other.URL, "http://")
	ctx := context.Background()
	for _, allow := range []string{"127.0.0.1", otherHost} {
		leaked, kept = nil, nil
		s := open(t, home.URL+"/", httpstore.Options{Headers: []string{"X-Api-Key: s3cret-key"}, AllowRedirects: []string{allow}})
		if _, err := readAll(ctx, s, "away.json"); err != nil {
			t.Fatalf("allowing %s: %v", allow, err)
		}
		if _, err := readAll(ctx, s, "here.json"); err != nil {
			t.Fatal(err)
		}
		if len(leaked) != 1 || leaked[0] != "" {
			t.Errorf("allowing %s: the other host got X-Api-Key %q", allow, leaked)
		}
		if len(kept) != 1 || kept[0] != "s3cret-key" {
			t.Errorf("a redirect within the origin lost the header: %q", kept)
		}
	}
	// Another port of the allowed host is another host.
	s := open(t, home.URL+"/", httpstore.Options{AllowRedirects: []string{"127.0.0.1:1"}})
	if _, err := readAll(ctx, s, "away.json"); err == nil {
		t.Fatal("a redirect to a port that was not allowed was followed")
	}
}

func TestAllowRedirectsEntriesChecked(t *testing.T) {
	for _, bad := range []string{"", "http://cdn.example.com", "cdn.example.com/x", "cdn:port", "user@cdn"} {
		u, _ := url.Parse("http://127.0.0.1:1/")
		if _, err := httpstore.Open(context.Background(), u, httpstore.Options{AllowRedirects: []string{bad}}); err == nil {
			t.Errorf("AllowRedirects %q accepted", bad)
		}
	}
	for _, good := range []string{"cdn.example.com", "CDN.example.com:8443", "[::1]:8080", "::1", "10.0.0.1"} {
		u, _ := url.Parse("http://127.0.0.1:1/")
		if _, err := httpstore.Open(context.Background(), u, httpstore.Options{AllowRedirects: []string{good}}); err != nil {
			t.Errorf("AllowRedirects %q: %v", good, err)
		}
	}
}

// A server that streams without Content-Length (chunked) has its objects
// read whole, and Stat says the size is unknown (-1) instead of failing.
// A chunked body cut off is an error, never a short file.
func TestChunkedBodies(t *testing.T) {
	content := randomBytes(8, 300000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			return
		}
		for off := 0; off < len(content); off += 65536 {
			w.Write(content[off:min(off+65536, len(content))])
			w.(http.Flusher).Flush()
			if r.URL.Path == "/cut" && off > 0 {
				panic(http.ErrAbortHandler)
			}
		}
	}))
	defer srv.Close()
	s := open(t, srv.URL, fast(httpstore.Options{}))
	ctx := context.Background()
	fi, err := s.Stat(ctx, "catalog.duckdb")
	if err != nil || fi.Size != -1 {
		t.Fatalf("Stat = %+v, %v; want size -1", fi, err)
	}
	got, err := readAll(ctx, s, "catalog.duckdb")
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("read %d of %d bytes: %v", len(got), len(content), err)
	}
	if got, err := readAll(ctx, s, "cut"); err == nil {
		t.Fatalf("a cut-off chunked body read as %d bytes without an error", len(got))
	}
}
