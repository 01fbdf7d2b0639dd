package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"go.uber.org/zap"
)

// What a hostile upstream can put in front of an operator: a ref name and
// a message made of markup.
const (
	hostileRef     = `refs/heads/<script>alert("ref")</script>`
	hostileMessage = `bad ref name <img src=x onerror=alert("msg")> "quoted" & more`
)

// pageConfig has a healthy mirror and a failing one whose addresses carry
// credentials the page must never show.
const pageConfig = `mirrors:
  - name: good
    source: https://reader:hunter2@data.example.org/towns/?token=s3cr3t-token
    sink: s3://mirror-bucket/towns/?endpoint=http://minio:9000&region=eu-west-1
    schedule: "@every 1s"
  - name: bad
    source: /up/bad
    sink: /down/bad
    schedule: "@every 1s"
`

func pageRun(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
	if job.Name == "good" {
		return &fdlsync.Report{FilesCopied: 12, BytesCopied: 3 << 20, VersionsPublished: []string{"v2"},
			RefsMoved: []fdlsync.RefMove{{Ref: "refs/heads/main", From: "v1", To: "v2"}},
			Refs: []fdlsync.RefStatus{
				{Ref: "refs/heads/main", Upstream: "v2", Mirror: "v2"},
				{Ref: "refs/tags/v1", Upstream: "v1", Mirror: "v1"},
			}}, nil
	}
	return &fdlsync.Report{FilesCopied: 1, BytesCopied: 10,
		Refused: []fdlsync.Refusal{
			{Ref: hostileRef, Reason: fdlsync.ReasonBadRef, Message: hostileMessage},
			{Version: "v9", Reason: fdlsync.ReasonSHA256, Message: "catalog sha256 mismatch, fetched from https://u:pw@up.example/v9?X-Amz-Signature=abcdef"},
		},
		Refs: []fdlsync.RefStatus{{Ref: "refs/heads/main", Upstream: "v9", Mirror: "v8", Behind: true}},
	}, nil
}

