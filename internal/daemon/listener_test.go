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
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// serveWith starts a daemon serving HTTP on a free port with opts (the
// config and the engine are filled in) and returns its address.
func serveWith(t *testing.T, opts Options) string {
	t.Helper()
	return serveWithConfig(t, opts, freePort(t), "")
}

// serveWithConfig is serveWith on addr, with extra config lines on top.
func serveWithConfig(t *testing.T, opts Options, addr, extra string) string {
	t.Helper()
	opts.ConfigPath = filepath.Join(t.TempDir(), "config.yaml")
	writeConfig(t, opts.ConfigPath, extra+mirrorsConfig(addr, "towns"))
	opts.Logger = zap.NewNop()
	opts.Run = func(ctx context.Context, job mirror.Job, _ *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		return okReport(job), nil
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	healthAddr := addr
	if m := d.Config().MetricsListen; m != "" {
		healthAddr = m
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
	waitFor(t, "/readyz", 5*time.Second, func() bool { c, _ := get(t, "http://"+healthAddr+"/readyz"); return c == 200 })
	// The client keeps the connection it asked on: let it go, so that it
	// holds none of the server's connections.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	// The server sees that close a moment later: until it has, the probe's
	// connection takes one of the slots a test counts on.
	waitFor(t, "the probe's connection released", 5*time.Second, func() bool {
		return testutil.ToFloat64(d.metrics.connOpen.WithLabelValues(slotPublic)) == 0 &&
			testutil.ToFloat64(d.metrics.connOpen.WithLabelValues(slotReserve)) == 0
	})
	return addr
}

// keptAlive opens a connection, sends one request on it and reads the
// answer, leaving the connection open and idle.
func keptAlive(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	return keptAliveFrom(t, "127.0.0.1", addr)
}

// dialFrom connects to addr from the loopback address from (any of
// 127.0.0.0/8 on Linux), so that a test has many client addresses.
func dialFrom(from, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	return d.Dial("tcp", addr)
}

// keptAliveFrom is keptAlive from a loopback address of its own.
func keptAliveFrom(t *testing.T, from, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := dialFrom(from, addr)
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

func TestOneAddressCannotHoldEveryConnection(t *testing.T) {
	addr := serveWith(t, Options{HTTPMaxPerAddress: 3, HTTPIdleTimeout: time.Minute})
	for range 3 {
		keptAliveFrom(t, "127.0.0.2", addr)
	}
	// A fourth from the same address is closed at once, unserved.
	c, err := dialFrom("127.0.0.2", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := bufio.NewReader(c).ReadByte(); err == nil {
		t.Fatalf("a fourth connection from one address was served (%q) past a cap of 3", b)
	} else if nerr, ok := err.(net.Error); ok && nerr.Timeout() {
		t.Fatal("a fourth connection from one address was held open, not closed")
	}
	// Another address is served.
	keptAliveFrom(t, "127.0.0.3", addr)
}

func TestHealthReserveServesProbesWhenEveryConnectionIsHeld(t *testing.T) {
	addr := serveWith(t, Options{HTTPMaxConnections: 4, HTTPMaxPerAddress: 2, HTTPIdleTimeout: time.Minute})
	keptAliveFrom(t, "127.0.0.2", addr)
	keptAliveFrom(t, "127.0.0.2", addr)
	keptAliveFrom(t, "127.0.0.3", addr)
	keptAliveFrom(t, "127.0.0.3", addr)
	// Every public slot is held: a probe is served from the reserve, and
	// its connection closed after the answer; the status page is not.
	for _, tc := range []struct {
		path string
		code int
	}{{"/healthz", 200}, {"/metrics", 200}, {"/readyz", 200}, {"/", 503}, {"/status.json", 503}} {
		c := http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + tc.path)
		if err != nil {
			t.Fatalf("GET %s with every public connection held: %v", tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("GET %s from the reserve: %d, want %d", tc.path, resp.StatusCode, tc.code)
		}
		if tc.path == "/metrics" {
			// The reserve holds this scrape and perhaps the last probe,
			// which the server may not have seen closed yet.
			for _, want := range []string{`fdl_mirror_http_connections_open{slot="public"} 4` + "\n", `fdl_mirror_http_connections_open{slot="reserve"} `} {
				if !strings.Contains(string(body), want) {
					t.Errorf("GET /metrics with 4 public connections held and itself in the reserve: no %q", want)
				}
			}
			if strings.Contains(string(body), `fdl_mirror_http_connections_open{slot="reserve"} 0`) {
				t.Error("GET /metrics, served from the reserve, counts no connection there")
			}
		}
	}
}

// attack holds idle keep-alive connections from idleFrom and drips
// request headers, one byte a second, from dripFrom, opening a new
// dripping connection whenever the server closes one, until the test ends.
func attack(t *testing.T, addr string, idle int, idleFrom []string, drip int, dripFrom []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	// hold keeps one connection from from open with use, and opens
	// another whenever the server closes it, until the test ends.
	hold := func(from string, use func(c net.Conn)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := dialFrom(from, addr)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				go func() { <-ctx.Done(); c.Close() }()
				use(c)
				c.Close()
			}
		}()
	}
	for i := range idle {
		hold(idleFrom[i%len(idleFrom)], func(c net.Conn) {
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			io.Copy(io.Discard, c) // until the server closes it
		})
	}
	for i := range drip {
		hold(dripFrom[i%len(dripFrom)], func(c net.Conn) {
			req := "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1000)
			for j := 0; j < len(req) && ctx.Err() == nil; j++ {
				if _, err := c.Write([]byte{req[j]}); err != nil {
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		})
	}
	// Let the attack take hold.
	time.Sleep(1500 * time.Millisecond)
}

// probeEverySecond probes url as a kubelet does (a new connection each,
// a 1 s timeout) n times, a second apart, and reports each failure.
func probeEverySecond(t *testing.T, url string, n int) {
	t.Helper()
	c := http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range n {
		began := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			t.Errorf("probe %d of %d: %v", i+1, n, err)
		} else {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("probe %d of %d: %d", i+1, n, resp.StatusCode)
			}
		}
		time.Sleep(time.Second - time.Since(began))
	}
}

func loopbacks(first, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("127.0.0.%d", first+i))
	}
	return out
}

