package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// The daemon as operators run it: the built binary, a config file, signals,
// and its HTTP endpoints on 127.0.0.1.

// lockedBuffer collects a process's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type daemonProc struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan struct{}
	code   int
	addr   string
}

func startDaemon(t *testing.T, configPath, addr string, extraArgs ...string) *daemonProc {
	t.Helper()
	p := &daemonProc{stderr: &lockedBuffer{}, exited: make(chan struct{}), addr: addr}
	p.cmd = exec.Command(binary, append([]string{"daemon", "--config", configPath, "--log-level", "debug"}, extraArgs...)...)
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		_ = err
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", tail(p.stderr.String(), 60))
		}
	})
	waitUntil(t, "/readyz to answer 200", 30*time.Second, func() bool {
		code, _ := httpGet("http://" + addr + "/readyz")
		return code == http.StatusOK
	})
	return p
}

// stop sends sig and returns the exit code and how long the exit took.
func (p *daemonProc) stop(t *testing.T, sig syscall.Signal) (int, time.Duration) {
	t.Helper()
	began := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("daemon still running 30 s after %v", sig)
	}
	return p.code, time.Since(began)
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrape reads /metrics into series → value ("name{labels}" as printed).
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	code, body := httpGet("http://" + addr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type testMirror struct{ name, up, sink string }

func writeDaemonConfig(t *testing.T, path, listen string, mirrors ...testMirror) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nmirrors:\n", listen)
	for _, m := range mirrors {
		fmt.Fprintf(&b, "  - name: %s\n    source: %s\n    sink: %q\n    schedule: \"@every 1s\"\n    concurrency: 2\n", m.name, m.up, m.sink)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// assertCopiedOnce checks that the mirror's counters add up to what the
// mirror holds: every file copied once over all runs, none rewritten. The
// sink's fdl.json is created rather than copied; either count is accepted.
func assertCopiedOnce(t *testing.T, m map[string]float64, name, sink string) {
	t.Helper()
	files := fdltest.Files(t, sink)
	var total float64
	for _, b := range files {
		total += float64(len(b))
	}
	settings := float64(len(files["fdl.json"]))
	n := float64(len(files))
	gotFiles := m[fmt.Sprintf(`fdl_mirror_files_copied_total{mirror="%s"}`, name)]
	gotBytes := m[fmt.Sprintf(`fdl_mirror_bytes_copied_total{mirror="%s"}`, name)]
	if (gotFiles != n && gotFiles != n-1) || (gotBytes != total && gotBytes != total-settings) {
		t.Errorf("%s: metrics say %v files, %v bytes copied; the mirror holds %v files, %v bytes (fdl.json %v)",
			name, gotFiles, gotBytes, n, total, settings)
	}
}

func mirrorRefs(t *testing.T, dir string) map[string]string {
	t.Helper()
	refs := map[string]string{}
	if _, err := os.Stat(dir); err != nil {
		return refs
	}
	for name, b := range fdltest.Files(t, dir) {
		if strings.HasPrefix(name, "refs/") {
			refs[name] = strings.TrimSpace(string(b))
		}
	}
	return refs
}

func TestDaemonMirrorsOnSchedulesFollowsUpstreamAndReloads(t *testing.T) {
	parent := t.TempDir()
	a := testMirror{"alpha", filepath.Join(parent, "up-alpha"), filepath.Join(parent, "mirror-alpha")}
	b := testMirror{"beta", filepath.Join(parent, "up-beta"), filepath.Join(parent, "mirror-beta")}
	optsA := generate.Options{Versions: 2}
	repoA := gen(t, a.up, optsA)
	repoB := gen(t, b.up, generate.Options{Versions: 2, Tags: true, Seed: 7})
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, addr, a, b)

	// Before the daemon: behind on every ref.
	res := run(t, "status", "--config", configPath)
	if res.code != 1 || strings.Count(res.stdout, "behind") != 2+len(repoA.Refs)+len(repoB.Refs) {
		t.Fatalf("status before mirroring: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}

	d := startDaemon(t, configPath, addr)
	for _, m := range []struct {
		testMirror
		repo *generate.Repo
	}{{a, repoA}, {b, repoB}} {
		waitUntil(t, m.name+" mirrored", 60*time.Second, func() bool {
			return fmt.Sprint(mirrorRefs(t, m.sink)) == fmt.Sprint(m.repo.Refs)
		})
	}
	// The refs are in place before refs.json and HEAD: wait for the runs
	// to end (the metrics are set then) before comparing whole trees.
	var metrics map[string]float64
	waitUntil(t, "a success of both mirrors in /metrics", 10*time.Second, func() bool {
		metrics = scrape(t, addr)
		_, okA := metrics[`fdl_mirror_last_success_timestamp_seconds{mirror="alpha"}`]
		_, okB := metrics[`fdl_mirror_last_success_timestamp_seconds{mirror="beta"}`]
		return okA && okB
	})
	fdltest.AssertMirrored(t, a.up, a.sink, nil)
	fdltest.AssertMirrored(t, b.up, b.sink, nil)

	res = run(t, "status", "--config", configPath)
	if res.code != 0 || strings.Contains(res.stdout, "behind") {
		t.Errorf("status after mirroring: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	for _, m := range []struct {
		testMirror
		refs int
	}{{a, len(repoA.Refs)}, {b, len(repoB.Refs)}} {
		l := fmt.Sprintf(`{mirror="%s"}`, m.name)
		if ts := metrics["fdl_mirror_last_success_timestamp_seconds"+l]; time.Since(time.Unix(int64(ts), 0)) > time.Minute {
			t.Errorf("%s: last success at %v", m.name, ts)
		}
		if metrics[fmt.Sprintf(`fdl_mirror_runs_total{mirror="%s",result="success"}`, m.name)] < 1 {
			t.Errorf("%s: no successful run counted", m.name)
		}
		if got := metrics["fdl_mirror_refs_moved_total"+l]; got != float64(m.refs) {
			t.Errorf("%s: refs moved %v, want %d (each ref once)", m.name, got, m.refs)
		}
		if got, ok := metrics["fdl_mirror_lag_refs"+l]; !ok || got != 0 {
			t.Errorf("%s: lag %v (present %v)", m.name, got, ok)
		}
		if _, ok := metrics["fdl_mirror_last_run_duration_seconds"+l]; !ok {
			t.Errorf("%s: no last run duration", m.name)
		}
		assertCopiedOnce(t, metrics, m.name, m.sink)
	}
	if metrics[`fdl_mirror_versions_published_total{mirror="alpha"}`] != float64(len(repoA.Versions)) {
		t.Errorf("alpha: versions published %v, want %d", metrics[`fdl_mirror_versions_published_total{mirror="alpha"}`], len(repoA.Versions))
	}

	// An upstream change is followed at the next tick.
	filesBefore := fdltest.Files(t, a.sink)
	metricsBefore := metrics
	id, err := generate.AddVersion(context.Background(), a.up, 3, optsA)
	if err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	waitUntil(t, "the new upstream version in the mirror", 30*time.Second, func() bool {
		return readRef(t, a.sink, generate.MainRef) == id
	})
	t.Logf("new upstream version mirrored %s after it was made", time.Since(added).Round(time.Millisecond))
	waitUntil(t, "the move in /metrics", 10*time.Second, func() bool {
		metrics = scrape(t, addr)
		return metrics[`fdl_mirror_refs_moved_total{mirror="alpha"}`] == float64(len(repoA.Refs)+1)
	})
	fdltest.AssertMirrored(t, a.up, a.sink, nil)
	if p := fdltest.Complete(t, a.sink); len(p) > 0 {
		t.Errorf("incomplete: %v", p)
	}
	// The counters grew by the new files (data and version directory),
	// plus the ref files rewritten (the moved ref, refs.json, HEAD at most).
	var newFiles, newBytes, mutableFiles, mutableBytes float64
	for name, b := range fdltest.Files(t, a.sink) {
		if _, old := filesBefore[name]; !old {
			newFiles++
			newBytes += float64(len(b))
		} else if name == "HEAD" || name == "refs.json" || strings.HasPrefix(name, "refs/") {
			mutableFiles++
			mutableBytes += float64(len(b))
		}
	}
	dFiles := metrics[`fdl_mirror_files_copied_total{mirror="alpha"}`] - metricsBefore[`fdl_mirror_files_copied_total{mirror="alpha"}`]
	dBytes := metrics[`fdl_mirror_bytes_copied_total{mirror="alpha"}`] - metricsBefore[`fdl_mirror_bytes_copied_total{mirror="alpha"}`]
	if dFiles < newFiles || dFiles > newFiles+mutableFiles || dBytes < newBytes || dBytes > newBytes+mutableBytes {
		t.Errorf("following one version: metrics grew by %v files, %v bytes; the mirror gained %v files, %v bytes (and holds %v ref files of %v bytes)",
			dFiles, dBytes, newFiles, newBytes, mutableFiles, mutableBytes)
	}
	if d := metrics[`fdl_mirror_versions_published_total{mirror="alpha"}`] - metricsBefore[`fdl_mirror_versions_published_total{mirror="alpha"}`]; d != 1 {
		t.Errorf("versions published grew by %v, want 1", d)
	}

	// SIGHUP with a third mirror: it is mirrored too.
	c := testMirror{"gamma", filepath.Join(parent, "up-gamma"), filepath.Join(parent, "mirror-gamma")}
	repoC := gen(t, c.up, generate.Options{Versions: 1, Seed: 3})
	writeDaemonConfig(t, configPath, addr, a, b, c)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "gamma mirrored after SIGHUP", 30*time.Second, func() bool {
		return readRef(t, c.sink, generate.MainRef) == repoC.Versions[0]
	})

	// SIGHUP with a broken config: logged with its line, the old one kept.
	os.WriteFile(configPath, []byte("listen: "+addr+"\nmirrors:\n  - name: alpha\n    source: "+a.up+"\n    sink: "+a.sink+"\n    schedule: sometimes\n"), 0o644)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the refused reload in the log", 10*time.Second, func() bool {
		return strings.Contains(d.stderr.String(), "config reload refused")
	})
	if !strings.Contains(d.stderr.String(), configPath+":6: mirrors[0].schedule") {
		t.Errorf("the refused reload does not name the line of the bad schedule")
	}
	before := scrape(t, addr)[`fdl_mirror_last_run_timestamp_seconds{mirror="gamma"}`]
	waitUntil(t, "gamma still scheduled", 10*time.Second, func() bool {
		return scrape(t, addr)[`fdl_mirror_last_run_timestamp_seconds{mirror="gamma"}`] > before
	})
	if m := scrape(t, addr); m["fdl_mirror_config_last_reload_successful"] != 0 {
		t.Error("the refused reload is not in /metrics")
	}
	if code, _ := httpGet("http://" + addr + "/readyz"); code != 200 {
		t.Errorf("/readyz %d after a refused reload", code)
	}

	code, took := d.stop(t, syscall.SIGTERM)
	if code != 0 || took > 15*time.Second {
		t.Errorf("SIGTERM: exit %d after %s", code, took)
	}
	for _, m := range []testMirror{a, b, c} {
		if res := run(t, "verify", m.sink); res.code != 0 {
			t.Errorf("verify %s: exit %d\n%s%s", m.name, res.code, res.stdout, res.stderr)
		}
	}
}

// SIGTERM while a large sync is copying: the daemon exits 0 within 15 s,
// every ref in the mirror points at a complete version, and a later sync
// finishes the mirror.
func TestDaemonStopsALargeSyncAtASafePointOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("large sync skipped in -short mode")
	}
	parent := t.TempDir()
	m := testMirror{"large", filepath.Join(parent, "upstream"), filepath.Join(parent, "mirror")}
	// A mirror that already holds refs (two versions, two tags), and an
	// upstream that has moved on by six large versions since.
	opts := generate.Options{Versions: 2, FilesPerVersion: 300, RowsPerFile: 10, FastParquet: true, Tags: true}
	repo := gen(t, m.up, opts)
	if res := run(t, "sync", m.up, m.sink); res.code != 0 {
		t.Fatalf("first sync: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	before := mirrorRefs(t, m.sink)
	for i := 0; i < 6; i++ {
		id, err := generate.AddVersion(context.Background(), m.up, 300, opts)
		if err != nil {
			t.Fatal(err)
		}
		repo.Versions = append(repo.Versions, id)
	}
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, addr, m)

	d := startDaemon(t, configPath, addr)
	dataDir := filepath.Join(m.sink, "data", generate.SchemaName, generate.TableName)
	have := 0
	if entries, err := os.ReadDir(dataDir); err == nil {
		have = len(entries)
	}
	waitUntil(t, "the sync to be copying", 30*time.Second, func() bool {
		entries, _ := os.ReadDir(dataDir)
		return len(entries) >= have+10
	})
	code, took := d.stop(t, syscall.SIGTERM)
	copied := len(fdltest.Files(t, m.sink))
	t.Logf("SIGTERM with %d of %d files mirrored: exit %d after %s", copied, len(fdltest.Files(t, m.up)), code, took.Round(time.Millisecond))
	if code != 0 || took > 15*time.Second {
		t.Errorf("exit %d after %s, want 0 within 15 s", code, took)
	}
	log := d.stderr.String()
	if !strings.Contains(log, `"result":"canceled"`) {
		t.Fatalf("the run was not stopped by the signal (it finished first, or failed): make the upstream larger\n%s", tail(log, 20))
	}
	if got := readRef(t, m.sink, generate.MainRef); got == repo.Versions[len(repo.Versions)-1] && copied == len(fdltest.Files(t, m.up)) {
		t.Fatal("the mirror is complete: SIGTERM came too late to test anything")
	}
	if p := fdltest.Complete(t, m.sink); len(p) > 0 {
		t.Fatalf("refs to incomplete versions after SIGTERM: %v", p)
	}
	after := mirrorRefs(t, m.sink)
	for ref, id := range before {
		if after[ref] == "" {
			t.Errorf("ref %s (%s) lost by the stop", ref, id)
		}
	}
	if res := run(t, "verify", m.sink); res.code != 0 {
		t.Fatalf("verify after SIGTERM: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res := run(t, "status", m.up, m.sink)
	if res.code != 1 {
		t.Errorf("status of the interrupted mirror: exit %d, want 1 (behind)\n%s", res.code, res.stdout)
	}
	if res := run(t, "sync", m.up, m.sink); res.code != 0 {
		t.Fatalf("sync after the stop: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	fdltest.AssertMirrored(t, m.up, m.sink, nil)
	if res := run(t, "status", m.up, m.sink); res.code != 0 {
		t.Errorf("status after the final sync: exit %d\n%s", res.code, res.stdout)
	}
}

func TestSyncConfigRunsTheConfiguredMirrorsOnce(t *testing.T) {
	parent := t.TempDir()
	a := testMirror{"alpha", filepath.Join(parent, "up-alpha"), filepath.Join(parent, "mirror-alpha")}
	b := testMirror{"beta", filepath.Join(parent, "up-beta"), filepath.Join(parent, "mirror-beta")}
	gen(t, a.up, generate.Options{Versions: 1})
	gen(t, b.up, generate.Options{Versions: 2, Seed: 5})
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, "127.0.0.1:0", a, b)

	res := run(t, "sync", "--config", configPath, "--mirror", "beta")
	if res.code != 0 || !strings.Contains(res.stdout, "beta: ") || strings.Contains(res.stdout, "alpha") {
		t.Fatalf("sync --mirror beta: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	fdltest.AssertMirrored(t, b.up, b.sink, nil)
	if _, err := os.Stat(a.sink); !os.IsNotExist(err) {
		t.Errorf("alpha's sink was touched by sync --mirror beta: %v", err)
	}

	res = run(t, "sync", "--config", configPath, "--json")
	if res.code != 0 {
		t.Fatalf("sync --config: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	dec := json.NewDecoder(strings.NewReader(res.stdout))
	var names []string
	for dec.More() {
		var out struct {
			Mirror      string `json:"mirror"`
			OK          bool   `json:"ok"`
			FilesCopied int64  `json:"files_copied"`
		}
		if err := dec.Decode(&out); err != nil {
			t.Fatalf("sync --config --json: %v\n%s", err, res.stdout)
		}
		if !out.OK || (out.Mirror == "beta") != (out.FilesCopied == 0) {
			t.Errorf("%s: ok %v, %d files copied (beta was mirrored already)", out.Mirror, out.OK, out.FilesCopied)
		}
		names = append(names, out.Mirror)
	}
	if fmt.Sprint(names) != "[alpha beta]" {
		t.Errorf("mirrors run: %v", names)
	}
	fdltest.AssertMirrored(t, a.up, a.sink, nil)

	res = run(t, "sync", "--config", configPath, "--mirror", "gamma")
	if res.code != 2 || !strings.Contains(res.stderr, `no mirror "gamma"`) {
		t.Errorf("unknown mirror: exit %d\n%s", res.code, res.stderr)
	}
	os.WriteFile(configPath, []byte("mirrors:\n  - name: alpha\n    source: "+a.up+"\n    snk: /x\n"), 0o644)
	for _, cmd := range [][]string{{"sync", "--config", configPath}, {"status", "--config", configPath}, {"daemon", "--config", configPath}} {
		res = run(t, cmd...)
		if res.code != 2 || !strings.Contains(res.stderr, configPath+":4: ") || !strings.Contains(res.stderr, `unknown key "snk"`) ||
			!strings.Contains(res.stderr, configPath+":2: mirror \"alpha\": no sink") {
			t.Errorf("%s with a bad config: exit %d\n%s", cmd[0], res.code, res.stderr)
		}
	}
}

// A sync whose source cannot be opened is not the end of the others: the
// exit code is the worst, the other mirror is mirrored.
func TestSyncConfigGoesOnAfterAFailedMirror(t *testing.T) {
	parent := t.TempDir()
	bad := testMirror{"broken", filepath.Join(parent, "nothing-here"), filepath.Join(parent, "mirror-broken")}
	good := testMirror{"good", filepath.Join(parent, "up-good"), filepath.Join(parent, "mirror-good")}
	genCopy(t, good.up, generate.Options{Versions: 1})
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, "127.0.0.1:0", bad, good)
	res := run(t, "sync", "--config", configPath)
	if res.code == 0 || !strings.Contains(res.stdout+res.stderr, "nothing-here") {
		t.Errorf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	fdltest.AssertMirrored(t, good.up, good.sink, nil)
}

// A run that finds the sink locked by another run (a manual sync) writes
// nothing, is counted as locked rather than failed, and the next tick after
// the lock is released mirrors.
func TestDaemonWaitsForAMirrorLockedByAnotherRun(t *testing.T) {
	parent := t.TempDir()
	m := testMirror{"held", filepath.Join(parent, "upstream"), filepath.Join(parent, "mirror")}
	repo := gen(t, m.up, generate.Options{Versions: 1})
	held := fdltest.HoldLock(t, m.sink, lock.Options{Owner: "the test"})
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, addr, m)
	d := startDaemon(t, configPath, addr)

	waitUntil(t, "two locked runs", 20*time.Second, func() bool {
		return scrape(t, addr)[`fdl_mirror_runs_total{mirror="held",result="locked"}`] >= 2
	})
	metrics := scrape(t, addr)
	if metrics[`fdl_mirror_runs_total{mirror="held",result="failed"}`] != 0 {
		t.Error("a locked sink counted as a failure")
	}
	if len(mirrorRefs(t, m.sink)) != 0 || len(published(t, m.sink)) != 0 {
		t.Fatal("the daemon wrote into a locked mirror")
	}
	lockedLines := 0
	for _, line := range strings.Split(d.stderr.String(), "\n") {
		if strings.Contains(line, "another run holds the sink's lock") {
			lockedLines++
			// Replicas meet on locks at every tick: nothing to warn about.
			if !strings.Contains(line, `"level":"info"`) {
				t.Errorf("a locked sink is logged above info: %s", line)
			}
		}
	}
	if lockedLines == 0 {
		t.Error("the locked sink is not in the log")
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the mirror after the lock was released", 20*time.Second, func() bool {
		return readRef(t, m.sink, generate.MainRef) == repo.Versions[0]
	})
	if code, took := d.stop(t, syscall.SIGTERM); code != 0 || took > 15*time.Second {
		t.Errorf("SIGTERM: exit %d after %s", code, took)
	}
}
