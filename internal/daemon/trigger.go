package daemon

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/fdl-mirror/fdl-mirror/internal/config"
)

// A publisher's trigger, POST /mirrors/{name}/sync with the config's
// bearer token, runs a mirror now instead of at its next tick. Triggers
// coalesce: one that comes during a run queues one more run after it, and
// any more before that run starts add nothing, since the run after them
// reads the upstream as it is then. The schedule goes on as before.

// Rate limit of the triggers of one mirror: a burst of TriggerBurst, then
// one every TriggerEvery. Coalescing already bounds the runs; the limit
// bounds the requests a leaked token can make the mirror serve.
const (
	TriggerBurst = 10
	TriggerEvery = 6 * time.Second
)

// Trigger results, the values of triggers_total's "result" label.
const (
	TriggerStarted      = "started"        // no run was going: one started
	TriggerQueued       = "queued"         // a run was going: one more queued after it
	TriggerCoalesced    = "coalesced"      // a run was going, and one already queued after it
	TriggerUnauthorized = "unauthorized"   // no token or a wrong one: nothing run
	TriggerUnknown      = "unknown-mirror" // no such mirror in this daemon (or its shard)
	TriggerLimited      = "rate-limited"   // past the mirror's rate limit: nothing run
	TriggerStopping     = "stopping"       // the daemon is stopping: nothing run
)

// unknownMirrorLabel is the mirror label of triggers for a name that is
// not configured: the name comes from the request, and a series per name
// would let anyone grow /metrics without bound. Configured names are
// [a-z0-9-]+, so no mirror is called this.
const unknownMirrorLabel = "(unknown)"

// TriggerStatus is a mirror's last trigger, on the status page.
type TriggerStatus struct {
	At     time.Time `json:"at"`
	Result string    `json:"result"` // one of the triggers_total results
}

// TriggerResponse is the JSON body of a 202 answer.
type TriggerResponse struct {
	Mirror string `json:"mirror"`
	// State is "running" when the trigger started a run, "queued" when a
	// run was going and another will follow it.
	State string `json:"state"`
}

// triggers is the trigger endpoint's own state: rate limits, the last
// trigger of each mirror, and its counters.
type triggers struct {
	mu       sync.Mutex
	limiters map[string]*rate.Limiter
	last     map[string]TriggerStatus
	total    *prometheus.CounterVec
	authFail prometheus.Counter
	authLog  authLog
	seen     seenEvents
}

// Failed authentication is logged at most once per client address every
// AuthLogEvery, with the count since its last line: a client trying
// tokens cannot fill the disk (7,502 wrong tokens wrote 1.1 MB, one line
// each). At most authLogAddresses addresses are remembered; past that,
// the others share one line.
const (
	AuthLogEvery     = 5 * time.Second
	authLogAddresses = 1024
	authLogOthers    = "(other addresses)"
)

type authLog struct {
	mu    sync.Mutex
	addrs map[string]*authLogged
}

type authLogged struct {
	at     time.Time // of the last line
	failed int       // failures since it, the one now included
}

// failed counts a failure of addr, and returns whether to log a line now
// and the failures it reports.
func (a *authLog) failed(addr string, now time.Time) (bool, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.addrs == nil {
		a.addrs = map[string]*authLogged{}
	}
	e, ok := a.addrs[addr]
	if !ok {
		if len(a.addrs) >= authLogAddresses {
			for k, v := range a.addrs {
				if now.Sub(v.at) >= AuthLogEvery && v.failed == 0 {
					delete(a.addrs, k)
				}
			}
		}
		if len(a.addrs) >= authLogAddresses {
			addr = authLogOthers
			e = a.addrs[addr]
		}
		if e == nil {
			e = &authLogged{}
			a.addrs[addr] = e
		}
	}
	e.failed++
	if !e.at.IsZero() && now.Sub(e.at) < AuthLogEvery {
		return false, 0
	}
	n := e.failed
	e.at, e.failed = now, 0
	return true, n
}

func newTriggers(reg prometheus.Registerer) *triggers {
	t := &triggers{
		limiters: map[string]*rate.Limiter{},
		last:     map[string]TriggerStatus{},
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fdl_mirror", Name: "triggers_total",
			Help: "Triggers (POST /mirrors/NAME/sync) by result: started, queued, coalesced, unauthorized, unknown-mirror, rate-limited, stopping.",
		}, []string{"mirror", "result"}),
	}
	t.authFail = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fdl_mirror", Name: "auth_failures_total",
		Help: "Requests to the trigger refused for their credentials: no bearer token or a wrong one, a CloudEvent badly signed, too old or replayed.",
	})
	reg.MustRegister(t.total, t.authFail)
	return t
}

