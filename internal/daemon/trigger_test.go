package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const testToken = "trigger-token-0123456789abcdef"

// hourlyWithTrigger is a config of mirrors scheduled hourly (no tick comes
// during a test) with the trigger on, its token in a file beside it.
func hourlyWithTrigger(t *testing.T, names ...string) string {
	t.Helper()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := "trigger_token_file: " + token + "\n" + strings.ReplaceAll(mirrorsConfig("127.0.0.1:0", names...), "@every 1s", "@every 1h")
	return text
}

type triggerAnswer struct {
	code  int
	body  string
	allow string
	auth  string
}

func post(t *testing.T, h http.Handler, method, path, authorization string) triggerAnswer {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	return triggerAnswer{w.Code, string(b), w.Header().Get("Allow"), w.Header().Get("WWW-Authenticate")}
}

func TestTriggerRefusesWithoutTheTokenAndStartsNothing(t *testing.T) {
	var calls atomic.Int32
	h := start(t, hourlyWithTrigger(t, "towns"), func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		calls.Add(1)
		return okReport(job), nil
	})
	handler := h.d.Handler()
	for _, c := range []struct {
		method, path, auth string
		code               int
	}{
		{"POST", "/mirrors/towns/sync", "", http.StatusUnauthorized},
		{"POST", "/mirrors/towns/sync", "Bearer wrong-token-0123456789abcdef", http.StatusUnauthorized},
		{"POST", "/mirrors/towns/sync", "Bearer " + testToken + "x", http.StatusUnauthorized},
		{"POST", "/mirrors/towns/sync", "Basic " + testToken, http.StatusUnauthorized},
		{"POST", "/mirrors/towns/sync", testToken, http.StatusUnauthorized},
		{"POST", "/mirrors/nowhere/sync", "", http.StatusUnauthorized}, // unknown or not, the same to a caller without the token
		{"POST", "/mirrors/nowhere/sync", "Bearer " + testToken, http.StatusNotFound},
		{"GET", "/mirrors/towns/sync", "Bearer " + testToken, http.StatusMethodNotAllowed},
		{"PUT", "/mirrors/towns/sync", "", http.StatusMethodNotAllowed},
	} {
		got := post(t, handler, c.method, c.path, c.auth)
		if got.code != c.code {
			t.Errorf("%s %s with %q: %d %s, want %d", c.method, c.path, c.auth, got.code, got.body, c.code)
		}
		if c.code == http.StatusMethodNotAllowed && got.allow != "POST" {
			t.Errorf("%s: Allow %q", c.method, got.allow)
		}
		if c.code == http.StatusUnauthorized && !strings.HasPrefix(got.auth, "Bearer") {
			t.Errorf("401 without WWW-Authenticate: Bearer: %q", got.auth)
		}
	}
	time.Sleep(100 * time.Millisecond) // a run, had one started, would have been called by now
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d runs started by refused triggers", n)
	}
	m := h.d.trig.total
	if got := testutil.ToFloat64(m.WithLabelValues("towns", TriggerUnauthorized)); got != 5 {
		t.Errorf("unauthorized triggers of towns counted %v, want 5", got)
	}
	if got := testutil.ToFloat64(m.WithLabelValues(unknownMirrorLabel, TriggerUnauthorized)) + testutil.ToFloat64(m.WithLabelValues(unknownMirrorLabel, TriggerUnknown)); got != 2 {
		t.Errorf("triggers of an unknown mirror counted %v, want 2", got)
	}
	if st := h.d.Status().Mirrors[0]; st.LastTrigger == nil || st.LastTrigger.Result != TriggerUnauthorized || st.LastRun != nil {
		t.Errorf("status after refused triggers: last trigger %+v, last run %+v", st.LastTrigger, st.LastRun)
	}
}

