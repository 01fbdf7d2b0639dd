package testserver_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

// pauseChildURL, set in the environment, makes the test binary a client:
// once a line is on its stdin, it GETs /before, PUTs /write, prints both
// answers and exits.
const pauseChildURL = "TESTSERVER_PAUSE_CHILD_URL"

func TestMain(m *testing.M) {
	if base := os.Getenv(pauseChildURL); base != "" {
		var line [1]byte
		os.Stdin.Read(line[:])
		for _, req := range []struct{ method, path string }{{"GET", "/before"}, {"PUT", "/write"}} {
			r, _ := http.NewRequest(req.method, base+req.path, strings.NewReader("body of "+req.path))
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				fmt.Println(err)
				os.Exit(1)
			}
			b, _ := io.ReadAll(resp.Body)
			fmt.Printf("%s %s\n", req.path, b)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// processState is the state letter of /proc/PID/stat: T when stopped.
func processState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state …: comm may hold spaces, so after the last ')'.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return fields[0]
}

// StopOn stops the client process at the chosen request, which the server
// does not get until Resume; the process runs on once it is answered.
func TestFaultProxyStopsAProcessAtARequest(t *testing.T) {
	var writes atomic.Int64
	var writeBody atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/write" {
			writes.Add(1)
			b, _ := io.ReadAll(r.Body)
			writeBody.Store(string(b))
		}
		fmt.Fprintf(w, "served %s", r.URL.Path)
	}))
	defer srv.Close()
	proxy := testserver.NewFaultProxy(t, srv.URL)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), pauseChildURL+"="+proxy.URL)
	var out bytes.Buffer
	cmd.Stdout = &out
	start, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	pause := proxy.StopOn(t, cmd.Process.Pid, func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.URL.Path == "/write"
	})
	go func() { exited <- cmd.Wait() }()
	start.Write([]byte("go\n")) // the pause is set: the child may send

	select {
	case <-pause.Stopped():
	case err := <-exited:
		t.Fatalf("the client exited (%v) without being stopped\n%s", err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the client was not stopped at its PUT")
	}
	if pause.Request != "PUT /write" {
		t.Errorf("stopped at %q", pause.Request)
	}
	time.Sleep(200 * time.Millisecond)
	if st := processState(t, cmd.Process.Pid); st != "T" {
		t.Errorf("the client's state is %s, want T (stopped)", st)
	}
	if n := writes.Load(); n != 0 {
		t.Fatalf("the server got the held request %d times before Resume", n)
	}
	pause.Resume()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the client: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not finish after Resume")
	}
	<-pause.Done()
	if n := writes.Load(); n != 1 {
		t.Errorf("the server got the held request %d times, want once", n)
	}
	if got := writeBody.Load(); got != "body of /write" {
		t.Errorf("the held request reached the server with body %q", got)
	}
	if want := "/before served /before\n/write served /write\n"; out.String() != want {
		t.Errorf("the client printed %q, want %q", out.String(), want)
	}
}

// StopAfterAnswer lets the chosen request reach the server and stops the
// client once it is answered, the answer held: the server has the
// request, and the client sends nothing more until Resume.
func TestFaultProxyStopsAProcessAfterTheAnswer(t *testing.T) {
	var before, writes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/before":
			before.Add(1)
		case "/write":
			writes.Add(1)
		}
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "served %s", r.URL.Path)
	}))
	defer srv.Close()
	proxy := testserver.NewFaultProxy(t, srv.URL)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), pauseChildURL+"="+proxy.URL)
	var out bytes.Buffer
	cmd.Stdout = &out
	start, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	pause := proxy.StopAfterAnswer(t, cmd.Process.Pid, func(r *http.Request) bool { return r.URL.Path == "/before" })
	go func() { exited <- cmd.Wait() }()
	start.Write([]byte("go\n"))
	select {
	case <-pause.Stopped():
	case err := <-exited:
		t.Fatalf("the client exited (%v) without being stopped\n%s", err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the client was not stopped after its GET")
	}
	time.Sleep(200 * time.Millisecond)
	if st := processState(t, cmd.Process.Pid); st != "T" {
		t.Errorf("the client's state is %s, want T (stopped)", st)
	}
	if b, w := before.Load(), writes.Load(); b != 1 || w != 0 {
		t.Fatalf("while the client is stopped the server has /before %d times, /write %d times; want 1 and 0", b, w)
	}
	pause.Resume()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the client: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not finish after Resume")
	}
	if want := "/before served /before\n/write served /write\n"; out.String() != want {
		t.Errorf("the client printed %q, want %q", out.String(), want)
	}
	if b, w := before.Load(), writes.Load(); b != 1 || w != 1 {
		t.Errorf("the server had /before %d times, /write %d times; want once each", b, w)
	}
}

// StopLater passes the chosen request and its answer, and stops the
// client on its timer; a client that would reach the next matching
// request first is stopped there, that request held, so it never gets
// past the pause by being quick (or the timer late).
func TestFaultProxyStopLaterStopsAtTheNextRequestAtTheLatest(t *testing.T) {
	var before, writes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/before":
			before.Add(1)
		case "/write":
			writes.Add(1)
		}
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "served %s", r.URL.Path)
	}))
	defer srv.Close()
	proxy := testserver.NewFaultProxy(t, srv.URL)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), pauseChildURL+"="+proxy.URL)
	var out bytes.Buffer
	cmd.Stdout = &out
	start, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	// Both requests match; the timer (an hour) never fires in the test.
	pause := proxy.StopLater(t, cmd.Process.Pid, func(*http.Request) bool { return true }, time.Hour)
	go func() { exited <- cmd.Wait() }()
	start.Write([]byte("go\n"))
	select {
	case <-pause.Stopped():
	case err := <-exited:
		t.Fatalf("the client exited (%v) without being stopped\n%s", err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the client was not stopped at its second request")
	}
	time.Sleep(200 * time.Millisecond)
	if st := processState(t, cmd.Process.Pid); st != "T" {
		t.Errorf("the client's state is %s, want T (stopped)", st)
	}
	if b, w := before.Load(), writes.Load(); b != 1 || w != 0 {
		t.Fatalf("while the client is stopped the server has /before %d times, /write %d times; want 1 and 0 (the second held)", b, w)
	}
	if !strings.HasPrefix(pause.Request, "GET /before") {
		t.Errorf("the pause says it stopped after %q, want the first request", pause.Request)
	}
	pause.Resume()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the client: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not finish after Resume")
	}
	if want := "/before served /before\n/write served /write\n"; out.String() != want {
		t.Errorf("the client printed %q, want %q", out.String(), want)
	}
	if b, w := before.Load(), writes.Load(); b != 1 || w != 1 {
		t.Errorf("the server had /before %d times, /write %d times; want once each", b, w)
	}
}
