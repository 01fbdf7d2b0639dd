package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// A publisher's trigger and a subscriber's notifications, through the
// daemon as operators run it.

const (
	triggerToken = "publisher-token-5f0c2a9e1b7d4c38"
	wrongToken   = "guessed-token-00000000000000000"
	hookSecret   = "receiver-secret-8e2d41f0a6b93c75"
)

// secretFile writes a secret file readable by its owner only.
func secretFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// triggerConfig writes a config of hourly mirrors (no tick comes during a
// test) with the trigger on and every mirror notifying hooks.
func triggerConfig(t *testing.T, path, listen string, hooks []string, mirrors ...testMirror) {
	t.Helper()
	dir := filepath.Dir(path)
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\ntrigger_token_file: %s\n", listen, secretFile(t, dir, "trigger.token", triggerToken))
	if len(hooks) > 0 {
		secret := secretFile(t, dir, "hook.secret", hookSecret)
		b.WriteString("notify:\n")
		for _, h := range hooks {
			fmt.Fprintf(&b, "  - url: %s\n    secret_file: %s\n", h, secret)
		}
	}
	b.WriteString("mirrors:\n")
	for _, m := range mirrors {
		fmt.Fprintf(&b, "  - name: %s\n    source: %s\n    sink: %s\n    schedule: \"@every 1h\"\n", m.name, m.up, m.sink)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// trigger posts to the trigger endpoint with an Authorization header
// (none when auth is "").
func trigger(t *testing.T, method, addr, mirror, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+"/mirrors/"+mirror+"/sync", nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s trigger: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// event is a notification as a receiver decodes it.
type event struct {
	SpecVersion string    `json:"specversion"`
	Type        string    `json:"type"`
	Source      string    `json:"source"`
	ID          string    `json:"id"`
	Time        time.Time `json:"time"`
	Data        struct {
		Mirror string `json:"mirror"`
		Sink   string `json:"sink"`
		Refs   []struct {
			Ref, From, To, Author, Message string
		} `json:"refs"`
	} `json:"data"`
}

// hookReceiver is a subscriber on 127.0.0.1: it checks each request's
// signature as docs/deploy.md tells receivers to, and keeps the events.
type hookReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	events []event
	raw    [][]byte
	bad    []string // what was wrong with a request
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	h := &hookReceiver{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(hookSecret))
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		h.mu.Lock()
		defer h.mu.Unlock()
		var ev event
		switch {
		case !hmac.Equal([]byte(r.Header.Get("X-Fdl-Mirror-Signature")), []byte(want)):
			h.bad = append(h.bad, "bad signature "+r.Header.Get("X-Fdl-Mirror-Signature"))
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		case r.Header.Get("Content-Type") != "application/cloudevents+json":
			h.bad = append(h.bad, "Content-Type "+r.Header.Get("Content-Type"))
		case !json.Valid(body):
			h.bad = append(h.bad, "not JSON: "+string(body))
		}
		json.Unmarshal(body, &ev) // a refusal's refs are names: decoded from raw
		h.events = append(h.events, ev)
		h.raw = append(h.raw, body)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookReceiver) received() ([]event, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]event(nil), h.events...), append([]string(nil), h.bad...)
}

// mirrorStatus reads one mirror's entry of /status.json.
type mirrorStatus struct {
	State string `json:"state"`
	Lag   int    `json:"lag"`
	Refs  []struct {
		Ref, State string
	} `json:"refs"`
	LastRun *struct {
		Result string `json:"result"`
	} `json:"last_run"`
	LastTrigger *struct {
		Result string `json:"result"`
	} `json:"last_trigger"`
}