// allow takes one trigger of the mirror from its rate limit.
func (t *triggers) allow(name string, now time.Time) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.limiters[name]
	if !ok {
		l = rate.NewLimiter(rate.Every(TriggerEvery), TriggerBurst)
		t.limiters[name] = l
	}
	r := l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

func (t *triggers) record(name string, known bool, result string, now time.Time) {
	label := name
	if !known {
		label = unknownMirrorLabel
	}
	t.total.WithLabelValues(label, result).Inc()
	if known {
		t.mu.Lock()
		t.last[name] = TriggerStatus{At: now, Result: result}
		t.mu.Unlock()
	}
}

// forget drops what is kept of a mirror no longer in the config: its
// series, rate limit and last trigger.
func (t *triggers) forget(name string) {
	t.total.DeletePartialMatch(prometheus.Labels{"mirror": name})
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.limiters, name)
	delete(t.last, name)
}

// addToStatus puts each mirror's last trigger into st.
func (t *triggers) addToStatus(st *Status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range st.Mirrors {
		if last, ok := t.last[st.Mirrors[i].Mirror]; ok {
			st.Mirrors[i].LastTrigger = &last
		}
	}
}

// handleTriggers serves POST /mirrors/{name}/sync. It is mounted always
// and answers 404 to everything while the config sets no
// trigger_token_file, so that a reload can turn it on or off.
func (d *Daemon) handleTriggers(mux *http.ServeMux) {
	mux.HandleFunc("/mirrors/{name}/sync", d.serveTrigger)
}

func (d *Daemon) serveTrigger(w http.ResponseWriter, r *http.Request) {
	cfg := d.Config()
	if cfg.TriggerToken == "" && cfg.TriggerSecret == "" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	name := r.PathValue("name")
	_, known := cfg.Mirror(name)
	now := time.Now()
	log := d.log.With(zap.String("remote", r.RemoteAddr))
	if known {
		log = log.With(zap.String("mirror", name))
	}
	// Authentication comes first: an unknown mirror and a known one look
	// the same to a caller without the token.
	if r.Header.Get(WebhookSignatureHeader) != "" && cfg.TriggerSecret != "" {
		// Another mirror's notification, signed as it signs them.
		ignored, err := d.checkEvent(r, cfg.TriggerSecret.Reveal(), now)
		if err != nil {
			d.trig.record(name, known, TriggerUnauthorized, now)
			d.authFailed(r, now, "trigger refused: a CloudEvent not signed with trigger_secret_file's secret, too old, or replayed")
			http.Error(w, "event refused: "+err.Error(), http.StatusUnauthorized)
			return
		}
		if ignored != "" {
			// Signed, so the sender is ours: a 2xx, or it would retry.
			log.Info("event taken, nothing to run", zap.String("type", truncate(ignored, 64)))
			w.WriteHeader(http.StatusNoContent)
			return
		}
	} else if cfg.TriggerToken == "" || !tokenMatches(r.Header.Get("Authorization"), cfg.TriggerToken) {
		d.trig.record(name, known, TriggerUnauthorized, now)
		d.authFailed(r, now, "trigger refused: no bearer token or a wrong one")
		w.Header().Set("WWW-Authenticate", `Bearer realm="fdl-mirror"`)
		http.Error(w, "a bearer token is needed (Authorization: Bearer TOKEN), or a signed CloudEvent", http.StatusUnauthorized)
		return
	}
	if !known {
		d.trig.record(name, false, TriggerUnknown, now)
		log.Info("trigger for a mirror this daemon does not run", zap.String("name", truncate(name, 64)))
		http.Error(w, "no such mirror in this daemon", http.StatusNotFound)
		return
	}
	if ok, wait := d.trig.allow(name, now); !ok {
		d.trig.record(name, true, TriggerLimited, now)
		log.Warn("trigger refused: rate limit", zap.Duration("retry_after", wait))
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		http.Error(w, "too many triggers of this mirror; try again later", http.StatusTooManyRequests)
		return
	}
	result := d.triggerRun(name)
	d.trig.record(name, result != TriggerUnknown, result, now)
	switch result {
	case TriggerStopping:
		http.Error(w, "the daemon is stopping", http.StatusServiceUnavailable)
		return
	case TriggerUnknown:
		http.Error(w, "no such mirror in this daemon", http.StatusNotFound)
		return
	}
	state := "queued"
	if result == TriggerStarted {
		state = "running"
	}
	log.Info("sync triggered", zap.String("result", result))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(TriggerResponse{Mirror: name, State: state})
}

