package testserver

import (
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// HTTPServer is a plain net/http file server over a folder, as a static
// web host serves a repository: it answers GET and HEAD for files (with
// ranges, ETag and Last-Modified) and 404 for anything else, folders
// included; it never lists a folder.
type HTTPServer struct {
	URL string // http://127.0.0.1:port/
	Dir string

	root     *os.Root
	requests atomic.Int64
	mu       sync.Mutex
	header   string // required header name, "" for none
	value    string
	perPath  map[string]int64
	noHead   bool
	allow    func(*http.Request) bool // nil allows every request
}

// HTTP serves dir on 127.0.0.1 until the test ends.
func HTTP(t testing.TB, dir string) *HTTPServer {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	s := &HTTPServer{Dir: dir, root: root, perPath: map[string]int64{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: listening: %v", err)
	}
	srv := &http.Server{Handler: s}
	go srv.Serve(l)
	t.Cleanup(func() {
		srv.Close()
		root.Close()
	})
	s.URL = "http://" + l.Addr().String() + "/"
	return s
}

// RequireHeader makes the server answer 403 to any request without the
// header name: value. An empty name requires nothing.
func (s *HTTPServer) RequireHeader(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.header, s.value = name, value
}

// RequireFunc makes the server answer 401 to any request allow refuses:
// Basic auth, a bearer token, a ?token= of a signed URL. Nil allows all.
func (s *HTTPServer) RequireFunc(allow func(*http.Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allow = allow
}

// HTTPS serves dir as HTTP does, over TLS with a certificate ca signed.
func HTTPS(t testing.TB, dir string, ca *CA) *HTTPServer {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(func() { root.Close() })
	s := &HTTPServer{Dir: dir, root: root, perPath: map[string]int64{}}
	s.URL = ca.ServeTLS(t, s) + "/"
	return s
}

// RefuseHead makes the server answer HEAD with 405, as some hosts do.
func (s *HTTPServer) RefuseHead(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noHead = refuse
}

// Requests is the number of requests received, refused ones included.
func (s *HTTPServer) Requests() int64 { return s.requests.Load() }

// RequestsFor is the number of requests received for one URL path
// ("/refs.json").
func (s *HTTPServer) RequestsFor(path string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perPath[path]
}

func (s *HTTPServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	s.mu.Lock()
	s.perPath[r.URL.Path]++
	header, value, noHead, allow := s.header, s.value, s.noHead, s.allow
	s.mu.Unlock()
	if allow != nil && !allow(r) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if header != "" && r.Header.Get(header) != value {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	if r.Method != http.MethodGet && (r.Method != http.MethodHead || noHead) {
		w.Header().Set("Allow", "GET")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/")
	if name == "" || !fs.ValidPath(name) {
		http.NotFound(w, r)
		return
	}
	f, err := s.root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			http.NotFound(w, r)
		} else {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	// A strong validator, so clients can resume with If-Range.
	w.Header().Set("ETag", `"`+strconv.FormatInt(st.Size(), 16)+"-"+strconv.FormatInt(st.ModTime().UnixNano(), 16)+`"`)
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// AssertEachAskedOnce fails t for each of a repository's data files
// (paths under its root) that was not requested exactly once.
func (s *HTTPServer) AssertEachAskedOnce(t testing.TB, dataFiles []string) {
	t.Helper()
	for _, f := range dataFiles {
		if n := s.RequestsFor("/" + f); n != 1 {
			t.Errorf("data file %s: %d requests upstream, want 1", f, n)
		}
	}
}