func mirrorStatusOf(t *testing.T, addr, name string) mirrorStatus {
	t.Helper()
	code, body := httpGet("http://" + addr + "/status.json")
	var st struct {
		Mirrors []struct {
			Mirror string `json:"mirror"`
			mirrorStatus
		} `json:"mirrors"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("/status.json: %d %s", code, body)
	}
	for _, m := range st.Mirrors {
		if m.Mirror == name {
			return m.mirrorStatus
		}
	}
	t.Fatalf("/status.json has no mirror %s: %s", name, body)
	return mirrorStatus{}
}

// current says whether the mirror's last run ended clean with every one
// of want refs current.
func (s mirrorStatus) current(want int) bool {
	if s.State != "ok" || s.Lag != 0 || len(s.Refs) != want {
		return false
	}
	for _, r := range s.Refs {
		if r.State != "current" {
			return false
		}
	}
	return true
}

// recordText is a record's author and message, as the mirror holds it.
func recordText(t *testing.T, sink, id string) (author, message string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sink, "versions", id, "version.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Author, Message string }
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Author, rec.Message
}

func TestTriggerMakesAnHourlyMirrorCurrentAndNotifiesEveryMove(t *testing.T) {
	parent := t.TempDir()
	m := testMirror{"towns", filepath.Join(parent, "upstream"), filepath.Join(parent, "mirror")}
	opts := generate.Options{Versions: 2, Tags: true}
	repo := gen(t, m.up, opts)
	hook := newHookReceiver(t)
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	triggerConfig(t, configPath, addr, []string{hook.URL + "/fdl"}, m)
	d := startDaemon(t, configPath, addr)

	// Refused triggers start nothing.
	for _, c := range []struct {
		method, mirror, auth string
		code                 int
	}{
		{"POST", "towns", "", http.StatusUnauthorized},
		{"POST", "towns", "Bearer " + wrongToken, http.StatusUnauthorized},
		{"POST", "nowhere", "Bearer " + triggerToken, http.StatusNotFound},
		{"GET", "towns", "Bearer " + triggerToken, http.StatusMethodNotAllowed},
	} {
		if code, body := trigger(t, c.method, addr, c.mirror, c.auth); code != c.code {
			t.Errorf("%s %s with %q: %d %s, want %d", c.method, c.mirror, c.auth, code, body, c.code)
		}
	}
	time.Sleep(300 * time.Millisecond) // a run, had one started, would be going now
	if st := mirrorStatusOf(t, addr, "towns"); st.LastRun != nil || st.State != "pending" || len(mirrorRefs(t, m.sink)) != 0 {
		t.Fatalf("refused triggers ran the mirror: status %+v, refs %v", st, mirrorRefs(t, m.sink))
	}

	// The right token: current in seconds, not at the next hourly tick.
	began := time.Now()
	code, body := trigger(t, "POST", addr, "towns", "Bearer "+triggerToken)
	if code != http.StatusAccepted || strings.TrimSpace(body) != `{"mirror":"towns","state":"running"}` {
		t.Fatalf("trigger: %d %s", code, body)
	}
	waitUntil(t, "the mirror current after the trigger", 10*time.Second, func() bool {
		return mirrorStatusOf(t, addr, "towns").current(len(repo.Refs))
	})
	t.Logf("mirror current %s after the trigger", time.Since(began).Round(time.Millisecond))
	if fmt.Sprint(mirrorRefs(t, m.sink)) != fmt.Sprint(repo.Refs) {
		t.Fatalf("mirror refs %v, upstream %v", mirrorRefs(t, m.sink), repo.Refs)
	}

	// The receiver hears of every ref, each from nothing to its version.
	waitUntil(t, "the first event", 10*time.Second, func() bool { evs, _ := hook.received(); return len(evs) >= 1 })
	evs, bad := hook.received()
	if len(bad) > 0 || len(evs) != 1 {
		t.Fatalf("events %+v, bad requests %v", evs, bad)
	}
	checkRefsEvent(t, evs[0], m, func(ref string) (string, string) { return "", repo.Refs[ref] }, len(repo.Refs))

	// A new version upstream, and its tag, a trigger: main's move and the
	// new tag.
	old := repo.Refs[generate.MainRef]
	id, err := generate.AddVersion(context.Background(), m.up, 2, opts)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := trigger(t, "POST", addr, "towns", "Bearer "+triggerToken); code != http.StatusAccepted {
		t.Fatalf("second trigger: %d %s", code, body)
	}
	waitUntil(t, "the new version in the mirror", 10*time.Second, func() bool { return readRef(t, m.sink, generate.MainRef) == id })
	waitUntil(t, "the second event", 10*time.Second, func() bool { evs, _ := hook.received(); return len(evs) >= 2 })
	evs, bad = hook.received()
	if len(bad) > 0 || len(evs) != 2 {
		t.Fatalf("events %+v, bad requests %v", evs, bad)
	}
	checkRefsEvent(t, evs[1], m, func(ref string) (string, string) {
		if ref == generate.MainRef {
			return old, id
		}
		return "", id
	}, 2)
	if evs[1].Data.Refs[0].Ref != generate.MainRef || !strings.HasPrefix(evs[1].Data.Refs[1].Ref, "refs/tags/") || evs[0].ID == evs[1].ID {
		t.Errorf("second event: %+v (first id %s)", evs[1], evs[0].ID)
	}

	// Counted, shown, and the token nowhere.
	metrics := scrape(t, addr)
	hookLabel := strings.TrimSuffix(hook.URL, "/")
	for series, want := range map[string]float64{
		`fdl_mirror_triggers_total{mirror="towns",result="started"}`:                    2,
		`fdl_mirror_triggers_total{mirror="towns",result="unauthorized"}`:               2,
		`fdl_mirror_triggers_total{mirror="(unknown)",result="unknown-mirror"}`:         1,
		`fdl_mirror_runs_total{mirror="towns",result="success"}`:                        2,
		`fdl_mirror_notifications_total{result="delivered",target="` + hookLabel + `"}`: 2,
	} {
		if metrics[series] != want {
			t.Errorf("%s = %v, want %v", series, metrics[series], want)
		}
	}
	if st := mirrorStatusOf(t, addr, "towns"); st.LastTrigger == nil || st.LastTrigger.Result != "started" {
		t.Errorf("status page's last trigger: %+v", st.LastTrigger)
	}
	_, page := httpGet("http://" + addr + "/")
	if !strings.Contains(page, "Last trigger") {
		t.Error("the status page does not show the last trigger")
	}
	_, metricsText := httpGet("http://" + addr + "/metrics")
	_, statusJSON := httpGet("http://" + addr + "/status.json")
	code, _ = d.stop(t, syscall.SIGTERM)
	if code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	everything := d.stderr.String() + page + metricsText + statusJSON
	for _, secret := range []string{triggerToken, wrongToken, hookSecret} {
		if strings.Contains(everything, secret) {
			t.Errorf("%q is in the logs, the metrics or the status page", secret)
		}
	}
}

// checkRefsEvent checks a refs.updated event against the mirror: want
// gives each ref's from and to; n is the number of refs.
func checkRefsEvent(t *testing.T, ev event, m testMirror, want func(ref string) (from, to string), n int) {
	t.Helper()
	if ev.SpecVersion != "1.0" || ev.Type != "org.fdl.mirror.refs.updated" || ev.Source != m.name || ev.ID == "" ||
		time.Since(ev.Time) > time.Minute || ev.Data.Mirror != m.name || ev.Data.Sink != m.sink {
		t.Errorf("event attributes: %+v", ev)
	}
	if len(ev.Data.Refs) != n {
		t.Fatalf("event names %d refs, want %d: %+v", len(ev.Data.Refs), n, ev.Data.Refs)
	}
	for _, r := range ev.Data.Refs {
		from, to := want(r.Ref)
		author, message := recordText(t, m.sink, to)
		if r.From != from || r.To != to || r.Author != author || r.Message != message || message == "" {
			t.Errorf("ref %s: %+v; want from %q to %q, author %q, message %q", r.Ref, r, from, to, author, message)
		}
	}
}

// gatedHTTP serves a repository over HTTP, holding every request while
// the gate is shut.
type gatedHTTP struct {
	URL     string
	files   *testserver.HTTPServer
	shut    atomic.Bool
	open    chan struct{}
	waiting atomic.Int32
}

func newGatedHTTP(t *testing.T, dir string) *gatedHTTP {
	g := &gatedHTTP{files: testserver.HTTP(t, dir), open: make(chan struct{})}
	g.shut.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.shut.Load() {
			g.waiting.Add(1)
			<-g.open
		}
		g.files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(g.release)
	g.URL = srv.URL + "/"
	return g
}

func (g *gatedHTTP) release() {
	if g.shut.CompareAndSwap(true, false) {
		close(g.open)
	}
}

func TestTriggersDuringARunLeadToOneMoreRun(t *testing.T) {
	parent := t.TempDir()
	up := filepath.Join(parent, "upstream")
	repo := gen(t, up, generate.Options{Versions: 1})
	src := newGatedHTTP(t, up)
	m := testMirror{"towns", src.URL, filepath.Join(parent, "mirror")}
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	triggerConfig(t, configPath, addr, nil, m)
	startDaemon(t, configPath, addr)

	if code, body := trigger(t, "POST", addr, "towns", "Bearer "+triggerToken); code != http.StatusAccepted || !strings.Contains(body, `"running"`) {
		t.Fatalf("trigger: %d %s", code, body)
	}
	waitUntil(t, "the run to wait on the upstream", 10*time.Second, func() bool { return src.waiting.Load() > 0 })
	answers := map[string]int{}
	for i := 0; i < 10; i++ {
		code, body := trigger(t, "POST", addr, "towns", "Bearer "+triggerToken)
		answers[fmt.Sprintf("%d %s", code, strings.TrimSpace(body))]++
	}
	src.release()
	waitUntil(t, "two runs, and none going", 30*time.Second, func() bool {
		mt := scrape(t, addr)
		return mt[`fdl_mirror_runs_total{mirror="towns",result="success"}`] >= 2 && mt[`fdl_mirror_running{mirror="towns"}`] == 0
	})
	time.Sleep(time.Second) // a third run, had one been queued, would have started
	mt := scrape(t, addr)
	var runs float64
	for series, v := range mt {
		if strings.HasPrefix(series, `fdl_mirror_runs_total{mirror="towns"`) {
			runs += v
		}
	}
	if runs != 2 {
		t.Errorf("%v runs after one trigger and ten during its run, want 2", runs)
	}
	keys := make([]string, 0, len(answers))
	for k := range answers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !strings.HasPrefix(k, "202 ") && !strings.HasPrefix(k, "429 ") || strings.HasPrefix(k, "202 ") && !strings.Contains(k, `"queued"`) {
			t.Errorf("a trigger during the run answered %s", k)
		}
	}
	if mt[`fdl_mirror_triggers_total{mirror="towns",result="queued"}`] != 1 {
		t.Errorf("triggers queued: %v, want 1; answers %v", mt[`fdl_mirror_triggers_total{mirror="towns",result="queued"}`], answers)
	}
	if readRef(t, m.sink, generate.MainRef) != repo.Versions[0] {
		t.Error("the mirror is not current")
	}
}

// A receiver that never answers delays neither the daemon's runs nor a
// one-shot sync --config, whose exit waits at most --notify-wait.
func TestAReceiverThatNeverAnswersDelaysNoSync(t *testing.T) {
	parent := t.TempDir()
	m := testMirror{"towns", filepath.Join(parent, "upstream"), filepath.Join(parent, "mirror")}
	repo := genCopy(t, m.up, generate.Options{Versions: 1})
	hold := make(chan struct{})
	var held atomic.Int32
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held.Add(1)
		<-hold
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(hold) })
	good := newHookReceiver(t)
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	triggerConfig(t, configPath, addr, []string{hung.URL, good.URL}, m)

	d := startDaemon(t, configPath, addr)
	if code, body := trigger(t, "POST", addr, "towns", "Bearer "+triggerToken); code != http.StatusAccepted {
		t.Fatalf("trigger: %d %s", code, body)
	}
	waitUntil(t, "the mirror current", 10*time.Second, func() bool { return mirrorStatusOf(t, addr, "towns").current(len(repo.Refs)) })
	waitUntil(t, "the other receiver's event", 10*time.Second, func() bool { evs, _ := good.received(); return len(evs) == 1 })
	// The run ended before its event was even made: the hung receiver
	// holds a request of a run that is over.
	waitUntil(t, "the hung receiver to hold the event", 10*time.Second, func() bool { return held.Load() >= 1 })
	if st := mirrorStatusOf(t, addr, "towns"); st.LastRun == nil || st.LastRun.Result != "success" || st.State != "ok" {
		t.Errorf("status while a receiver hangs: %+v", st)
	}
	code, took := d.stop(t, syscall.SIGTERM)
	if code != 0 || took > 15*time.Second {
		t.Errorf("SIGTERM with a receiver hanging: exit %d after %s", code, took)
	}

	// One-shot: a second mirror of the same upstream, sync --config.
	m2 := testMirror{"towns", m.up, filepath.Join(parent, "mirror-2")}
	triggerConfig(t, configPath, "127.0.0.1:0", []string{hung.URL, good.URL}, m2)
	began := time.Now()
	res := run(t, "sync", "--config", configPath, "--notify-wait", "1s")
	took = time.Since(began)
	if res.code != 0 || readRef(t, m2.sink, generate.MainRef) != repo.Versions[0] {
		t.Fatalf("sync --config: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	evs, bad := good.received()
	if len(evs) != 2 || len(bad) > 0 {
		t.Fatalf("the one-shot sync's event: %+v %v", evs, bad)
	}
	checkRefsEvent(t, evs[1], m2, func(ref string) (string, string) { return "", repo.Refs[ref] }, len(repo.Refs))
	if took > 20*time.Second || !strings.Contains(res.stderr, "notifications still pending at exit") {
		t.Errorf("sync --config with a hung receiver took %s\n%s", took, res.stderr)
	}
}

// A version the run refuses is a version.refused event naming it, its
// reason and the refs not moved to it; the refs that did move still get
// their event. Through sync --config, as a CI job runs it.
func TestSyncConfigNotifiesARefusedVersion(t *testing.T) {
	parent := t.TempDir()
	m := testMirror{"towns", filepath.Join(parent, "upstream"), filepath.Join(parent, "mirror")}
	repo := gen(t, m.up, generate.Options{Versions: 2, Tags: true})
	good, bad := repo.Versions[0], repo.Versions[1]
	fdltest.Append(t, filepath.Join(m.up, "versions", bad, "ducklake.duckdb"), []byte("tampered"))
	hook := newHookReceiver(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	triggerConfig(t, configPath, "127.0.0.1:0", []string{hook.URL}, m)
	res := run(t, "sync", "--config", configPath)
	if res.code != 1 || !strings.Contains(res.stdout, "sha256-mismatch") {
		t.Fatalf("sync --config of a tampered version: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	assertNotPublished(t, m.sink, bad)
	if readRef(t, m.sink, generate.MainRef) != "" {
		t.Fatal("main moved to a refused version")
	}
	evs, badReqs := hook.received()
	if len(evs) != 2 || len(badReqs) > 0 {
		t.Fatalf("events %+v, bad requests %v", evs, badReqs)
	}
	byType := map[string]int{}
	for i, ev := range evs {
		byType[ev.Type] = i
	}
	moved, ok := byType["org.fdl.mirror.refs.updated"]
	if !ok {
		t.Fatalf("no refs.updated event: %+v", evs)
	}
	checkRefsEvent(t, evs[moved], m, func(string) (string, string) { return "", good }, 1)
	refusedAt, ok := byType["org.fdl.mirror.version.refused"]
	if !ok {
		t.Fatalf("no version.refused event: %+v", evs)
	}
	var refused struct {
		Source string `json:"source"`
		Data   struct {
			Mirror, Sink, Version, Reason, Message string
			Refs                                   []string
		} `json:"data"`
	}
	hook.mu.Lock()
	raw := hook.raw[refusedAt]
	hook.mu.Unlock()
	if err := json.Unmarshal(raw, &refused); err != nil {
		t.Fatal(err)
	}
	d := refused.Data
	if refused.Source != "towns" || d.Mirror != "towns" || d.Sink != m.sink || d.Version != bad || d.Reason != "sha256-mismatch" ||
		!strings.Contains(d.Message, "sha256") || fmt.Sprint(d.Refs) != "[refs/heads/main refs/tags/v2]" {
		t.Errorf("refusal event: %s", raw)
	}
}
