// Package testserver starts real servers (an S3 gateway, a GCS emulator, a
// plain HTTP server) for tests. Every server binds 127.0.0.1 on a free port,
// keeps its data in t.TempDir(), and is stopped when the test ends.
//
// The server binaries are pinned by version and cached in <repo>/.cache/bin;
// scripts/install-test-servers builds any that are missing.
package testserver

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RepoRoot returns the directory holding go.mod, found upwards from the
// test's working directory (the package directory under `go test`).
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testserver: no go.mod above the working directory")
		}
		dir = parent
	}
}

var installOnce sync.Once

// Binary returns the path of a test server binary in <repo>/.cache/bin,
// running scripts/install-test-servers once per test process if it is
// missing. A missing binary fails the test: these tests are not optional.
// Under -short (make check) the test skips instead: the edit loop neither
// installs nor starts servers, and make test runs it.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: needs the %s test server (make test runs this)", name)
	}
	root := RepoRoot(t)
	bin := filepath.Join(root, ".cache", "bin", name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	installOnce.Do(func() {
		cmd := exec.Command(filepath.Join(root, "scripts", "install-test-servers"))
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("scripts/install-test-servers: %v\n%s", err, out)
		}
	})
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("testserver: %s is missing and scripts/install-test-servers did not build it", bin)
	}
	return bin
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process may take it before the server binds it; Start retries.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("testserver: finding a free port: %v", err)
	}
	return port
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitForPort waits until addr accepts TCP connections, or timeout passes.
func WaitForPort(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not accept connections within %v: %w", addr, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Process is a server process started by Start.
type Process struct {
	Addr string // 127.0.0.1:port
	Port int
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, valid after done
}

// Output is what the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.out.String() }

// Start runs binary with the arguments args(port) returns, where port is a
// free 127.0.0.1 port, and waits until the port accepts connections (see
// StartProcess). The process is stopped (SIGTERM, then SIGKILL after 5 s)
// when the test ends; its output is logged if the test failed. env is
// added to the test's environment.
func Start(t testing.TB, binary string, args func(port int) []string, env ...string) *Process {
	t.Helper()
	p, err := StartProcess(binary, args, env...)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(binary), p.Output())
		}
	})
	return p
}

// StartProcess is Start outside a test, for the benchmark harness: the
// caller stops the process with Stop. If the process exits before its port
// accepts connections (typically because another process took the port),
// it tries again with another port, three times in all.
func StartProcess(binary string, args func(port int) []string, env ...string) (*Process, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		p, err := start(binary, args, env, port)
		if err == nil {
			return p, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("starting %s: %w", filepath.Base(binary), lastErr)
}

func start(binary string, args func(port int) []string, env []string, port int) (*Process, error) {
	p := &Process{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Port: port,
		out:  &syncBuffer{},
		done: make(chan struct{}),
	}
	p.cmd = exec.Command(binary, args(port)...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	// Its own process group, so a Ctrl-C on the test does not reach it
	// before the cleanup does, and the cleanup can signal it alone.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	ready := make(chan error, 1)
	go func() { ready <- WaitForPort(p.Addr, 20*time.Second) }()
	select {
	case err := <-ready:
		if err != nil {
			p.stop()
			return nil, fmt.Errorf("%w\n%s", err, p.Output())
		}
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("exited before listening on %s (%v):\n%s", p.Addr, p.err, p.Output())
	}
}

// Stop stops the server now (SIGTERM, then SIGKILL after 5 s), for tests
// of a store that goes away.
func (p *Process) Stop() { p.stop() }

func (p *Process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
