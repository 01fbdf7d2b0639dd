package daemon

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// These tests drive the Notifier with reports as a run makes them, a
// mirror folder holding the version records, and real receivers on
// 127.0.0.1. The whole path, from a daemon's run to a receiver, is tested
// through the binary in cmd/fdl-mirror/trigger_test.go.

const testSecret = "notify-secret-0123456789abcdef"

// fastRetries keeps the tests short; the backoff they tune is the same.
var fastRetries = NotifyOptions{RetryWaitMin: 5 * time.Millisecond, RetryWaitMax: 50 * time.Millisecond, AttemptTimeout: 2 * time.Second}

// received is one request a receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a real HTTP receiver; answer picks the status of request n
// (from 1).
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []received
	hits atomic.Int32
}

func newReceiver(t *testing.T, answer func(n int32, w http.ResponseWriter)) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := rc.hits.Add(1)
		rc.mu.Lock()
		rc.got = append(rc.got, received{r.Header.Clone(), body})
		rc.mu.Unlock()
		answer(n, w)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func accept(n int32, w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }

// checkSigned verifies a request as a receiver should, and decodes it.
func checkSigned(t *testing.T, r received, secret string) CloudEvent {
	t.Helper()
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(r.body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if got := r.header.Get(SignatureHeader); !hmac.Equal([]byte(got), []byte(want)) {
		t.Errorf("signature %q, want %q", got, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/cloudevents+json" {
		t.Errorf("Content-Type %q", ct)
	}
	var ev CloudEvent
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.body)
	}
	if err := json.Unmarshal(r.body, &ev); err != nil {
		t.Fatal(err)
	}
	for _, attr := range []string{"specversion", "type", "source", "id", "time", "data"} {
		if _, ok := raw[attr]; !ok {
			t.Errorf("event without %q: %s", attr, r.body)
		}
	}
	if ev.SpecVersion != "1.0" || ev.ID == "" || ev.Time.IsZero() || time.Since(ev.Time) > time.Minute {
		t.Errorf("event attributes: %+v", ev)
	}
	return ev
}

