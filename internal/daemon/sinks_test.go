package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// A mirror of two sinks, run by the daemon with the engine itself (no
// stand-in), beside a mirror of one sink. While another run holds the
// second sink's lock, each run mirrors the first sink; the second is
// named locked in the log, in its own status entry and in its series,
// and nothing of the repository is written into it. Once the lock is
// released, the next run mirrors it. Each sink has its status entry, its
// series under a `sink` label, its prune and its notification; the mirror
// of one sink keeps its entry and its series without one.
func TestDaemonRunsEachSinkOfAMirror(t *testing.T) {
	parent := t.TempDir()
	up := filepath.Join(parent, "upstream")
	repo := fdltest.Generate(t, up, generate.Options{Versions: 1, FastParquet: true})
	a, b, single := filepath.Join(parent, "a"), filepath.Join(parent, "b"), filepath.Join(parent, "single")
	held := fdltest.HoldLock(t, b, lock.Options{Owner: "the test", TTL: time.Hour})
	hook := newReceiver(t, accept)
	secret := filepath.Join(parent, "hook.secret")
	if err := os.WriteFile(secret, []byte(testSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	h := start(t, fmt.Sprintf(`mirrors:
  - name: towns
    source: %s
    sinks: [%s, %s]
    schedule: "@every 1s"
    prune: true
    notify:
      - url: %s
        secret_file: %s
  - name: single
    source: %s
    sink: %s
    schedule: "@every 1s"
`, up, a, b, hook.URL, secret, up, single), nil)

	entries := func() map[string]MirrorStatus {
		resp := serve(t, h.d.Handler(), "/status.json")
		var st struct {
			Mirrors []json.RawMessage `json:"mirrors"`
		}
		if err := json.Unmarshal([]byte(body(t, resp)), &st); err != nil {
			t.Fatal(err)
		}
		out := map[string]MirrorStatus{}
		for _, raw := range st.Mirrors {
			var ms MirrorStatus
			if err := json.Unmarshal(raw, &ms); err != nil {
				t.Fatal(err)
			}
			if ms.Mirror == "single" && strings.Contains(string(raw), `"sink_index"`) {
				t.Errorf("the mirror of one sink has a sink_index: %s", raw)
			}
			out[ms.Sink] = ms
		}
		return out
	}
	result := func(ms MirrorStatus) string {
		if ms.LastRun == nil {
			return ""
		}
		return ms.LastRun.Result
	}
	// The entries are checked as one snapshot taken between runs: the
	// schedule (every second) starts the next run of a sink at any
	// moment, and a sink is "running" while one is under way.
	var st map[string]MirrorStatus
	waitFor(t, "a run of each sink, and none under way", 60*time.Second, func() bool {
		st = entries()
		return result(st[Redact(a)]) == ResultSuccess && result(st[Redact(b)]) == ResultLocked && result(st[Redact(single)]) == ResultSuccess &&
			st[Redact(a)].State != StateRunning && st[Redact(b)].State != StateRunning
	})

	if len(st) != 3 {
		t.Fatalf("status entries %v, want one per sink of towns and one for single", st)
	}
	for sink, want := range map[string]struct {
		mirror string
		index  int
	}{Redact(a): {"towns", 1}, Redact(b): {"towns", 2}, Redact(single): {"single", 0}} {
		if got := st[sink]; got.Mirror != want.mirror || got.SinkIndex != want.index {
			t.Errorf("entry of %s: mirror %q, sink_index %d; want %q, %d", sink, got.Mirror, got.SinkIndex, want.mirror, want.index)
		}
	}
	if e := st[Redact(b)]; e.State != StateBehind || !strings.Contains(e.Error, "lock") || len(e.Refs) != 0 {
		t.Errorf("the locked sink's entry: state %q, error %q, refs %v; want behind, its lock named, no refs compared", e.State, e.Error, e.Refs)
	}
	if e := st[Redact(a)]; e.State != StateOK || e.Error != "" || len(e.Refs) == 0 || e.Lag != 0 {
		t.Errorf("the free sink's entry: state %q, error %q, refs %v, lag %d; want ok and its refs", e.State, e.Error, e.Refs, e.Lag)
	}
	fdltest.AssertMirrored(t, up, a, nil)
	fdltest.AssertMirrored(t, up, single, nil)
	for name := range fdltest.Names(t, b) {
		if !strings.HasPrefix(name, ".fdl-mirror/") {
			t.Errorf("the daemon wrote %s into the locked sink", name)
		}
	}
	locked := h.logs.FilterMessageSnippet("another run holds the sink's lock").All()
	if len(locked) == 0 {
		t.Fatal("the locked sink is not in the log")
	}
	for _, e := range locked {
		if got := e.ContextMap()["sink"]; got != Redact(b) {
			t.Errorf("a locked run is logged for sink %v, want %s", got, Redact(b))
		}
	}

	metrics := body(t, serve(t, h.d.Handler(), "/metrics"))
	for _, series := range []string{
		fmt.Sprintf(`fdl_mirror_runs_total{mirror="towns",result="success",sink=%q} `, Redact(a)),
		fmt.Sprintf(`fdl_mirror_runs_total{mirror="towns",result="locked",sink=%q} `, Redact(b)),
		fmt.Sprintf(`fdl_mirror_prunes_total{mirror="towns",result="success",sink=%q} `, Redact(a)),
		`fdl_mirror_runs_total{mirror="single",result="success"} `,
		`fdl_mirror_running{mirror="towns"} `,
	} {
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics has no %s", series)
		}
	}
	copied := map[string]string{}
	for _, line := range strings.Split(metrics, "\n") {
		for _, sink := range []string{a, b} {
			if rest, ok := strings.CutPrefix(line, fmt.Sprintf(`fdl_mirror_files_copied_total{mirror="towns",sink=%q} `, Redact(sink))); ok {
				copied[sink] = rest
			}
		}
		if strings.HasPrefix(line, `fdl_mirror_runs_total{mirror="towns",result=`) && !strings.Contains(line, "sink=") {
			t.Errorf("a series of the mirror of two sinks without its sink: %s", line)
		}
		if strings.Contains(line, `mirror="single"`) && strings.Contains(line, "sink=") {
			t.Errorf("a series of the mirror of one sink with a sink label: %s", line)
		}
	}
	if copied[a] == "" || copied[a] == "0" || copied[b] != "0" {
		t.Errorf("files copied by sink: %v; want some into %s, none into the locked %s", copied, a, b)
	}

	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Ok, no error, its refs: read in one entry, between two runs (the
	// schedule starts one every second, and a running sink says so).
	waitFor(t, "the second sink ok once its lock was released", 60*time.Second, func() bool {
		e := entries()[Redact(b)]
		return result(e) == ResultSuccess && e.State == StateOK && e.Error == "" && len(e.Refs) > 0
	})
	fdltest.AssertMirrored(t, up, b, nil)

	// Each sink's refs moved once: an event each, naming its sink.
	waitFor(t, "an event per sink", 30*time.Second, func() bool { return len(hook.requests()) >= 2 })
	named := map[string]int{}
	for _, r := range hook.requests() {
		ev := checkSigned(t, r, testSecret)
		var data RefsUpdated
		raw, _ := json.Marshal(ev.Data)
		if err := json.Unmarshal(raw, &data); err != nil || ev.Type != EventRefsUpdated {
			t.Fatalf("event %s: %v", r.body, err)
		}
		if data.Mirror != "towns" || len(data.Refs) == 0 || data.Refs[0].To != repo.Versions[0] {
			t.Errorf("event %s", r.body)
		}
		named[data.Sink]++
	}
	if len(named) != 2 || named[Redact(a)] != 1 || named[Redact(b)] != 1 {
		t.Errorf("events by sink %v, want one naming each of %s and %s", named, Redact(a), Redact(b))
	}
}

// A reload that gives a mirror a second sink, then takes its first away:
// the series and status entries follow the sinks the mirror has, and
// none is left of the sinks it no longer has, nor of the mirror's series
// without a sink label while it has several.
func TestReloadFollowsTheSinksOfAMirror(t *testing.T) {
	var mu sync.Mutex
	ran := map[string]int{}
	h := start(t, "mirrors:\n  - name: towns\n    source: /up\n    sink: /down/a\n    schedule: \"@every 1s\"\n",
		func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
			mu.Lock()
			ran[job.Sink]++
			mu.Unlock()
			return okReport(job), nil
		})
	m := h.d.Metrics()
	twins := func() int { return testutil.CollectAndCount(m.twins.counters[m.runs]) }
	ranTo := func(sink string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return ran[sink] > 0
		}
	}
	sinksShown := func() (out []string) {
		for _, e := range h.d.Status().Mirrors {
			out = append(out, fmt.Sprintf("%s#%d", e.Sink, e.SinkIndex))
		}
		return out
	}
	waitFor(t, "a run to /down/a", 10*time.Second, ranTo("/down/a"))
	if n, tw := testutil.CollectAndCount(m.runs), twins(); n != len(results) || tw != 0 {
		t.Errorf("one sink: %d series of runs_total without sink, %d with; want %d, 0", n, tw, len(results))
	}

	writeConfig(t, h.path, "mirrors:\n  - name: towns\n    source: /up\n    sinks: [/down/a, /down/b]\n    schedule: \"@every 1s\"\n")
	h.reload <- struct{}{}
	waitFor(t, "a run to /down/b", 10*time.Second, ranTo("/down/b"))
	waitFor(t, "each sink's last run", 10*time.Second, func() bool {
		st := h.d.Status()
		return len(st.Mirrors) == 2 && st.Mirrors[0].LastRun != nil && st.Mirrors[1].LastRun != nil
	})
	if got := fmt.Sprint(sinksShown()); got != "[/down/a#1 /down/b#2]" {
		t.Errorf("two sinks: status entries %s", got)
	}
	if n, tw := testutil.CollectAndCount(m.runs), twins(); n != 0 || tw != 2*len(results) {
		t.Errorf("two sinks: %d series of runs_total without sink, %d with; want 0, %d", n, tw, 2*len(results))
	}
	if got := summary(h.d.Status()); !strings.HasPrefix(got, "1 mirror, 2 sinks: ") {
		t.Errorf("page summary %q", got)
	}

	writeConfig(t, h.path, "mirrors:\n  - name: towns\n    source: /up\n    sink: /down/b\n    schedule: \"@every 1s\"\n")
	h.reload <- struct{}{}
	waitFor(t, "one sink again", 10*time.Second, func() bool { return fmt.Sprint(sinksShown()) == "[/down/b#0]" })
	if n, tw := testutil.CollectAndCount(m.runs), twins(); n != len(results) || tw != 0 {
		t.Errorf("one sink again: %d series of runs_total without sink, %d with; want %d, 0", n, tw, len(results))
	}
	h.d.board.mu.Lock()
	records := len(h.d.board.mirrors)
	h.d.board.mu.Unlock()
	if records != 1 {
		t.Errorf("the board keeps %d records of one mirror of one sink", records)
	}
}
