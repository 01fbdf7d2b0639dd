package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// TestNoSecretInAnyOutput walks every output path (each command, text and
// --json, success and failure, a config's runs, the daemon's log at start,
// at SIGHUP and at a refused reload, its pages and metrics, daemon --check
// on a good and a bad config) with every form a secret is given in: a
// password in the address, a query token, a header, a header file and a
// config ${VAR}, against a real HTTP server that takes each. No byte of
// any secret may come out.
func TestNoSecretInAnyOutput(t *testing.T) {
	const (
		pw      = "pw-S3CRET-basic-71"
		token   = "tok-S3CRET-query-72"
		hdr     = "hdr-S3CRET-bearer-73"
		fileHdr = "file-S3CRET-bearer-74"
		envPw   = "env-S3CRET-var-75"
		wrong   = "wrong-S3CRET-76"
	)
	secrets := []string{pw, token, hdr, fileHdr, envPw, wrong}
	up := t.TempDir()
	gen(t, up, generate.Options{Versions: 2})
	srv := testserver.HTTP(t, up)
	srv.RequireFunc(func(r *http.Request) bool {
		user, pass, basic := r.BasicAuth()
		auth := r.Header.Get("Authorization")
		return basic && user == "alice" && (pass == pw || pass == envPw) || r.URL.Query().Get("token") == token ||
			auth == "Bearer "+hdr || auth == "Bearer "+fileHdr
	})
	host := strings.TrimSuffix(strings.TrimPrefix(srv.URL, "http://"), "/")
	closed := freeAddr(t) // nothing listens there: connection refused
	dir := t.TempDir()
	headerFile := filepath.Join(dir, "headers")
	if err := os.WriteFile(headerFile, []byte("# a Secret volume\nAuthorization: Bearer "+fileHdr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FDL_TEST_PW", envPw)
	t.Setenv("FDL_TEST_TOKEN", token)

	outputs := 0
	check := func(what string, texts ...string) {
		t.Helper()
		outputs++
		for _, text := range texts {
			for _, s := range secrets {
				if strings.Contains(text, s) {
					t.Errorf("%s shows %q:\n%s", what, s, text)
				}
			}
		}
	}
	runChecked := func(wantOK bool, args ...string) result {
		t.Helper()
		res := run(t, args...)
		check(strings.Join(args, " "), res.stdout, res.stderr)
		if (res.code == 0) != wantOK {
			t.Errorf("%v: exit %d, want success %v\nstdout:\n%s\nstderr:\n%s", args, res.code, wantOK, res.stdout, res.stderr)
		}
		return res
	}

	type source struct {
		name  string
		addr  string
		flags []string
	}
	good := []source{
		{"password", "http://alice:" + pw + "@" + host + "/", nil},
		{"query", srv.URL + "?token=" + token, nil},
		{"header", srv.URL, []string{"--http-header", "Authorization: Bearer " + hdr}},
		{"header-file", srv.URL, []string{"--http-header-file", headerFile}},
	}
	bad := []source{
		{"missing", "http://alice:" + pw + "@" + host + "/missing/?token=" + token, nil},
		{"refused", srv.URL + "?token=" + wrong, []string{"--http-header", "X-Other: " + hdr}},
		{"unreachable", "http://alice:" + pw + "@" + closed + "/?token=" + token, []string{"--retries", "1"}},
	}
	for _, src := range good {
		sink := filepath.Join(dir, "sink-"+src.name)
		args := func(cmd string, extra ...string) []string {
			return append(append(append([]string{cmd}, extra...), src.flags...), src.addr, sink)
		}
		runChecked(true, args("sync", "--dry-run")...)
		res := runChecked(true, args("sync")...)
		if !strings.Contains(res.stdout, "REDACTED") && src.name != "header" && src.name != "header-file" {
			t.Errorf("sync %s: the summary does not show the address redacted:\n%s", src.name, res.stdout)
		}
		runChecked(true, args("sync", "--json")...)
		res = runChecked(true, args("status")...)
		if src.name == "password" && !strings.Contains(res.stdout, "http://alice:REDACTED@"+host+"/") {
			t.Errorf("status: the source is not shown redacted:\n%s", res.stdout)
		}
		runChecked(true, args("status", "--json")...)
		runChecked(true, args("prune", "--dry-run")...)
		runChecked(true, args("prune", "--dry-run", "--json")...)
		verify := append(append([]string{"verify"}, src.flags...), src.addr)
		runChecked(true, verify...)
		runChecked(true, append(verify, "--json")...)
	}
	for _, src := range bad {
		sink := filepath.Join(dir, "sink-"+src.name)
		for _, cmd := range [][]string{{"sync"}, {"sync", "--json"}, {"status"}, {"status", "--json"}, {"prune", "--dry-run"}, {"prune", "--json"}} {
			runChecked(false, append(append(cmd, src.flags...), src.addr, sink)...)
		}
		runChecked(false, append(append([]string{"verify"}, src.flags...), src.addr)...)
		runChecked(false, append(append([]string{"verify", "--json"}, src.flags...), src.addr)...)
		if refs := mirrorRefs(t, sink); len(refs) != 0 {
			t.Errorf("%s: a failed source published %v", src.name, refs)
		}
	}

	// A config, its secrets in ${VAR}s and a header file, once by the
	// commands and then by the daemon.
	listen := freeAddr(t)
	cfgPath := filepath.Join(dir, "config.yaml")
	cfgText := fmt.Sprintf(`listen: %s
mirrors:
  - name: env-password
    source: http://alice:${FDL_TEST_PW}@%s/
    sink: %s
    schedule: "@every 1s"
  - name: header-file
    source: %s
    http_headers_file: %s
    sink: %s
    schedule: "@every 1s"
  - name: failing
    source: http://alice:${FDL_TEST_PW}@%s/missing/?token=${FDL_TEST_TOKEN}
    sink: %s
    schedule: "@every 1s"
    retries: 1
`, listen, host, filepath.Join(dir, "cfg-env"), srv.URL, headerFile, filepath.Join(dir, "cfg-file"), host, filepath.Join(dir, "cfg-failing"))
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"sync"}, {"sync", "--json"}, {"status"}, {"status", "--json"}, {"prune", "--dry-run"}, {"prune", "--dry-run", "--json"}} {
		runChecked(false, append(cmd, "--config", cfgPath)...) // the failing mirror fails them
	}
	for _, name := range []string{"env-password", "header-file"} {
		runChecked(true, "sync", "--config", cfgPath, "--mirror", name)
		runChecked(true, "status", "--config", cfgPath, "--mirror", name, "--json")
	}
	runChecked(true, "daemon", "--config", cfgPath, "--check")
	badCfg := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badCfg, []byte(`mirrors:
  - name: bad
    source: ftp://alice:${FDL_TEST_PW}@example.org/repo/?token=${FDL_TEST_TOKEN}
    sink: https://alice:`+wrong+`@example.org/mirror/?sig=${FDL_TEST_TOKEN}
    schedule: "@every 1s"
`), 0o600)
	res := runChecked(false, "daemon", "--config", badCfg, "--check")
	if !strings.Contains(res.stderr, "ftp://alice:REDACTED@example.org/repo/?token=REDACTED") {
		t.Errorf("daemon --check does not name the address redacted:\n%s", res.stderr)
	}
	runChecked(false, "sync", "--config", badCfg)

	d := startDaemon(t, cfgPath, listen)
	waitUntil(t, "a run of every mirror", 60*time.Second, func() bool {
		_, body := httpGet("http://" + listen + "/status.json")
		return strings.Count(body, `"last_run"`) == 3
	})
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reload", 30*time.Second, func() bool { return strings.Contains(d.stderr.String(), "config reloaded") })
	for _, page := range []string{"/", "/status.json", "/metrics"} {
		code, body := httpGet("http://" + listen + page)
		check("GET "+page, body)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d", page, code)
		}
	}
	// A reload of a config that does not validate logs its problems.
	badText, err := os.ReadFile(badCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, badText, 0o600); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the refused reload", 30*time.Second, func() bool { return strings.Contains(d.stderr.String(), "config reload refused") })
	if code, _ := d.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("daemon exit %d", code)
	}
	logs := d.stderr.String()
	check("the daemon's log", logs)
	if !strings.Contains(logs, "ftp://alice:REDACTED@example.org/repo/?token=REDACTED") {
		t.Errorf("the refused reload does not name the address redacted:\n%s", tail(logs, 10))
	}
	if strings.Count(logs, `"mirror scheduled"`) < 6 || !strings.Contains(logs, "http://alice:REDACTED@") {
		t.Errorf("the log lacks the mirrors scheduled at start and at SIGHUP, or their redacted addresses:\n%s", tail(logs, 40))
	}
	t.Logf("%d outputs checked", outputs)
}

