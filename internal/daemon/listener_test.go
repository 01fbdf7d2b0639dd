package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// serveWith starts a daemon serving HTTP on a free port with opts (the
// config and the engine are filled in) and returns its address.
func serveWith(t *testing.T, opts Options) string {
	t.Helper()
	addr := freePort(t)
	opts.ConfigPath = filepath.Join(t.TempDir(), "config.yaml")
	writeConfig(t, opts.ConfigPath, mirrorsConfig(addr, "towns"))
	opts.Logger = zap.NewNop()
	opts.Run = func(ctx context.Context, job mirror.Job, _ *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		return okReport(job), nil
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		d.Serve(ctx, nil)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	waitFor(t, "/healthz", 5*time.Second, func() bool { c, _ := get(t, "http://"+addr+"/healthz"); return c == 200 })
	// The client keeps the connection it asked on: let it go, so that it
	// holds none of the server's connections.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return addr
}

// keptAlive opens a connection, sends one request on it and reads the
// answer, leaving the connection open and idle.
func keptAlive(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("GET /healthz: %d, close %v", resp.StatusCode, resp.Close)
	}
	return c, r
}

func TestIdleConnectionsAreClosedWithinIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	addr := serveWith(t, Options{HTTPIdleTimeout: idle})
	type conn struct {
		c net.Conn
		r *bufio.Reader
	}
	var conns []conn
	for range 10 {
		c, r := keptAlive(t, addr)
		conns = append(conns, conn{c, r})
	}
	// Far longer than idle, far shorter than the 170 s such connections
	// stayed open before: the server, not this deadline, must end them.
	deadline := time.Now().Add(20 * idle)
	for i, c := range conns {
		c.c.SetReadDeadline(deadline)
		_, err := c.r.ReadByte()
		var nerr net.Error
		if errors.As(err, &nerr) && nerr.Timeout() {
			t.Errorf("connection %d still open %v after its request (IdleTimeout %v)", i, 20*idle, idle)
		} else if err == nil {
			t.Errorf("connection %d: the server sent more bytes", i)
		}
	}
}

func TestConnectionsAboveTheCapWaitForOneToClose(t *testing.T) {
	addr := serveWith(t, Options{HTTPMaxConnections: 2, HTTPIdleTimeout: time.Minute})
	first, _ := keptAlive(t, addr)
	keptAlive(t, addr)
	// A third connection is made by the kernel but not served while the
	// two others are held.
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	io.WriteString(third, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	r := bufio.NewReader(third)
	third.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("a third connection was served while the cap of 2 was held")
	}
	first.Close()
	third.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("the third connection was not served once one closed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /healthz on the third connection: %d", resp.StatusCode)
	}
}

func TestEndpointsRefuseOtherMethods(t *testing.T) {
	addr := serveWith(t, Options{})
	for _, path := range []string{"/", "/status.json", "/metrics", "/healthz", "/readyz"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader("x"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(resp.Header.Get("Allow"), "GET") {
				t.Errorf("%s %s: %d, Allow %q; want 405 allowing GET", method, path, resp.StatusCode, resp.Header.Get("Allow"))
			}
		}
		if c, _ := get(t, "http://"+addr+path); c != 200 {
			t.Errorf("GET %s: %d", path, c)
		}
	}
}

// TestWarnsOfALiteralSecretInAWorldReadableConfig: at start and at each
// reload, while the file is o+r; not once it is not.
func TestWarnsOfALiteralSecretInAWorldReadableConfig(t *testing.T) {
	const warning = "the config holds secrets and every user can read it"
	text := mirrorsConfig("", "towns") + "    http_headers: [\"Authorization: Bearer literal-token-1234\"]\n"
	h := start(t, text, func(ctx context.Context, job mirror.Job, _ *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		return okReport(job), nil
	})
	if n := h.logs.FilterMessageSnippet(warning).Len(); n != 1 {
		t.Fatalf("%d warnings at start of a 0644 config with a literal header, want 1", n)
	}
	entry := h.logs.FilterMessageSnippet(warning).All()[0]
	if got := fmt.Sprint(entry.ContextMap()["secrets_at"]); !strings.Contains(got, "line 6: mirrors[0].http_headers[0]: a header value") || strings.Contains(got, "literal-token") {
		t.Errorf("secrets_at = %s", got)
	}
	if err := h.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := h.logs.FilterMessageSnippet(warning).Len(); n != 2 {
		t.Errorf("%d warnings after a reload, want 2", n)
	}
	if err := os.Chmod(h.path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := h.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := h.logs.FilterMessageSnippet(warning).Len(); n != 2 {
		t.Errorf("a 0640 config was warned about: %d warnings", n)
	}
}