// authFailed counts a request refused for its credentials, and logs it
// if its address has had no line for AuthLogEvery.
func (d *Daemon) authFailed(r *http.Request, now time.Time, msg string) {
	d.trig.authFail.Inc()
	host := r.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if ok, n := d.trig.authLog.failed(host, now); ok {
		d.log.Warn(msg, zap.String("remote", host), zap.Int("failures", n),
			zap.String("path", truncate(r.URL.Path, 128)), zap.Duration("next_line_after", AuthLogEvery))
	}
}

// maxEventBody bounds a CloudEvent posted to the trigger: far above an
// event of many refs (each message is cut at 4 KiB).
const maxEventBody = 1 << 20

// checkEvent checks a CloudEvent posted to the trigger as a Standard
// Webhooks receiver does (signature, timestamp, an id not seen before),
// and that it is an org.fdl.mirror.refs.updated event. A signed event of
// another type is returned by its type, to be taken without a run.
func (d *Daemon) checkEvent(r *http.Request, secret string, now time.Time) (ignoredType string, err error) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxEventBody))
	if err != nil {
		return "", fmt.Errorf("body: %w", err)
	}
	id, err := VerifyWebhook(r.Header, body, secret, now)
	if err != nil {
		return "", err
	}
	var ev struct {
		SpecVersion string `json:"specversion"`
		Type        string `json:"type"`
		ID          string `json:"id"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.SpecVersion != "1.0" {
		return "", errors.New("not a CloudEvents 1.0 event in JSON")
	}
	if ev.ID != id {
		return "", errors.New("webhook-id is not the event's id")
	}
	if !d.trig.seen.add(id, now) {
		return "", errors.New("replayed: this event id was taken before")
	}
	if ev.Type != EventRefsUpdated {
		return ev.Type, nil
	}
	return "", nil
}

// seenEvents remembers the ids of the events taken within twice the
// tolerance (an older one is refused for its timestamp anyway), at most
// maxSeenEvents of them.
type seenEvents struct {
	mu  sync.Mutex
	ids map[string]time.Time
}

const maxSeenEvents = 100_000

// add records id, or returns false if it was seen.
func (s *seenEvents) add(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]time.Time{}
	}
	if _, dup := s.ids[id]; dup {
		return false
	}
	if len(s.ids) >= maxSeenEvents {
		for k, at := range s.ids {
			if now.Sub(at) > 2*WebhookTolerance {
				delete(s.ids, k)
			}
		}
		if len(s.ids) >= maxSeenEvents {
			// Every id is recent: a flood of signed events, which only a
			// holder of the secret can send. Refuse rather than forget.
			return false
		}
	}
	s.ids[id] = now
	return true
}

// tokenMatches compares the request's bearer token with the configured
// one in constant time; both are hashed first so that the comparison's
// time does not even depend on their lengths.
func tokenMatches(header string, token config.Secret) bool {
	scheme, got, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a := sha256.Sum256([]byte(strings.TrimSpace(got)))
	b := sha256.Sum256([]byte(token.Reveal()))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// triggerRun starts a run of the mirror, or queues one after the run
// going; it returns the trigger's result.
func (d *Daemon) triggerRun(name string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.cfg.Mirror(name)
	switch {
	case d.stopping:
		return TriggerStopping
	case !ok:
		return TriggerUnknown // removed by a reload since the handler looked
	case d.running[name]:
		if d.queued == nil {
			d.queued = map[string]bool{}
		}
		if d.queued[name] {
			return TriggerCoalesced
		}
		d.queued[name] = true
		return TriggerQueued
	}
	d.running[name] = true
	d.runs.Add(1)
	go d.runThenQueued(m)
	return TriggerStarted
}

// runThenQueued runs the mirror, then once more if a trigger came during
// the run, and so on; then marks it not running. The caller has set
// d.running[m.Name] and added to d.runs.
func (d *Daemon) runThenQueued(m config.Mirror) {
	defer d.runs.Done()
	name := m.Name
	for {
		d.runOnce(m, d.takeScrub(name))
		d.mu.Lock()
		next, still := d.cfg.Mirror(name)
		if still && !d.stopping && d.queued[name] {
			delete(d.queued, name)
			d.mu.Unlock()
			d.log.Info("running again: triggered during the run", zap.String("mirror", name))
			m = next
			continue
		}
		delete(d.queued, name)
		delete(d.running, name)
		if !still {
			// Removed by a reload while it ran.
			d.metrics.RemoveMirror(name)
			d.board.remove(name)
			d.trig.forget(name)
		}
		d.mu.Unlock()
		return
	}
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