func TestTriggersDuringARunQueueOneMoreRun(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	h := start(t, hourlyWithTrigger(t, "towns"), func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		if calls.Add(1) == 1 {
			<-release
		}
		return okReport(job), nil
	})
	handler := h.d.Handler()
	auth := "bearer " + testToken // the scheme is case-insensitive
	first := post(t, handler, "POST", "/mirrors/towns/sync", auth)
	var resp TriggerResponse
	if first.code != http.StatusAccepted || json.Unmarshal([]byte(first.body), &resp) != nil || resp != (TriggerResponse{"towns", "running"}) {
		t.Fatalf("first trigger: %d %s", first.code, first.body)
	}
	waitFor(t, "the triggered run", 5*time.Second, func() bool { return calls.Load() == 1 })
	codes := map[int]int{}
	for i := 0; i < 10; i++ {
		got := post(t, handler, "POST", "/mirrors/towns/sync", auth)
		codes[got.code]++
		if got.code == http.StatusAccepted && (json.Unmarshal([]byte(got.body), &resp) != nil || resp.State != "queued") {
			t.Errorf("trigger during the run: %s", got.body)
		}
	}
	close(release)
	m := h.d.Metrics()
	waitFor(t, "two runs ended", 5*time.Second, func() bool {
		return testutil.ToFloat64(m.runs.WithLabelValues("towns", ResultSuccess)) == 2 && testutil.ToFloat64(m.running.WithLabelValues("towns")) == 0
	})
	time.Sleep(200 * time.Millisecond) // a third run, had one been queued, would start now
	if n := calls.Load(); n != 2 {
		t.Errorf("%d runs after 1 trigger and 10 during its run, want 2", n)
	}
	tr := h.d.trig.total
	queued, coalesced, limited := testutil.ToFloat64(tr.WithLabelValues("towns", TriggerQueued)),
		testutil.ToFloat64(tr.WithLabelValues("towns", TriggerCoalesced)), testutil.ToFloat64(tr.WithLabelValues("towns", TriggerLimited))
	// A burst of TriggerBurst, the first included: the eleventh is over.
	if queued != 1 || coalesced != 8 || limited != 1 || codes[http.StatusAccepted] != 9 || codes[http.StatusTooManyRequests] != 1 {
		t.Errorf("10 triggers during a run: %v queued, %v coalesced, %v rate-limited; answers %v", queued, coalesced, limited, codes)
	}
	if st := h.d.Status().Mirrors[0]; st.LastTrigger == nil || st.LastTrigger.Result != TriggerLimited {
		t.Errorf("last trigger %+v", st.LastTrigger)
	}
	// The scheduled tick still runs the mirror alone: no trigger queued.
	h.d.mu.Lock()
	gen := h.d.gen
	h.d.mu.Unlock()
	h.d.tick(gen, "towns")
	if n := calls.Load(); n != 3 {
		t.Errorf("a tick after the triggers made %d runs in all, want 3", n)
	}
}

func TestRateLimitedTriggerSaysWhenToRetry(t *testing.T) {
	h := start(t, hourlyWithTrigger(t, "towns"), func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		return okReport(job), nil
	})
	handler := h.d.Handler()
	req := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/mirrors/towns/sync", nil)
		r.Header.Set("Authorization", "Bearer "+testToken)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w
	}
	for i := 0; i < TriggerBurst; i++ {
		if w := req(); w.Code != http.StatusAccepted {
			t.Fatalf("trigger %d of the burst: %d %s", i+1, w.Code, w.Body)
		}
	}
	w := req()
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("past the burst: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
}