func serve(t *testing.T, h http.Handler, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func waitForRuns(t *testing.T, d *Daemon, names ...string) {
	t.Helper()
	waitFor(t, fmt.Sprint("a finished run of ", names), 10*time.Second, func() bool {
		for _, m := range d.Status().Mirrors {
			if m.LastRun == nil {
				return false
			}
		}
		return true
	})
}

func TestStatusPageShowsEveryMirrorAndEscapesWhatUpstreamWrote(t *testing.T) {
	h := start(t, pageConfig, pageRun)
	waitForRuns(t, h.d)
	resp := serve(t, h.d.Handler(), "/")
	page := body(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy %q does not forbid scripts", csp)
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="15">`,
		`id="mirror-good"`, `id="mirror-bad"`,
		`<span class="badge ok">ok</span> good`, `<span class="badge failing">failing</span> bad`,
		"12 files, 3.0 MiB", "refs/tags/v1", "Refs: 1 of 1 behind", "Refused in the last run: 2",
		"[sha256-mismatch]", "[bad-ref]",
		// Escaped, so shown as text:
		`refs/heads/&lt;script&gt;alert(&#34;ref&#34;)&lt;/script&gt;`,
		`bad ref name &lt;img src=x onerror=alert(&#34;msg&#34;)&gt; &#34;quoted&#34; &amp; more`,
		// Credentials gone, the rest of the address kept:
		"https://reader:REDACTED@data.example.org/towns/?token=REDACTED",
		"s3://mirror-bucket/towns/?endpoint=http://minio:9000&amp;region=eu-west-1",
		"https://u:REDACTED@up.example/v9?X-Amz-Signature=REDACTED",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, leaked := range []string{"<script", "<img", "hunter2", "s3cr3t", "u:pw", "abcdef"} {
		if strings.Contains(page, leaked) {
			t.Errorf("page contains %q", leaked)
		}
	}
	if t.Failed() {
		t.Logf("page:\n%s", page)
	}

	if resp := serve(t, h.d.Handler(), "/nothing-here"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %d, want 404", resp.StatusCode)
	}
}

func TestStatusJSONHasThePageContentAndTheFieldsOfStatusJSON(t *testing.T) {
	h := start(t, pageConfig, pageRun)
	waitForRuns(t, h.d)
	resp := serve(t, h.d.Handler(), "/status.json")
	text := body(t, resp)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /status.json: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var raw struct {
		Mirrors []map[string]json.RawMessage `json:"mirrors"`
	}
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	// The keys `fdl-mirror status --json` prints for a mirror (error only
	// when there is one).
	for _, m := range raw.Mirrors {
		for _, k := range []string{"mirror", "source", "sink", "behind", "refs", "state", "last_run", "last_success"} {
			if _, ok := m[k]; !ok && !(k == "last_success" && string(m["mirror"]) == `"bad"`) {
				t.Errorf("mirror %s: no %q in /status.json", m["mirror"], k)
			}
		}
	}
	var st Status
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Mirrors) != 2 {
		t.Fatalf("%d mirrors, want 2:\n%s", len(st.Mirrors), text)
	}
	good, bad := st.Mirrors[0], st.Mirrors[1]
	if good.Mirror != "good" || good.State != StateOK || good.Behind || len(good.Refs) != 2 || good.LastSuccess == nil ||
		good.LastRun.FilesCopied != 12 || good.Source != "https://reader:REDACTED@data.example.org/towns/?token=REDACTED" {
		t.Errorf("good: %+v", good)
	}
	if bad.Mirror != "bad" || bad.State != StateFailing || !bad.Behind || bad.Lag != 1 || bad.LastSuccess != nil ||
		len(bad.LastRun.Refused) != 2 || bad.LastRun.Refused[0].Ref != hostileRef || bad.LastRun.Result != ResultRefused {
		t.Errorf("bad: %+v", bad)
	}
	if strings.Contains(text, "hunter2") || strings.Contains(text, "abcdef") {
		t.Errorf("credentials in /status.json:\n%s", text)
	}
}

func TestMirrorStates(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const hourly = "@hourly"
	for _, tc := range []struct {
		name string
		rec  mirrorRecord
		lag  int
		now  time.Time
		want string
	}{
		{"never ran", mirrorRecord{added: t0}, 0, t0.Add(time.Hour), StatePending},
		{"never ran for 3 periods", mirrorRecord{added: t0}, 0, t0.Add(3*time.Hour + time.Minute), StateStale},
		{"running", mirrorRecord{added: t0, runningSince: t0.Add(time.Minute)}, 0, t0.Add(30 * time.Hour), StateRunning},
		{"clean", mirrorRecord{added: t0, decisive: ResultSuccess, lastSuccess: t0}, 0, t0.Add(time.Hour), StateOK},
		{"refused", mirrorRecord{added: t0, decisive: ResultRefused}, 1, t0.Add(time.Hour), StateFailing},
		{"failed", mirrorRecord{added: t0, decisive: ResultFailed, lastSuccess: t0}, 0, t0.Add(2 * time.Hour), StateFailing},
		{"failed for 3 periods", mirrorRecord{added: t0, decisive: ResultFailed, lastSuccess: t0}, 0, t0.Add(3*time.Hour + time.Minute), StateFailing},
		{"locked by another writer", mirrorRecord{added: t0, decisive: ResultLocked, lastSuccess: t0}, 0, t0.Add(time.Hour), StateBehind},
		{"locked for 3 periods", mirrorRecord{added: t0, decisive: ResultLocked, lastSuccess: t0}, 0, t0.Add(3*time.Hour + time.Minute), StateStale},
		{"clean, then canceled for 3 periods", mirrorRecord{added: t0, decisive: ResultSuccess, lastSuccess: t0}, 0, t0.Add(3*time.Hour + time.Minute), StateStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rec.state(hourly, tc.lag, tc.now); got != tc.want {
				t.Errorf("state = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestStatusPageForgetsARemovedMirror(t *testing.T) {
	h := start(t, pageConfig, pageRun)
	waitForRuns(t, h.d)
	writeConfig(t, h.path, strings.Replace(pageConfig, "  - name: bad\n    source: /up/bad\n    sink: /down/bad\n    schedule: \"@every 1s\"\n", "", 1))
	if err := h.d.Reload(); err != nil {
		t.Fatal(err)
	}
	st := h.d.Status()
	if len(st.Mirrors) != 1 || st.Mirrors[0].Mirror != "good" {
		t.Errorf("after removing bad: %+v", st.Mirrors)
	}
	if page := body(t, serve(t, h.d.Handler(), "/")); strings.Contains(page, "mirror-bad") {
		t.Error("the page still shows the removed mirror")
	}
}