// mirrorWithRecords writes version records into a mirror folder.
func mirrorWithRecords(t *testing.T, records map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for id, rec := range records {
		p := filepath.Join(dir, "versions", id, "version.json")
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(rec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testMirror(sink string, urls ...string) config.Mirror {
	m := config.Mirror{Name: "towns", Source: "/up", Sink: sink}
	for _, u := range urls {
		m.Notify = append(m.Notify, config.NotifyTarget{URL: u, Secret: testSecret})
	}
	return m
}

func TestNotifierSendsASignedCloudEventForEveryRefMove(t *testing.T) {
	long := strings.Repeat("é", maxMessageBytes) // cut on a character boundary
	sink, v1, v2 := generatedMirror(t,
		map[string]any{"author": "Ada <ada@example.org>", "message": "first"},
		map[string]any{"author": map[string]any{"name": "not a string"}, "message": long})
	a := newReceiver(t, accept)
	b := newReceiver(t, accept)
	n := NewNotifier(nil, prometheus.NewRegistry(), fastRetries)
	rep := &fdlsync.Report{RefsMoved: []fdlsync.RefMove{
		{Ref: "refs/heads/main", From: v1, To: v2},
		{Ref: "refs/tags/v1", To: v1},
	}}
	// A sink address with credentials: the event shows none.
	m := testMirror(sink, a.URL+"/hook", b.URL)
	m.Sink = "file://" + sink
	n.AfterRun(m, rep)
	n.Close(10 * time.Second)

	var ids []string
	for _, rc := range []*receiver{a, b} {
		reqs := rc.requests()
		if len(reqs) != 1 {
			t.Fatalf("receiver got %d requests, want 1", len(reqs))
		}
		ev := checkSigned(t, reqs[0], testSecret)
		ids = append(ids, ev.ID)
		if ev.Type != EventRefsUpdated || ev.Source != "towns" || ev.DataContentType != "application/json" {
			t.Errorf("event %+v", ev)
		}
		var data RefsUpdated
		raw, _ := json.Marshal(ev.Data)
		json.Unmarshal(raw, &data)
		if data.Mirror != "towns" || data.Sink != "file://"+sink || len(data.Refs) != 2 {
			t.Fatalf("data %+v", data)
		}
		main, tag := data.Refs[0], data.Refs[1]
		if main != (RefUpdated{Ref: "refs/heads/main", From: v1, To: v2, Author: "", Message: main.Message}) ||
			len(main.Message) > maxMessageBytes || !strings.HasPrefix(long, main.Message) || len(main.Message) < maxMessageBytes-1 {
			t.Errorf("main moved: %+v (message of %d bytes)", main, len(main.Message))
		}
		if tag != (RefUpdated{Ref: "refs/tags/v1", From: "", To: v1, Author: "Ada <ada@example.org>", Message: "first"}) {
			t.Errorf("new tag: %+v", tag)
		}
	}
	if ids[0] != ids[1] {
		t.Errorf("one event, two ids: %v", ids)
	}
	if got := testutil.ToFloat64(n.total.WithLabelValues(targetLabel(a.URL), NotifyDelivered)); got != 1 {
		t.Errorf("delivered to a: %v", got)
	}
}

// A record in the mirror is judged as every record is: one that breaks
// the rules (here the first version's record, signed text and all, copied
// under the second's ID) lends the event neither its author nor its
// message, and the event still goes.
func TestNotifierTakesNoTextFromARecordThatBreaksTheRules(t *testing.T) {
	sink, v1, v2 := generatedMirror(t, map[string]any{"author": "Ada <ada@example.org>", "message": "first"}, nil)
	replayed, err := os.ReadFile(filepath.Join(sink, filepath.FromSlash(repo.VersionFile(v1, repo.RecordFile))))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sink, filepath.FromSlash(repo.VersionFile(v2, repo.RecordFile))), replayed, 0o644); err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, accept)
	n := NewNotifier(nil, prometheus.NewRegistry(), fastRetries)
	n.AfterRun(testMirror(sink, rc.URL), &fdlsync.Report{RefsMoved: []fdlsync.RefMove{
		{Ref: "refs/heads/main", From: v1, To: v2},
		{Ref: "refs/tags/v1", To: v1},
	}})
	n.Close(10 * time.Second)
	reqs := rc.requests()
	if len(reqs) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(reqs))
	}
	var data RefsUpdated
	raw, _ := json.Marshal(checkSigned(t, reqs[0], testSecret).Data)
	json.Unmarshal(raw, &data)
	if len(data.Refs) != 2 {
		t.Fatalf("data %+v", data)
	}
	if main := data.Refs[0]; main != (RefUpdated{Ref: "refs/heads/main", From: v1, To: v2}) {
		t.Errorf("main moved to a replayed record: %+v", main)
	}
	if tag := data.Refs[1]; tag != (RefUpdated{Ref: "refs/tags/v1", To: v1, Author: "Ada <ada@example.org>", Message: "first"}) {
		t.Errorf("new tag: %+v", tag)
	}
}