// TestHealthAnswersEveryProbeUnderIdleAndSlowConnections: 64 idle
// keep-alive connections and 200 dripping headers, from two addresses,
// against the listener shared with the status page and the trigger; the
// per-address cap keeps slots for everyone else.
func TestHealthAnswersEveryProbeUnderIdleAndSlowConnections(t *testing.T) {
	addr := serveWith(t, Options{})
	attack(t, addr, 64, []string{"127.0.0.2"}, 200, []string{"127.0.0.3"})
	probeEverySecond(t, "http://"+addr+"/healthz", 6)
}

// TestMetricsListenAnswersProbesWhenThePublicListenerIsFull: the same
// attack from 40 addresses fills every slot of the public listener, the
// reserve too; probes on metrics_listen do not notice.
func TestMetricsListenAnswersProbesWhenThePublicListenerIsFull(t *testing.T) {
	addr, health := freePort(t), freePort(t)
	serveWithConfig(t, Options{}, addr, "metrics_listen: "+health+"\n")
	attack(t, addr, 64, loopbacks(2, 20), 200, loopbacks(30, 20))
	probeEverySecond(t, "http://"+health+"/healthz", 6)
	if c, _ := get(t, "http://"+health+"/metrics"); c != 200 {
		t.Errorf("GET /metrics on metrics_listen: %d", c)
	}
	// The status page is not on the health listener, and the health
	// endpoints not on the public one.
	if c, _ := get(t, "http://"+health+"/status.json"); c != 404 {
		t.Errorf("GET /status.json on metrics_listen: %d, want 404", c)
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
