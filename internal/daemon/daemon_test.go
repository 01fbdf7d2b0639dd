package daemon

import (
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
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// These tests drive the scheduler with a stand-in for the engine (RunFunc),
// to control how long a run takes and how it ends. The engine itself, in a
// real daemon process, is tested in cmd/fdl-mirror/daemon_test.go.

func writeConfig(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mirrorsConfig(listen string, names ...string) string {
	var b strings.Builder
	if listen != "" {
		fmt.Fprintf(&b, "listen: %s\n", listen)
	}
	b.WriteString("mirrors:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  - name: %s\n    source: /up/%s\n    sink: /down/%s\n    schedule: \"@every 1s\"\n", n, n, n)
	}
	return b.String()
}

type harness struct {
	d      *Daemon
	logs   *observer.ObservedLogs
	path   string
	cancel context.CancelFunc
	reload chan struct{}
	done   chan struct{} // closed when Serve returns
	err    error
}

func start(t *testing.T, text string, run RunFunc) *harness {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeConfig(t, path, text)
	core, logs := observer.New(zap.DebugLevel)
	d, err := New(Options{ConfigPath: path, Logger: zap.New(core), Run: run, StopTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{d: d, logs: logs, path: path, cancel: cancel, reload: make(chan struct{}), done: make(chan struct{})}
	go func() {
		h.err = d.Serve(ctx, h.reload)
		close(h.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			t.Error("daemon did not stop")
		}
	})
	return h
}

func (h *harness) stop(t *testing.T) time.Duration {
	t.Helper()
	began := time.Now()
	h.cancel()
	select {
	case <-h.done:
		if h.err != nil {
			t.Fatalf("Serve: %v", h.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not stop")
	}
	return time.Since(began)
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func okReport(job mirror.Job) *fdlsync.Report {
	return &fdlsync.Report{Source: job.Source, Sink: job.Sink, FilesCopied: 3, BytesCopied: 300,
		VersionsPublished: []string{"v1"}, RefsMoved: []fdlsync.RefMove{{Ref: "refs/heads/main", To: "v1"}}}
}

func TestATickDuringARunIsSkipped(t *testing.T) {
	var active, maxActive, calls atomic.Int32
	release := make(chan struct{})
	h := start(t, mirrorsConfig("", "slow"), func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		calls.Add(1)
		n := active.Add(1)
		defer active.Add(-1)
		for {
			m := maxActive.Load()
			if n <= m || maxActive.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return okReport(job), nil
	})
	m := h.d.Metrics()
	waitFor(t, "two skipped ticks", 10*time.Second, func() bool { return testutil.ToFloat64(m.skipped.WithLabelValues("slow")) >= 2 })
	if calls.Load() != 1 || maxActive.Load() != 1 {
		t.Errorf("%d runs started, %d at once; want 1 while the first is going", calls.Load(), maxActive.Load())
	}
	if testutil.ToFloat64(m.running.WithLabelValues("slow")) != 1 {
		t.Error("running gauge is not 1 during the run")
	}
	close(release)
	waitFor(t, "a second run after the first ended", 10*time.Second, func() bool { return calls.Load() >= 2 })
	if maxActive.Load() != 1 {
		t.Errorf("%d runs of one mirror at once", maxActive.Load())
	}
}

func TestOneMirrorsFailureDoesNotStopTheOthers(t *testing.T) {
	var good atomic.Int32
	h := start(t, mirrorsConfig("", "broken", "panics", "good"), func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		switch job.Name {
		case "broken":
			return nil, errors.New("sink /down/broken: lock held by another run")
		case "panics":
			panic("engine bug")
		}
		good.Add(1)
		return okReport(job), nil
	})
	m := h.d.Metrics()
	waitFor(t, "three runs of each mirror", 10*time.Second, func() bool {
		return testutil.ToFloat64(m.runs.WithLabelValues("broken", ResultFailed)) >= 3 &&
			testutil.ToFloat64(m.runs.WithLabelValues("panics", ResultFailed)) >= 3 &&
			testutil.ToFloat64(m.runs.WithLabelValues("good", ResultSuccess)) >= 3
	})
	if n := h.logs.FilterMessage("run panicked").Len(); n < 3 {
		t.Errorf("%d panics logged", n)
	}
	if n := h.logs.FilterMessage("run failed").FilterField(zap.String("mirror", "broken")).Len(); n < 3 {
		t.Errorf("%d failures of broken logged", n)
	}
	if testutil.ToFloat64(m.lastSuccess.WithLabelValues("good")) == 0 {
		t.Error("good has no last success")
	}
	if c := testutil.CollectAndCount(m.lastSuccess); c != 1 {
		t.Errorf("last_success has %d series; only good succeeded", c)
	}
}

func TestStopCancelsRunningSyncsAndWaitsForThem(t *testing.T) {
	started := make(chan struct{}, 1)
	var finished atomic.Bool
	h := start(t, mirrorsConfig("", "long"), func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		started <- struct{}{}
		<-ctx.Done()
		time.Sleep(200 * time.Millisecond) // reaching a safe point takes a moment
		finished.Store(true)
		return &fdlsync.Report{FilesCopied: 1}, ctx.Err()
	})
	<-started
	took := h.stop(t)
	if !finished.Load() {
		t.Error("Serve returned before the running sync stopped")
	}
	if took > 2*time.Second {
		t.Errorf("stop took %s", took)
	}
	m := h.d.Metrics()
	if got := testutil.ToFloat64(m.runs.WithLabelValues("long", ResultCanceled)); got != 1 {
		t.Errorf("canceled runs = %v", got)
	}
	if testutil.ToFloat64(m.runs.WithLabelValues("long", ResultFailed)) != 0 {
		t.Error("a canceled run counted as failed")
	}
}

func TestStopGivesUpOnASyncThatDoesNotStop(t *testing.T) {
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	h := start(t, mirrorsConfig("", "stuck"), func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		started <- struct{}{}
		<-release
		return nil, nil
	})
	<-started
	took := h.stop(t)
	if took < 3*time.Second || took > 5*time.Second {
		t.Errorf("stop took %s with a StopTimeout of 3s", took)
	}
	if h.logs.FilterMessage("syncs still running after the stop timeout; exiting anyway").Len() != 1 {
		t.Error("the abandoned sync was not logged")
	}
}

func TestReloadAppliesAGoodConfigAndKeepsTheOldOnABadOne(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	h := start(t, mirrorsConfig("", "a", "b"), func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		mu.Lock()
		seen[job.Name] = job.Source
		mu.Unlock()
		return okReport(job), nil
	})
	ran := func(name, source string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return seen[name] == source
		}
	}
	waitFor(t, "a and b", 10*time.Second, func() bool { return ran("a", "/up/a")() && ran("b", "/up/b")() })

	// b removed, c added, a changed.
	writeConfig(t, h.path, strings.Replace(mirrorsConfig("", "a", "c"), "/up/a", "/up/a2", 1))
	h.reload <- struct{}{}
	waitFor(t, "the new config", 10*time.Second, func() bool { return ran("a", "/up/a2")() && ran("c", "/up/c")() })
	m := h.d.Metrics()
	waitFor(t, "b's series removed", 5*time.Second, func() bool {
		return testutil.CollectAndCount(m.runs)%len(results) == 0 && testutil.CollectAndCount(m.runs) == 2*len(results)
	})
	mu.Lock()
	delete(seen, "b")
	mu.Unlock()
	time.Sleep(1500 * time.Millisecond)
	if ran("b", "/up/b")() {
		t.Error("b still runs after it was removed")
	}

	writeConfig(t, h.path, "mirrors:\n  - name: a\n    sorce: /x\n")
	h.reload <- struct{}{}
	waitFor(t, "the refused reload", 5*time.Second, func() bool {
		return h.logs.FilterMessage("config reload refused; keeping the config in use").Len() == 1
	})
	entry := h.logs.FilterMessage("config reload refused; keeping the config in use").All()[0]
	problems := fmt.Sprint(entry.ContextMap()["problems"])
	if !strings.Contains(problems, ":3: ") || !strings.Contains(problems, `unknown key "sorce"`) {
		t.Errorf("problems logged: %s", problems)
	}
	if got := h.d.Config().Names(); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Errorf("config in use: %v", got)
	}
	if testutil.ToFloat64(m.configSuccess) != 0 || testutil.ToFloat64(m.reloads.WithLabelValues("failed")) != 1 {
		t.Error("the refused reload is not in the metrics")
	}
	mu.Lock()
	delete(seen, "a")
	mu.Unlock()
	waitFor(t, "a still running on the old config", 5*time.Second, ran("a", "/up/a2"))
}