// generatedMirror is a repository of two versions the project's generator
// made (a mirror has its layout: a sink), the fields of first and second
// set in the records of the first version and of its child: real version
// IDs and digests, records every reader takes.
func generatedMirror(t *testing.T, first, second map[string]any) (dir, v1, v2 string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "mirror")
	r, err := generate.Generate(context.Background(), dir, generate.Options{Versions: 2, FilesPerVersion: 1, RowsPerFile: 5, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 = r.Versions[0], r.Versions[1]
	for id, fields := range map[string]map[string]any{v1: first, v2: second} {
		p := filepath.Join(dir, filepath.FromSlash(repo.VersionFile(id, repo.RecordFile)))
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		maps.Copy(doc, fields)
		if raw, err = json.Marshal(doc); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.ParseRecord(id, raw); err != nil {
			t.Fatalf("the test's record is not valid: %v", err)
		}
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, v1, v2
}

func TestEventSinkAddressHasNoCredentials(t *testing.T) {
	for _, addr := range []string{
		"s3://bucket/towns/?endpoint=https://key:secret@minio.example.org&access_key=AKIA123&secret_key=hunter2",
		"https://user:hunter2@example.org/towns/",
	} {
		got := eventAddress(addr)
		if strings.Contains(got, "hunter2") || strings.Contains(got, "AKIA123") || strings.Contains(got, "secret@") {
			t.Errorf("%s shown as %s", addr, got)
		}
	}
}

func TestNotifierRetriesAReceiverThatFailsFiveTimes(t *testing.T) {
	rc := newReceiver(t, func(n int32, w http.ResponseWriter) {
		switch {
		case n <= 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		case n == 4:
			// A Retry-After far beyond the longest backoff is bounded by it.
			w.Header().Set("Retry-After", "86400")
			w.WriteHeader(http.StatusTooManyRequests)
		case n == 5:
			w.WriteHeader(http.StatusBadGateway)
		default:
			w.WriteHeader(http.StatusOK)
		}
	})
	n := NewNotifier(nil, prometheus.NewRegistry(), fastRetries)
	n.AfterRun(testMirror(mirrorWithRecords(t, nil), rc.URL), &fdlsync.Report{RefsMoved: []fdlsync.RefMove{{Ref: "refs/heads/main", To: "v1"}}})
	n.Close(10 * time.Second)
	reqs := rc.requests()
	if len(reqs) != 6 {
		t.Fatalf("%d requests, want 5 failures and the one accepted", len(reqs))
	}
	first := checkSigned(t, reqs[0], testSecret)
	if last := checkSigned(t, reqs[5], testSecret); last.ID != first.ID || string(reqs[5].body) != string(reqs[0].body) {
		t.Error("a retry is not the same event, byte for byte")
	}
	label := targetLabel(rc.URL)
	if testutil.ToFloat64(n.total.WithLabelValues(label, NotifyDelivered)) != 1 || testutil.ToFloat64(n.total.WithLabelValues(label, NotifyFailed)) != 0 {
		t.Error("not counted as delivered once")
	}
}

func TestNotifierGivesUpOnAReceiverThatRefusesOrRedirects(t *testing.T) {
	elsewhere := newReceiver(t, accept)
	refuses := newReceiver(t, func(n int32, w http.ResponseWriter) { w.WriteHeader(http.StatusForbidden) })
	redirects := newReceiver(t, func(n int32, w http.ResponseWriter) {
		w.Header().Set("Location", elsewhere.URL)
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
	down := newReceiver(t, func(n int32, w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) })
	opts := fastRetries
	opts.RetryMax = 2
	n := NewNotifier(nil, prometheus.NewRegistry(), opts)
	n.AfterRun(testMirror(mirrorWithRecords(t, nil), refuses.URL, redirects.URL, down.URL), &fdlsync.Report{RefsMoved: []fdlsync.RefMove{{Ref: "refs/heads/main", To: "v1"}}})
	n.Close(10 * time.Second)
	if refuses.hits.Load() != 1 || redirects.hits.Load() != 1 || down.hits.Load() != 3 || elsewhere.hits.Load() != 0 {
		t.Errorf("requests: 403 receiver %d (want 1), redirecting %d (want 1), 500 receiver %d (want 3), redirect target %d (want 0)",
			refuses.hits.Load(), redirects.hits.Load(), down.hits.Load(), elsewhere.hits.Load())
	}
	for _, rc := range []*receiver{refuses, redirects, down} {
		if got := testutil.ToFloat64(n.total.WithLabelValues(targetLabel(rc.URL), NotifyFailed)); got != 1 {
			t.Errorf("%s: failed counted %v", rc.URL, got)
		}
	}
}

func TestNotifierNeverBlocksAndBoundsItsQueue(t *testing.T) {
	hold := make(chan struct{})
	hung := newReceiver(t, func(n int32, w http.ResponseWriter) { <-hold })
	defer close(hold)
	opts := fastRetries
	opts.QueueSize, opts.Workers = 1, 1
	opts.AttemptTimeout = time.Hour
	n := NewNotifier(nil, prometheus.NewRegistry(), opts)
	m := testMirror(mirrorWithRecords(t, nil), hung.URL)
	rep := &fdlsync.Report{RefsMoved: []fdlsync.RefMove{{Ref: "refs/heads/main", To: "v1"}}}
	n.AfterRun(m, rep)
	waitFor(t, "the receiver to hold the first event", 5*time.Second, func() bool { return hung.hits.Load() == 1 })
	for i := 0; i < 10; i++ {
		n.AfterRun(m, rep) // returns at once, queued or dropped
	}
	label := targetLabel(hung.URL)
	// One in flight, one queued: the other 9 dropped, counted per receiver.
	waitFor(t, "9 events dropped", 5*time.Second, func() bool {
		return testutil.ToFloat64(n.dropped.WithLabelValues(label)) == 9 && testutil.ToFloat64(n.total.WithLabelValues(label, NotifyDropped)) == 9
	})
	began := time.Now()
	n.Close(200 * time.Millisecond)
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Close waited %s for a receiver that never answers", took)
	}
	if got := testutil.ToFloat64(n.total.WithLabelValues(label, NotifyDelivered)); got != 0 {
		t.Errorf("delivered %v", got)
	}
}

func TestRefusedVersionIsNotifiedOnceWithItsReason(t *testing.T) {
	rc := newReceiver(t, accept)
	n := NewNotifier(nil, prometheus.NewRegistry(), fastRetries)
	m := testMirror(mirrorWithRecords(t, nil), rc.URL)
	refused := []fdlsync.Refusal{
		{Ref: "refs/heads/main", Version: "v9", Reason: fdlsync.ReasonVersion, Message: "ref refs/heads/main not moved to v9: version refused (signature)"},
		{Version: "v9", File: "versions/v9/version.json.sig", Reason: fdlsync.ReasonSignature, Message: "no trusted signature from https://user:pw@keys.example.org/"},
		{Ref: "refs/heads/bad name", Reason: fdlsync.ReasonBadRef, Message: "not a version"},
	}
	// A run that went to the end compared the refs.
	compared := []fdlsync.RefStatus{{Ref: "refs/heads/main", State: fdlsync.RefRefused}}
	n.AfterRun(m, &fdlsync.Report{Refused: refused, Refs: compared})
	waitFor(t, "the refusal", 5*time.Second, func() bool { return rc.hits.Load() == 1 })
	n.AfterRun(m, &fdlsync.Report{Refused: refused, Refs: compared}) // refused again: already told
	n.AfterRun(m, &fdlsync.Report{})                                 // a run that stopped early (an outage)
	n.AfterRun(m, &fdlsync.Report{Refused: refused, Refs: compared}) // refused as before: not news
	n.AfterRun(m, &fdlsync.Report{Refs: compared})                   // the upstream fixed it
	n.AfterRun(m, &fdlsync.Report{Refused: refused, Refs: compared}) // and broke it again: told again
	n.Close(10 * time.Second)
	reqs := rc.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d events, want 2 (the refusal, then its return)", len(reqs))
	}
	if second := checkSigned(t, reqs[1], testSecret); second.Type != EventVersionRefused {
		t.Errorf("second event %s", second.Type)
	}
	ev := checkSigned(t, reqs[0], testSecret)
	var data VersionRefused
	raw, _ := json.Marshal(ev.Data)
	json.Unmarshal(raw, &data)
	if ev.Type != EventVersionRefused || data.Version != "v9" || data.Reason != fdlsync.ReasonSignature ||
		strings.Join(data.Refs, ",") != "refs/heads/main" || data.Mirror != "towns" {
		t.Errorf("refusal event %s %+v", ev.Type, data)
	}
	if strings.Contains(data.Message, "pw@") || !strings.Contains(data.Message, "no trusted signature") {
		t.Errorf("message %q", data.Message)
	}
}

func TestNotifierKeepsReceiverSecretsOutOfMetricsAndLogs(t *testing.T) {
	rc := newReceiver(t, func(n int32, w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) })
	core, logs := observer.New(zap.DebugLevel)
	reg := prometheus.NewRegistry()
	opts := fastRetries
	opts.RetryMax = 1
	n := NewNotifier(zap.New(core), reg, opts)
	target := strings.Replace(rc.URL, "http://", "http://hookuser:hookpass@", 1) + "/T0/B0/pathsecret?token=querysecret"
	n.AfterRun(testMirror(mirrorWithRecords(t, nil), target), &fdlsync.Report{RefsMoved: []fdlsync.RefMove{{Ref: "refs/heads/main", To: "v1"}}})
	n.Close(10 * time.Second)
	if rc.hits.Load() != 2 {
		t.Fatalf("%d requests", rc.hits.Load())
	}
	if got := rc.requests()[0].header.Get("Authorization"); got == "" {
		t.Error("the URL's user information was not sent as basic auth")
	}
	var text strings.Builder
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		text.WriteString(mf.String())
	}
	for _, e := range logs.All() {
		text.WriteString(e.Message + toString(e.ContextMap()))
	}
	for _, secret := range []string{"hookpass", "pathsecret", "querysecret", testSecret} {
		if strings.Contains(text.String(), secret) {
			t.Errorf("%q is in the metrics or the logs:\n%s", secret, text.String())
		}
	}
	if !strings.Contains(text.String(), "notification not delivered") {
		t.Errorf("the failure is not logged:\n%s", text.String())
	}
}

