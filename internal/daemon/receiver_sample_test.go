package daemon

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fdl-mirror/fdl-mirror/internal/config"
)

// The sample receivers of docs/deploy.md, run against events the notifier
// sent. The Go sample is below, between the markers, and the test checks
// that the docs show it byte for byte; the Python one is taken from the
// docs and run with python3.

// sample:go begin
// verify accepts a request only if it is signed with secret (the content
// of secret_file), was sent within 5 minutes of now, and its webhook-id
// was not seen before; seen holds the ids accepted (forget those older
// than 10 minutes).
func verify(h http.Header, body []byte, secret string, seen map[string]time.Time, now time.Time) error {
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sent, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil {
		return errors.New("no webhook-id or webhook-timestamp")
	}
	if age := now.Sub(time.Unix(sent, 0)); age > 5*time.Minute || age < -5*time.Minute {
		return errors.New("webhook-timestamp outside the tolerance")
	}
	key := []byte(secret)
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if b, err := base64.StdEncoding.DecodeString(rest); err == nil {
			key = b
		}
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	signed := false
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		signed = signed || hmac.Equal([]byte(sig), []byte(want))
	}
	if !signed {
		return errors.New("bad signature")
	}
	if _, dup := seen[id]; dup {
		return errors.New("replayed: webhook-id seen before")
	}
	seen[id] = now
	return nil
}

// sample:go end

// docSample returns the code block after <!-- sample:LANG --> in
// docs/deploy.md.
func docSample(t *testing.T, lang string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- sample:"+lang+" -->\n```"+lang+"\n")
	if !ok {
		t.Fatalf("docs/deploy.md has no %s sample", lang)
	}
	code, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("docs/deploy.md: the %s sample does not end", lang)
	}
	return code
}

func TestTheDocsShowTheGoSampleThatIsTested(t *testing.T) {
	self, err := os.ReadFile("receiver_sample_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(self), "// sample:go begin\n")
	tested, _, _ := strings.Cut(rest, "// sample:go end\n")
	if strings.TrimSpace(docSample(t, "go")) != strings.TrimSpace(tested) {
		t.Errorf("docs/deploy.md's Go sample is not the one tested here:\n%s", docSample(t, "go"))
	}
}

// sentEvent has a real notifier send one event to a receiver and returns
// the request as the receiver got it.
func sentEvent(t *testing.T, secret string) received {
	t.Helper()
	rc := newReceiver(t, accept)
	n := NewNotifier(nil, prometheus.NewRegistry(), fastRetries)
	m := testMirror(mirrorWithRecords(t, nil), rc.URL)
	m.Notify[0].Secret = config.Secret(secret)
	n.AfterRun(m, refMove("v1"))
	n.Close(10 * time.Second)
	reqs := rc.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	return reqs[0]
}

// whsecSecret is a secret as Standard Webhooks serializes one.
var whsecSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

func TestGoSampleReceiverRefusesAReplayedEvent(t *testing.T) {
	for _, secret := range []string{testSecret, whsecSecret} {
		r := sentEvent(t, secret)
		seen := map[string]time.Time{}
		now := time.Now()
		if err := verify(r.header, r.body, secret, seen, now); err != nil {
			t.Fatalf("secret %.6s…: the event as sent is refused: %v", secret, err)
		}
		// The same request again, a second later: its id was seen.
		if err := verify(r.header, r.body, secret, seen, now.Add(time.Second)); err == nil || !strings.Contains(err.Error(), "replayed") {
			t.Errorf("a replay of the same request: %v", err)
		}
		// Five minutes on, to a receiver that forgot the id: too old.
		if err := verify(r.header, r.body, secret, map[string]time.Time{}, now.Add(6*time.Minute)); err == nil || !strings.Contains(err.Error(), "tolerance") {
			t.Errorf("a replay 6 min later: %v", err)
		}
		// With a fresh timestamp put in by the replayer: the signature no
		// longer matches.
		h := r.header.Clone()
		h.Set("webhook-timestamp", strconv.FormatInt(now.Add(6*time.Minute).Unix(), 10))
		if err := verify(h, r.body, secret, map[string]time.Time{}, now.Add(6*time.Minute)); err == nil || !strings.Contains(err.Error(), "bad signature") {
			t.Errorf("a replay with a new timestamp: %v", err)
		}
		// And a wrong secret is refused.
		if err := verify(r.header, r.body, secret+"x", map[string]time.Time{}, now); err == nil {
			t.Error("a request checked with another secret was accepted")
		}
	}
}

func TestStandardWebhookSignatureOfAWhsecSecretIsKeyedWithItsBytes(t *testing.T) {
	r := sentEvent(t, whsecSecret)
	mac := hmac.New(sha256.New, []byte("0123456789abcdef0123456789abcdef"))
	mac.Write([]byte(r.header.Get("webhook-id") + "." + r.header.Get("webhook-timestamp") + "."))
	mac.Write(r.body)
	if got, want := r.header.Get("webhook-signature"), "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)); got != want {
		t.Errorf("webhook-signature %q, want %q", got, want)
	}
	var ev CloudEvent
	json.Unmarshal(r.body, &ev)
	if r.header.Get("webhook-id") != ev.ID {
		t.Errorf("webhook-id %q, event id %q", r.header.Get("webhook-id"), ev.ID)
	}
	// The older header is still there, keyed with the secret as written.
	checkSigned(t, r, whsecSecret)
}

func TestPythonSampleReceiverRefusesAReplayedEvent(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: the Python sample not run")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sample.py"), []byte(docSample(t, "python")), 0o644); err != nil {
		t.Fatal(err)
	}
	driver := `import json, sys
from sample import verify
case = json.load(sys.stdin)
seen = {}
out = []
for now, headers in [(case["now"], case["headers"]), (case["now"] + 1, case["headers"]), (case["now"] + 360, case["headers"]), (case["now"], case["forged"])]:
    try:
        verify(headers, case["body"].encode(), case["secret"], seen if len(out) < 2 else {}, now=now)
        out.append("accepted")
    except ValueError as e:
        out.append(str(e))
print(json.dumps(out))
`
	for _, secret := range []string{testSecret, whsecSecret} {
		r := sentEvent(t, secret)
		headers := map[string]string{}
		for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			headers[k] = r.header.Get(k)
		}
		forged := map[string]string{}
		for k, v := range headers {
			forged[k] = v
		}
		ts, _ := strconv.ParseInt(headers["webhook-timestamp"], 10, 64)
		forged["webhook-timestamp"] = strconv.FormatInt(ts+1, 10)
		in, _ := json.Marshal(map[string]any{"now": time.Now().Unix(), "headers": headers, "forged": forged, "body": string(r.body), "secret": secret})
		cmd := exec.Command(python, "-c", driver)
		cmd.Dir = dir
		cmd.Stdin = bytes.NewReader(in)
		outRaw, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python3: %v\n%s", err, outRaw)
		}
		var out []string
		if err := json.Unmarshal(outRaw, &out); err != nil || len(out) != 4 {
			t.Fatalf("python3 said %s", outRaw)
		}
		if out[0] != "accepted" || !strings.Contains(out[1], "replayed") || !strings.Contains(out[2], "tolerance") || !strings.Contains(out[3], "bad signature") {
			t.Errorf("secret %.6s…: the Python sample answered %q; want accepted, replayed, tolerance, bad signature", secret, out)
		}
	}
}
