package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// runOnTerminal runs fdl-mirror with a pseudo-terminal as stdout and stderr,
// through util-linux's script(1), and returns what the terminal received.
func runOnTerminal(t *testing.T, args ...string) string {
	t.Helper()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) not installed (util-linux): no pseudo-terminal to test the terminal output on")
	}
	line := binary
	for _, a := range args {
		line += " '" + a + "'"
	}
	out, err := exec.Command(script, "-qec", line, "/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	return string(out)
}

func TestProgressAndConsoleLogsOnATerminalOnly(t *testing.T) {
	parent := t.TempDir()
	up := filepath.Join(parent, "upstream")
	gen(t, up, generate.Options{Versions: 2, FilesPerVersion: 150, RowsPerFile: 10, FastParquet: true})

	out := runOnTerminal(t, "sync", "--concurrency", "2", up, filepath.Join(parent, "tty"))
	progress := regexp.MustCompile(`\r\x1b\[K\d+ files, [0-9.]+ [KMG]?i?B, [0-9.]+ [KMG]?i?B/s`)
	if !progress.MatchString(out) {
		t.Errorf("no progress line on the terminal:\n%q", tail(out, 5))
	}
	if !strings.Contains(out, "\tINFO\tversion published\t") {
		t.Errorf("logs on a terminal are not in console format:\n%q", tail(out, 5))
	}

	// --json: machine output, JSON logs, no progress, even on a terminal.
	out = runOnTerminal(t, "sync", "--json", up, filepath.Join(parent, "json"))
	if progress.MatchString(out) || strings.Contains(out, "\x1b[K") {
		t.Errorf("progress shown in JSON mode:\n%q", tail(out, 5))
	}
	if !strings.Contains(out, `"msg":"version published"`) {
		t.Errorf("logs not JSON with --json:\n%q", tail(out, 5))
	}

	// Not a terminal: no progress, JSON logs.
	res := run(t, "sync", up, filepath.Join(parent, "pipe"))
	if res.code != 0 || strings.Contains(res.stderr, "\x1b[K") || !strings.Contains(res.stderr, `"msg":"version published"`) {
		t.Errorf("sync to a pipe: exit %d, stderr:\n%s", res.code, tail(res.stderr, 5))
	}
}

func TestDaemonUsageErrors(t *testing.T) {
	parent := t.TempDir()
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, "127.0.0.1:0", testMirror{"alpha", filepath.Join(parent, "u"), filepath.Join(parent, "m")})
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"daemon"}, 2, "usage: fdl-mirror daemon"},
		{[]string{"daemon", "--config", configPath, "--log-level", "loud"}, 2, "--log-level"},
		{[]string{"daemon", "--config", filepath.Join(parent, "none.yaml")}, 2, "none.yaml"},
		{[]string{"daemon", "--config", configPath, "--check"}, 0, "valid; mirrors: [alpha]"},
		{[]string{"status"}, 2, "usage: fdl-mirror status"},
		{[]string{"status", "--config", configPath, "a", "b"}, 2, "usage: fdl-mirror status"},
	} {
		res := run(t, c.args...)
		if res.code != c.code || !strings.Contains(res.stdout+res.stderr, c.out) {
			t.Errorf("%v: exit %d, want %d with %q\n%s%s", c.args, res.code, c.code, c.out, res.stdout, res.stderr)
		}
	}
}