// refMove is a report of a run that moved one ref.
func refMove(to string) *fdlsync.Report {
	return &fdlsync.Report{RefsMoved: []fdlsync.RefMove{{Ref: "refs/heads/main", To: to}}}
}

func TestHangingReceiversDelayOnlyTheirOwnEvents(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	var hung []*receiver
	urls := []string{}
	for range 5 {
		rc := newReceiver(t, func(n int32, w http.ResponseWriter) { <-hold })
		hung = append(hung, rc)
		urls = append(urls, rc.URL)
	}
	healthy := newReceiver(t, accept)
	urls = append(urls, healthy.URL)
	opts := NotifyOptions{AttemptTimeout: time.Hour} // the hanging ones never let go
	n := NewNotifier(nil, prometheus.NewRegistry(), opts)
	m := testMirror(mirrorWithRecords(t, nil), urls...)
	const runs = 30
	began := time.Now()
	for i := range runs {
		n.AfterRun(m, refMove(fmt.Sprintf("v%d", i)))
	}
	waitFor(t, "the healthy receiver to get every event", 10*time.Second, func() bool { return healthy.hits.Load() == runs })
	t.Logf("the healthy receiver got %d events in %s beside 5 hanging ones", runs, time.Since(began).Round(time.Millisecond))
	for _, r := range healthy.requests() {
		checkSigned(t, r, testSecret)
	}
	// Each hanging receiver holds 2 in flight (its workers) and the rest
	// in its own queue.
	for _, rc := range hung {
		if got := rc.hits.Load(); got != 2 {
			t.Errorf("hanging receiver: %d requests, want its 2 workers'", got)
		}
	}
	n.Close(100 * time.Millisecond)
	// No spool: what the hanging ones still held is dropped, counted
	// as theirs; none of the healthy one's.
	for _, rc := range hung {
		if got := testutil.ToFloat64(n.dropped.WithLabelValues(targetLabel(rc.URL))); got != runs {
			t.Errorf("hanging receiver: %v dropped at the stop, want %d", got, runs)
		}
	}
	if got := testutil.ToFloat64(n.dropped.WithLabelValues(targetLabel(healthy.URL))); got != 0 {
		t.Errorf("the healthy receiver lost %v events", got)
	}
}