// TestHTTPSUpstreamBehindAPrivateCA: a source whose certificate a CA of
// the test's own signed is mirrored with --ca-file, and refused without,
// publishing nothing.
func TestHTTPSUpstreamBehindAPrivateCA(t *testing.T) {
	up := t.TempDir()
	genCopy(t, up, generate.Options{Versions: 1})
	ca := testserver.NewCA(t)
	srv := testserver.HTTPS(t, up, ca)
	caFile := ca.WriteFile(t)

	refused := filepath.Join(t.TempDir(), "m")
	res := run(t, "sync", "--retries", "1", srv.URL, refused)
	if res.code != exitRefused || !strings.Contains(res.stdout+res.stderr, "certificate signed by unknown authority") {
		t.Fatalf("without --ca-file: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if refs := mirrorRefs(t, refused); len(refs) != 0 {
		t.Errorf("without --ca-file: published %v", refs)
	}

	sink := filepath.Join(t.TempDir(), "m")
	res = run(t, "sync", "--ca-file", caFile, srv.URL, sink)
	if res.code != exitOK {
		t.Fatalf("with --ca-file: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	fdltest.AssertMirrored(t, up, sink, nil)
	if res := run(t, "status", "--ca-file", caFile, srv.URL, sink); res.code != exitOK {
		t.Errorf("status with --ca-file: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if res := run(t, "verify", "--ca-file", caFile, srv.URL); res.code != exitOK {
		t.Errorf("verify with --ca-file: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	// A file that is no bundle is a usage error, said before any run.
	res = run(t, "sync", "--ca-file", filepath.Join(up, "refs.json"), srv.URL, filepath.Join(t.TempDir(), "m"))
	if res.code != exitUsage || !strings.Contains(res.stderr, "no PEM certificate") {
		t.Errorf("--ca-file refs.json: exit %d\n%s", res.code, res.stderr)
	}
}

// TestUpstreamStatusLineEscapesAreInert: a server whose status line
// carries terminal escapes (clear the screen, set the window title, a
// fake line) has them printed escaped, never raw.
func TestUpstreamStatusLineEscapesAreInert(t *testing.T) {
	const status = "403 Forbidden\x1b[2J\x1b]0;pwned\x07\rREFUSED fake"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Length: 0\r\n\r\n", status)
				}
			}()
		}
	}()
	src := "http://" + ln.Addr().String() + "/"
	sink := filepath.Join(t.TempDir(), "m")
	for _, args := range [][]string{{"sync", src, sink}, {"status", src, sink}, {"verify", src}, {"prune", src, sink}} {
		res := run(t, append(args, "--log-level", "error")...)
		out := res.stdout + res.stderr
		if res.code == exitOK {
			t.Errorf("%v: exit 0", args)
		}
		if strings.ContainsAny(out, "\x1b\x07\r") {
			t.Errorf("%v: control characters printed raw: %q", args, out)
		}
		if !strings.Contains(out, `403 Forbidden\x1b[2J\x1b]0;pwned\x07\rREFUSED fake`) {
			t.Errorf("%v: the status line is not shown escaped: %q", args, out)
		}
	}
}

// TestCredentialsOverPlainHTTPAreRefusedBeyondLoopback: a password or a
// header is not sent in clear text to another host without
// --http-allow-insecure-auth; the refusal says so, shows no secret, and
// nothing is published. (192.0.2.1 is TEST-NET-1: no request is made.)
func TestCredentialsOverPlainHTTPAreRefusedBeyondLoopback(t *testing.T) {
	for _, args := range [][]string{
		{"http://alice:pw-S3CRET-77@192.0.2.1/repo/"},
		{"--http-header", "Authorization: Bearer hdr-S3CRET-78", "http://192.0.2.1/repo/"},
	} {
		sink := filepath.Join(t.TempDir(), "m")
		for _, cmd := range [][]string{{"sync"}, {"status"}, {"prune"}} {
			res := run(t, append(append(cmd, args...), sink)...)
			out := res.stdout + res.stderr
			if res.code == exitOK || !strings.Contains(out, "--http-allow-insecure-auth") || strings.Contains(out, "S3CRET") {
				t.Errorf("%v: exit %d\n%s", append(cmd, args...), res.code, out)
			}
		}
		if refs := mirrorRefs(t, sink); len(refs) != 0 {
			t.Errorf("%v: published %v", args, refs)
		}
		res := run(t, append([]string{"verify"}, args...)...)
		if res.code == exitOK || !strings.Contains(res.stderr, "--http-allow-insecure-auth") {
			t.Errorf("verify %v: exit %d\n%s", args, res.code, res.stderr)
		}
	}
}