func TestNewRefusesAConfigWithoutSchedules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeConfig(t, path, "mirrors:\n  - name: a\n    source: /u\n    sink: /d\n    schedule: \"@hourly\"\n  - name: b\n    source: /u\n    sink: /e\n")
	_, err := New(Options{ConfigPath: path})
	if err == nil || !strings.Contains(err.Error(), path+":6: ") || !strings.Contains(err.Error(), `mirror "b": no schedule`) {
		t.Errorf("err = %v", err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPEndpointsAndMetricValues(t *testing.T) {
	addr := freePort(t)
	h := start(t, mirrorsConfig(addr, "towns", "idle"), func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		if job.Name == "idle" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
		return &fdlsync.Report{
			FilesCopied: 7, BytesCopied: 7000, Lag: 1,
			VersionsPublished: []string{"v2"},
			RefsMoved:         []fdlsync.RefMove{{Ref: "refs/heads/main", From: "v1", To: "v2"}},
			Refused: []fdlsync.Refusal{
				{Ref: "refs/tags/v1", Version: "v9", Reason: fdlsync.ReasonTagMoved},
				{Version: "v3", File: "data/x.parquet", Reason: fdlsync.ReasonMissingFile},
			},
		}, nil
	})
	base := "http://" + addr
	waitFor(t, "/healthz", 5*time.Second, func() bool { c, _ := get(t, base+"/healthz"); return c == 200 })
	if c, _ := get(t, base+"/readyz"); c != 200 {
		t.Errorf("/readyz = %d after start", c)
	}
	if c, _ := get(t, base+"/nothing"); c != 404 {
		t.Errorf("/nothing = %d", c)
	}
	m := h.d.Metrics()
	waitFor(t, "two runs of towns", 10*time.Second, func() bool {
		return testutil.ToFloat64(m.runs.WithLabelValues("towns", ResultRefused)) >= 2
	})
	c, body := get(t, base+"/metrics")
	if c != 200 {
		t.Fatalf("/metrics = %d", c)
	}
	runs := testutil.ToFloat64(m.runs.WithLabelValues("towns", ResultRefused))
	for _, want := range []string{
		`fdl_mirror_runs_total{mirror="towns",result="success"} 0`,
		`fdl_mirror_runs_total{mirror="idle",result="success"} 0`,
		`fdl_mirror_running{mirror="idle"} 1`,
		fmt.Sprintf(`fdl_mirror_files_copied_total{mirror="towns"} %v`, 7*runs),
		fmt.Sprintf(`fdl_mirror_bytes_copied_total{mirror="towns"} %v`, 7000*runs),
		fmt.Sprintf(`fdl_mirror_refs_moved_total{mirror="towns"} %v`, runs),
		fmt.Sprintf(`fdl_mirror_versions_published_total{mirror="towns"} %v`, runs),
		fmt.Sprintf(`fdl_mirror_refused_total{kind="ref",mirror="towns",reason="tag-moved"} %v`, runs),
		fmt.Sprintf(`fdl_mirror_refused_total{kind="version",mirror="towns",reason="missing-file"} %v`, runs),
		`fdl_mirror_lag_refs{mirror="towns"} 1`,
		`fdl_mirror_last_run_duration_seconds{mirror="towns"} 0.0`,
		`fdl_mirror_config_last_reload_successful 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// A refused run is not a success: no timestamp of one.
	if strings.Contains(body, "fdl_mirror_last_success_timestamp_seconds{") {
		t.Error("last success set by runs that refused")
	}
	if !strings.Contains(body, `fdl_mirror_last_run_timestamp_seconds{mirror="towns"} 1.`) {
		t.Error("no last run timestamp for towns")
	}

	h.stop(t)
	if c, _ := get(t, base+"/healthz"); c != 0 {
		t.Errorf("still serving after stop: %d", c)
	}
}

func TestResult(t *testing.T) {
	refused := &fdlsync.Report{Refused: []fdlsync.Refusal{{Reason: fdlsync.ReasonSignature}}}
	for _, c := range []struct {
		rep      *fdlsync.Report
		err      error
		canceled bool
		want     string
	}{
		{&fdlsync.Report{}, nil, false, ResultSuccess},
		{&fdlsync.Report{}, nil, true, ResultSuccess}, // finished before the stop reached it
		{refused, nil, false, ResultRefused},
		{nil, errors.New("permission denied"), false, ResultFailed},
		{nil, fmt.Errorf("sink /m: %w", lock.ErrLocked), false, ResultLocked},
		{refused, context.Canceled, true, ResultCanceled},
		{nil, context.Canceled, true, ResultCanceled},
	} {
		if got := Result(c.rep, c.err, c.canceled); got != c.want {
			t.Errorf("Result(%v, %v, %v) = %s, want %s", c.rep, c.err, c.canceled, got, c.want)
		}
	}
}
