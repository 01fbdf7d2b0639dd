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

// pauseClient is this test binary run as the client (pauseChildURL) of a
// server behind a fault proxy; the server counts what it gets.
type pauseClient struct {
	before, writes atomic.Int64
	writeBody      atomic.Value // the body /write reached the server with
	pause          *testserver.Pause
	pid            int
	out            bytes.Buffer
	exited         chan error
}

// startPauseClient starts the client, sets its pause with stop, and only
// then lets it send.
func startPauseClient(t *testing.T, stop func(proxy *testserver.FaultProxy, pid int) *testserver.Pause) *pauseClient {
	t.Helper()
	c := &pauseClient{exited: make(chan error, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/before":
			c.before.Add(1)
		case "/write":
			c.writes.Add(1)
			c.writeBody.Store(string(b))
		}
		fmt.Fprintf(w, "served %s", r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	proxy := testserver.NewFaultProxy(t, srv.URL)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), pauseChildURL+"="+proxy.URL)
	cmd.Stdout = &c.out
	start, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.pid = cmd.Process.Pid
	c.pause = stop(proxy, c.pid)
	go func() { c.exited <- cmd.Wait() }()
	start.Write([]byte("go\n")) // the pause is set: the client may send
	return c
}

// waitStopped waits for the client to be stopped (at where), and checks
// it stays stopped.
func (c *pauseClient) waitStopped(t *testing.T, where string) {
	t.Helper()
	select {
	case <-c.pause.Stopped():
	case err := <-c.exited:
		t.Fatalf("the client exited (%v) without being stopped\n%s", err, c.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the client was not stopped %s", where)
	}
	time.Sleep(200 * time.Millisecond)
	if st := processState(t, c.pid); st != "T" {
		t.Errorf("the client's state is %s, want T (stopped)", st)
	}
}

// resumeAndFinish resumes the client, waits for its end and checks what
// it printed: both answers, in order.
func (c *pauseClient) resumeAndFinish(t *testing.T) {
	t.Helper()
	c.pause.Resume()
	select {
	case err := <-c.exited:
		if err != nil {
			t.Fatalf("the client: %v\n%s", err, c.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not finish after Resume")
	}
	if want := "/before served /before\n/write served /write\n"; c.out.String() != want {
		t.Errorf("the client printed %q, want %q", c.out.String(), want)
	}
}

// StopOn stops the client process at the chosen request, which the server
// does not get until Resume; the process runs on once it is answered.
func TestFaultProxyStopsAProcessAtARequest(t *testing.T) {
	c := startPauseClient(t, func(proxy *testserver.FaultProxy, pid int) *testserver.Pause {
		return proxy.StopOn(t, pid, func(r *http.Request) bool {
			return r.Method == http.MethodPut && r.URL.Path == "/write"
		})
	})
	c.waitStopped(t, "at its PUT")
	if c.pause.Request != "PUT /write" {
		t.Errorf("stopped at %q", c.pause.Request)
	}
	if n := c.writes.Load(); n != 0 {
		t.Fatalf("the server got the held request %d times before Resume", n)
	}
	c.resumeAndFinish(t)
	<-c.pause.Done()
	if n := c.writes.Load(); n != 1 {
		t.Errorf("the server got the held request %d times, want once", n)
	}
	if got := c.writeBody.Load(); got != "body of /write" {
		t.Errorf("the held request reached the server with body %q", got)
	}
}

// StopAfterAnswer lets the chosen request reach the server and stops the
// client once it is answered, the answer held: the server has the
// request, and the client sends nothing more until Resume.
func TestFaultProxyStopsAProcessAfterTheAnswer(t *testing.T) {
	c := startPauseClient(t, func(proxy *testserver.FaultProxy, pid int) *testserver.Pause {
		return proxy.StopAfterAnswer(t, pid, func(r *http.Request) bool { return r.URL.Path == "/before" })
	})
	c.waitStopped(t, "after its GET")
	if b, w := c.before.Load(), c.writes.Load(); b != 1 || w != 0 {
		t.Fatalf("while the client is stopped the server has /before %d times, /write %d times; want 1 and 0", b, w)
	}
	c.resumeAndFinish(t)
	if b, w := c.before.Load(), c.writes.Load(); b != 1 || w != 1 {
		t.Errorf("the server had /before %d times, /write %d times; want once each", b, w)
	}
}

// StopLater passes the chosen request and its answer, and stops the
// client on its timer; a client that would reach the next matching
// request first is stopped there, that request held, so it never gets
// past the pause by being quick (or the timer late).
func TestFaultProxyStopLaterStopsAtTheNextRequestAtTheLatest(t *testing.T) {
	c := startPauseClient(t, func(proxy *testserver.FaultProxy, pid int) *testserver.Pause {
		// Both requests match; the timer (an hour) never fires in the test.
		return proxy.StopLater(t, pid, func(*http.Request) bool { return true }, time.Hour)
	})
	c.waitStopped(t, "at its second request")
	if b, w := c.before.Load(), c.writes.Load(); b != 1 || w != 0 {
		t.Fatalf("while the client is stopped the server has /before %d times, /write %d times; want 1 and 0 (the second held)", b, w)
	}
	if !strings.HasPrefix(c.pause.Request, "GET /before") {
		t.Errorf("the pause says it stopped after %q, want the first request", c.pause.Request)
	}
	c.resumeAndFinish(t)
	if b, w := c.before.Load(), c.writes.Load(); b != 1 || w != 1 {
		t.Errorf("the server had /before %d times, /write %d times; want once each", b, w)
	}
}