func TestTriggerEndpointFollowsTheConfig(t *testing.T) {
	h := start(t, mirrorsConfig("127.0.0.1:0", "towns"), func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		return okReport(job), nil
	})
	handler := h.d.Handler()
	// Without trigger_token_file, no endpoint: whatever the method or token.
	for _, method := range []string{"POST", "GET"} {
		if got := post(t, handler, method, "/mirrors/towns/sync", "Bearer "+testToken); got.code != http.StatusNotFound {
			t.Errorf("%s without a trigger token file: %d", method, got.code)
		}
	}
	// A reload that sets it turns it on.
	writeConfig(t, h.path, hourlyWithTrigger(t, "towns"))
	if err := h.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := post(t, handler, "POST", "/mirrors/towns/sync", "Bearer "+testToken); got.code != http.StatusAccepted {
		t.Errorf("after the reload: %d %s", got.code, got.body)
	}
	// A token file others may read is refused, with the config in use kept.
	text, _ := os.ReadFile(h.path)
	token := strings.TrimPrefix(strings.SplitN(string(text), "\n", 2)[0], "trigger_token_file: ")
	os.Chmod(token, 0o644)
	if err := h.d.Reload(); err == nil || !strings.Contains(err.Error(), "mode 0644") {
		t.Errorf("reload with a readable token file: %v", err)
	}
	if got := post(t, handler, "POST", "/mirrors/towns/sync", "Bearer "+testToken); got.code == http.StatusNotFound || got.code == http.StatusUnauthorized {
		t.Errorf("after a refused reload the trigger answers %d", got.code)
	}
	// A mirror removed by a reload leaves no trigger series behind.
	os.Chmod(token, 0o600)
	writeConfig(t, h.path, hourlyWithTrigger(t, "rivers"))
	if err := h.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(h.d.trig.total); n != 0 {
		t.Errorf("%d trigger series left after towns was removed", n)
	}
	if got := post(t, handler, "POST", "/mirrors/towns/sync", "Bearer "+testToken); got.code != http.StatusNotFound {
		t.Errorf("a removed mirror's trigger: %d", got.code)
	}
	// The token never reaches the logs.
	for _, e := range h.logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += " " + k + "=" + strings.ReplaceAll(strings.ReplaceAll(toString(v), "\n", " "), "\t", " ")
		}
		if strings.Contains(line, testToken) {
			t.Errorf("the token is in a log line: %s", line)
		}
	}
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// syncBuffer is a log destination tests read while the daemon writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Sync() error { return nil }

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestWrongTokensAreCountedAndLoggedAtABoundedRate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeConfig(t, path, hourlyWithTrigger(t, "towns"))
	var logs syncBuffer
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), &logs, zap.DebugLevel))
	d, err := New(Options{ConfigPath: path, Logger: logger, Run: func(ctx context.Context, job mirror.Job, _ *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		return okReport(job), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	before := len(logs.String())
	handler := d.Handler()
	const tries = 2000
	for i := range tries {
		req := httptest.NewRequest(http.MethodPost, "/mirrors/towns/sync", nil)
		req.Header.Set("Authorization", fmt.Sprintf("Bearer guessed-token-%016d", i))
		req.RemoteAddr = fmt.Sprintf("192.0.2.%d:%d", 1+i%3, 40000+i) // three clients
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("try %d: %d", i, w.Code)
		}
	}
	text := logs.String()[before:]
	if len(text) > 100<<10 {
		t.Errorf("%d wrong tokens wrote %d bytes of log, want at most 100 KB", tries, len(text))
	}
	lines := strings.Count(text, "trigger refused")
	// The test takes far less than AuthLogEvery: one line per address.
	if lines != 3 {
		t.Errorf("%d log lines for 3 addresses, want 3:\n%s", lines, text)
	}
	if !strings.Contains(text, `"remote":"192.0.2.2"`) || !strings.Contains(text, `"failures":1`) {
		t.Errorf("a line lacks its address or count:\n%s", text)
	}
	if got := testutil.ToFloat64(d.trig.authFail); got != tries {
		t.Errorf("auth_failures_total %v, want %d", got, tries)
	}
	t.Logf("%d wrong tokens from 3 addresses: %d log lines, %d bytes", tries, lines, len(text))
}

func TestAuthLogReportsTheFailuresSinceItsLastLine(t *testing.T) {
	var a authLog
	now := time.Unix(1_000_000, 0)
	if ok, n := a.failed("192.0.2.1", now); !ok || n != 1 {
		t.Fatalf("first failure: log %v, count %d", ok, n)
	}
	for i := range 99 {
		if ok, _ := a.failed("192.0.2.1", now.Add(time.Duration(i)*10*time.Millisecond)); ok {
			t.Fatalf("failure %d within %v logged", i+2, AuthLogEvery)
		}
	}
	if ok, n := a.failed("192.0.2.1", now.Add(AuthLogEvery)); !ok || n != 100 {
		t.Errorf("after %v: log %v, count %d; want a line counting 100", AuthLogEvery, ok, n)
	}
	// Addresses past the bound share one line.
	for i := range authLogAddresses + 10 {
		a.failed(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now)
	}
	if len(a.addrs) > authLogAddresses+1 {
		t.Errorf("%d addresses remembered, bound %d", len(a.addrs), authLogAddresses)
	}
}

func TestASignedRefsUpdatedEventTriggersAMirrorAndAReplayDoesNot(t *testing.T) {
	dir := t.TempDir()
	secretPath := filepath.Join(dir, "trigger.secret")
	if err := os.WriteFile(secretPath, []byte(whsecSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	var calls atomic.Int32
	h := start(t, "trigger_secret_file: "+secretPath+"\n"+strings.ReplaceAll(mirrorsConfig(addr, "towns"), "@every 1s", "@every 1h"),
		func(ctx context.Context, job mirror.Job, _ *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
			calls.Add(1)
			return okReport(job), nil
		})
	waitFor(t, "the listener", 5*time.Second, func() bool { c, _ := get(t, "http://"+addr+"/readyz"); return c == 200 })
	// The upstream mirror's notifier, its receiver this daemon's trigger;
	// a receiver beside it keeps a copy of what was sent.
	copyOf := newReceiver(t, accept)
	n := NewNotifier(nil, prometheus.NewRegistry(), fastRetries)
	up := testMirror(mirrorWithRecords(t, nil), "http://"+addr+"/mirrors/towns/sync", copyOf.URL)
	for i := range up.Notify {
		up.Notify[i].Secret = config.Secret(whsecSecret)
	}
	n.AfterRun(up, refMove("v1"))
	n.Close(10 * time.Second)
	waitFor(t, "the run the event triggered", 5*time.Second, func() bool { return calls.Load() == 1 })
	if got := testutil.ToFloat64(h.d.trig.total.WithLabelValues("towns", TriggerStarted)); got != 1 {
		t.Errorf("triggers started %v", got)
	}

	// The same request again: refused, nothing run.
	sent := copyOf.requests()[0]
	replay := func(hdr http.Header) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mirrors/towns/sync", bytes.NewReader(sent.body))
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := replay(sent.header); code != http.StatusUnauthorized {
		t.Errorf("a replayed event: %d, want 401", code)
	}
	// With a timestamp made fresh by the replayer: the signature fails.
	forged := sent.header.Clone()
	forged.Set(WebhookTimestampHeader, fmt.Sprint(time.Now().Unix()+1))
	forged.Set(WebhookIDHeader, "another-id")
	if code := replay(forged); code != http.StatusUnauthorized {
		t.Errorf("a replay with a new id and timestamp: %d, want 401", code)
	}
	// An old event, never seen: refused for its time.
	body := sent.body
	old := time.Now().Add(-6 * time.Minute).Unix()
	var ev CloudEvent
	json.Unmarshal(body, &ev)
	stale := http.Header{}
	stale.Set(WebhookIDHeader, ev.ID+"x")
	stale.Set(WebhookTimestampHeader, fmt.Sprint(old))
	stale.Set(WebhookSignatureHeader, SignWebhook(ev.ID+"x", old, body, whsecSecret))
	if code := replay(stale); code != http.StatusUnauthorized {
		t.Errorf("an event signed 6 min ago: %d, want 401", code)
	}
	time.Sleep(200 * time.Millisecond)
	if calls.Load() != 1 {
		t.Errorf("%d runs; replays started some", calls.Load())
	}
	if got := testutil.ToFloat64(h.d.trig.authFail); got != 3 {
		t.Errorf("auth_failures_total %v, want 3", got)
	}
}