func TestEventsQueuedAtStopAreSpooledAndSentAfterRestart(t *testing.T) {
	var up atomic.Bool
	hold := make(chan struct{})
	defer close(hold)
	rc := newReceiver(t, func(n int32, w http.ResponseWriter) {
		if !up.Load() {
			<-hold // down: hangs
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	spool := filepath.Join(t.TempDir(), "notify.spool")
	opts := NotifyOptions{AttemptTimeout: time.Hour, SpoolFile: spool}
	m := testMirror(mirrorWithRecords(t, nil), rc.URL)
	n := NewNotifier(nil, prometheus.NewRegistry(), opts)
	for i := range 5 {
		n.AfterRun(m, refMove(fmt.Sprintf("v%d", i)))
	}
	waitFor(t, "two events in flight", 5*time.Second, func() bool { return rc.hits.Load() == 2 })
	n.Close(200 * time.Millisecond)
	fi, err := os.Stat(spool)
	if err != nil {
		t.Fatalf("no spool after a stop with 5 events unsent: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("spool mode %04o, want 0600", fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(spool)
	for _, secret := range []string{testSecret, strings.TrimPrefix(rc.URL, "http://")} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the spool holds %q", secret)
		}
	}
	sent := rc.requests()
	// Restarted: the receiver is up again.
	up.Store(true)
	n2 := NewNotifier(nil, prometheus.NewRegistry(), opts)
	if q := n2.LoadSpool(m.Notify); q != 5 {
		t.Errorf("%d events queued from the spool, want 5", q)
	}
	if _, err := os.Stat(spool); !os.IsNotExist(err) {
		t.Errorf("the spool is still there after loading: %v", err)
	}
	n2.Close(10 * time.Second)
	ids := map[string]int{}
	for _, r := range rc.requests()[len(sent):] {
		ids[checkSigned(t, r, testSecret).ID]++
	}
	for _, r := range sent {
		ev := checkSigned(t, r, testSecret)
		if ids[ev.ID] != 1 {
			t.Errorf("event %s, cut in flight at the stop, sent %d times after the restart", ev.ID, ids[ev.ID])
		}
	}
	if len(ids) != 5 {
		t.Errorf("%d distinct events after the restart, want 5", len(ids))
	}
}

func TestADeliveryEndsAtItsOverallDeadline(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	rc := newReceiver(t, func(n int32, w http.ResponseWriter) { <-hold })
	opts := fastRetries
	opts.AttemptTimeout, opts.DeliveryTimeout = time.Hour, 300*time.Millisecond
	n := NewNotifier(nil, prometheus.NewRegistry(), opts)
	n.AfterRun(testMirror(mirrorWithRecords(t, nil), rc.URL), refMove("v1"))
	label := targetLabel(rc.URL)
	waitFor(t, "the delivery to fail at its deadline", 5*time.Second, func() bool {
		return testutil.ToFloat64(n.total.WithLabelValues(label, NotifyFailed)) == 1
	})
	n.Close(time.Second)
}
