package daemon

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// Notifications tell receivers what a run did: every ref it moved, and
// every version it refused, as CloudEvents 1.0 in structured mode, one
// POST per receiver, signed as GitHub signs its webhooks. They are made
// and sent off the run's path, from bounded queues, with retries and
// backoff: a receiver that is down, slow or hostile never delays or fails
// a sync; past the queue's bound, events are dropped and counted.

// Event types.
const (
	EventRefsUpdated    = "org.fdl.mirror.refs.updated"
	EventVersionRefused = "org.fdl.mirror.version.refused"
)

// SignatureHeader carries "sha256=" and the hex HMAC-SHA256 of the body,
// keyed with the receiver's secret.
const SignatureHeader = "X-Fdl-Mirror-Signature"

// Standard Webhooks (standardwebhooks.com) headers: the event's id, the
// Unix time of the attempt, and "v1," and the base64 HMAC-SHA256 of
// id.timestamp.body, which receivers' libraries check, the timestamp
// within a tolerance so that an old event cannot be replayed.
const (
	WebhookIDHeader        = "webhook-id"
	WebhookTimestampHeader = "webhook-timestamp"
	WebhookSignatureHeader = "webhook-signature"
)

// Notification results, the values of notifications_total's "result" label.
const (
	NotifyDelivered = "delivered" // the receiver answered 2xx
	NotifyFailed    = "failed"    // no 2xx after every retry, or an answer not worth retrying (4xx)
	NotifyDropped   = "dropped"   // the queue was full, or the process exited first
)

// Bounds on what an event quotes from a version record, which the
// upstream wrote.
const (
	maxAuthorBytes  = 256
	maxMessageBytes = 4096
)

// NotifyOptions tune delivery; zero fields take the defaults.
type NotifyOptions struct {
	QueueSize       int           // events waiting to be sent, per receiver; default 100
	Workers         int           // requests in flight, per receiver; default 2
	RetryMax        int           // retries after the first attempt; default 8
	RetryWaitMin    time.Duration // first backoff; default 1s, doubling
	RetryWaitMax    time.Duration // longest backoff, a receiver's Retry-After too; default 30s
	AttemptTimeout  time.Duration // one attempt, answer included; default 10s
	DeliveryTimeout time.Duration // one event to one receiver, every retry included; default 2m
	RecordTimeout   time.Duration // reading the moved versions' records from the sink; default 30s
	// SpoolFile, when set, is where events still queued at Close are
	// kept, to be sent by the next Notifier that loads it (LoadSpool).
	SpoolFile string
}

func (o NotifyOptions) withDefaults() NotifyOptions {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 100
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 8
	}
	def(&o.RetryWaitMin, time.Second)
	def(&o.RetryWaitMax, 30*time.Second)
	def(&o.AttemptTimeout, 10*time.Second)
	def(&o.DeliveryTimeout, 2*time.Minute)
	def(&o.RecordTimeout, 30*time.Second)
	return o
}

// CloudEvent is a CloudEvents 1.0 event in the JSON format.
type CloudEvent struct {
	SpecVersion     string    `json:"specversion"`
	Type            string    `json:"type"`
	Source          string    `json:"source"`
	ID              string    `json:"id"`
	Time            time.Time `json:"time"`
	DataContentType string    `json:"datacontenttype"`
	Data            any       `json:"data"`
}

// RefsUpdated is the data of an org.fdl.mirror.refs.updated event.
type RefsUpdated struct {
	Mirror string       `json:"mirror"`
	Sink   string       `json:"sink"` // credentials redacted
	Refs   []RefUpdated `json:"refs"`
}

// RefUpdated is one ref a run moved, with its new version's record's
// author and message ("" where the record has none).
type RefUpdated struct {
	Ref     string `json:"ref"`
	From    string `json:"from"` // "" for a new ref
	To      string `json:"to"`
	Author  string `json:"author"`
	Message string `json:"message"`
}

// VersionRefused is the data of an org.fdl.mirror.version.refused event.
type VersionRefused struct {
	Mirror  string   `json:"mirror"`
	Sink    string   `json:"sink"`
	Version string   `json:"version"`
	Refs    []string `json:"refs"` // the refs not moved to it
	Reason  string   `json:"reason"`
	Message string   `json:"message"`
}

// Notifier makes and sends the notifications of runs. Each receiver has
// a queue and workers of its own (a lane): one that hangs or fails holds
// only its own events, and one whose queue is full loses only its own.
type Notifier struct {
	opts    NotifyOptions
	log     *zap.Logger
	total   *prometheus.CounterVec
	dropped *prometheus.CounterVec
	client  *retryablehttp.Client

	start sync.Once
	// ctx ends the requests in flight when Close gives up waiting.
	ctx    context.Context
	cancel context.CancelFunc
	runs   chan runEvents // runs whose events are still to be made
	made   chan struct{}  // closed once every run's events are made
	lanes  sync.Map       // receiver URL -> *lane
	done   sync.WaitGroup // the lanes' workers

	mu     sync.Mutex
	closed bool
	spill  []spooled // deliveries cut by Close, for the spool
	// refused holds, per mirror (per sink of a mirror of several: see
	// refusalsOf), the refusals its last run notified: a version refused
	// upstream is refused at every run, and its receivers hear of it once.
	refused map[string]map[string]bool
}

type runEvents struct {
	mirror config.Mirror
	report *fdlsync.Report
	at     time.Time
}

type delivery struct {
	target config.NotifyTarget
	body   []byte
	event  string // type, for logs
	id     string
	queued time.Time
}

// NewNotifier makes a Notifier whose counter is registered on reg. It
// starts its goroutines with the first event.
func NewNotifier(log *zap.Logger, reg prometheus.Registerer, opts NotifyOptions) *Notifier {
	if log == nil {
		log = zap.NewNop()
	}
	opts = opts.withDefaults()
	n := &Notifier{
		opts: opts,
		log:  log,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fdl_mirror", Name: "notifications_total",
			Help: "Notifications by receiver (scheme and host only) and result: delivered, failed (no 2xx after the retries), dropped (queue full, or the process exited first).",
		}, []string{"target", "result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fdl_mirror", Name: "notify_dropped_total",
			Help: "Events dropped, by receiver (scheme and host only): its own queue was full, the spool was, or the process exited without a spool.",
		}, []string{"receiver"}),
		refused: map[string]map[string]bool{},
	}
	reg.MustRegister(n.total, n.dropped)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.runs = make(chan runEvents, runQueueSize)
	n.made = make(chan struct{})

	c := retryablehttp.NewClient()
	c.Logger = nil // its logs quote URLs, which may carry credentials
	c.RetryMax = opts.RetryMax
	c.RetryWaitMin, c.RetryWaitMax = opts.RetryWaitMin, opts.RetryWaitMax
	c.Backoff = func(min, max time.Duration, attempt int, resp *http.Response) time.Duration {
		// DefaultBackoff honours a Retry-After of any length: bound it.
		return minDuration(retryablehttp.DefaultBackoff(min, max, attempt, resp), max)
	}
	// A retry is signed afresh: its webhook-timestamp is its own time.
	c.PrepareRetry = signAttempt
	c.HTTPClient = &http.Client{
		Timeout: opts.AttemptTimeout,
		// A receiver answers where it was configured: a redirect is a
		// failure, not a reason to post the event elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	n.client = c
	return n
}

func minDuration(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// runQueueSize bounds the runs whose events are still to be made; a run
// past it has its events dropped, for every receiver.
const runQueueSize = 100

func (n *Notifier) startWorkers() {
	n.start.Do(func() {
		go func() {
			defer close(n.made)
			for r := range n.runs {
				n.makeEvents(r)
			}
		}()
	})
}

// lane is one receiver's queue and workers.
type lane struct {
	queue chan delivery
}

// laneOf returns the receiver's lane, starting it at its first event.
func (n *Notifier) laneOf(t config.NotifyTarget) *lane {
	if l, ok := n.lanes.Load(t.URL); ok {
		return l.(*lane)
	}
	l, loaded := n.lanes.LoadOrStore(t.URL, &lane{queue: make(chan delivery, n.opts.QueueSize)})
	ln := l.(*lane)
	if !loaded {
		n.done.Add(n.opts.Workers)
		for range n.opts.Workers {
			go func() {
				defer n.done.Done()
				for {
					// A stop that gave up waiting leaves the rest queued,
					// for the spool.
					select {
					case <-n.ctx.Done():
						return
					case d, ok := <-ln.queue:
						if !ok {
							return
						}
						n.deliver(d)
					}
				}
			}()
		}
	}
	return ln
}

// enqueue puts a delivery on its receiver's queue, or drops it when the
// queue is full. It never blocks.
func (n *Notifier) enqueue(d delivery, mirror string) {
	select {
	case n.laneOf(d.target).queue <- d:
	default:
		n.drop(d.target, 1)
		n.log.Warn("notification dropped: the receiver's queue is full", zap.String("mirror", mirror),
			zap.String("target", targetLabel(d.target.URL)), zap.String("type", d.event), zap.String("id", d.id))
	}
}

func (n *Notifier) drop(t config.NotifyTarget, count int) {
	label := targetLabel(t.URL)
	n.total.WithLabelValues(label, NotifyDropped).Add(float64(count))
	n.dropped.WithLabelValues(label).Add(float64(count))
}

// AfterRun queues the notifications of a run of m to m.Sink: nothing
// when m has no receivers, the run did not get a report, or was a dry
// run. For a mirror of several sinks the caller sets m.Sink to the sink
// of the run (rep), which the events name. It never blocks.
func (n *Notifier) AfterRun(m config.Mirror, rep *fdlsync.Report) {
	if n == nil || rep == nil || rep.DryRun || len(m.Notify) == 0 {
		return
	}
	if len(rep.RefsMoved) == 0 && len(rep.Refused) == 0 && !n.hadRefusals(refusalsOf(m)) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		n.dropAll(m, "the notifier is closed")
		return
	}
	n.startWorkers()
	select {
	case n.runs <- runEvents{mirror: m, report: rep, at: time.Now()}:
	default:
		n.dropAll(m, "too many runs wait for their events to be made")
	}
}

// refusalsOf is where the refusals notified of m's runs are remembered:
// under its name, with the sink of the run for a mirror of several, each
// sink's refusals news to its receivers as its report is its own.
func refusalsOf(m config.Mirror) string {
	if len(m.Sinks) > 1 {
		return m.Name + "\x00" + m.Sink
	}
	return m.Name
}

func (n *Notifier) hadRefusals(mirror string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.refused[mirror]) > 0
}

func (n *Notifier) dropAll(m config.Mirror, why string) {
	for _, t := range m.Notify {
		n.drop(t, 1)
	}
	n.log.Warn("notifications of a run dropped", zap.String("mirror", m.Name), zap.String("why", why))
}

// makeEvents makes a run's events and queues one delivery per event and
// receiver.
func (n *Notifier) makeEvents(r runEvents) {
	m, rep := r.mirror, r.report
	sink := eventAddress(m.Sink)
	var events []CloudEvent
	if len(rep.RefsMoved) > 0 {
		data := RefsUpdated{Mirror: m.Name, Sink: sink, Refs: make([]RefUpdated, 0, len(rep.RefsMoved))}
		records := n.readRecords(m, rep.RefsMoved)
		for _, mv := range rep.RefsMoved {
			rec := records[mv.To]
			data.Refs = append(data.Refs, RefUpdated{Ref: mv.Ref, From: mv.From, To: mv.To, Author: rec.author, Message: rec.message})
		}
		events = append(events, newEvent(EventRefsUpdated, m.Name, r.at, data))
	}
	for _, v := range n.newRefusals(refusalsOf(m), rep.Refused, len(rep.Refs) > 0) {
		v.Mirror, v.Sink = m.Name, sink
		events = append(events, newEvent(EventVersionRefused, m.Name, r.at, v))
	}
	for _, ev := range events {
		body, err := json.Marshal(ev)
		if err != nil {
			n.log.Error("notification not made", zap.String("mirror", m.Name), zap.Error(err))
			continue
		}
		for _, t := range m.Notify {
			n.enqueue(delivery{target: t, body: body, event: ev.Type, id: ev.ID, queued: r.at}, m.Name)
		}
	}
}

func newEvent(typ, source string, at time.Time, data any) CloudEvent {
	return CloudEvent{SpecVersion: "1.0", Type: typ, Source: source, ID: rand.Text(),
		Time: at.UTC(), DataContentType: "application/json", Data: data}
}

// newRefusals groups a run's refusals by version, and returns those of
// versions (with their reasons) that the mirror's previous run did not
// notify. A run that went to the end (complete: it compared the refs)
// replaces what is remembered; one that stopped before only adds to it, so
// that an outage between two refusals of a version is not news.
func (n *Notifier) newRefusals(mirror string, refused []fdlsync.Refusal, complete bool) []VersionRefused {
	byVersion := map[string]*VersionRefused{}
	var order []string
	for _, x := range refused {
		if x.Version == "" {
			continue // not a version's refusal: a ref name, a file of the mirror
		}
		v, ok := byVersion[x.Version]
		if !ok {
			v = &VersionRefused{Version: x.Version, Refs: []string{}}
			byVersion[x.Version] = v
			order = append(order, x.Version)
		}
		// The root cause names the version; "version-refused" names a ref
		// not moved because of it.
		if v.Reason == "" || (v.Reason == fdlsync.ReasonVersion && x.Reason != fdlsync.ReasonVersion) {
			v.Reason, v.Message = x.Reason, RedactText(x.Message)
		}
		if x.Ref != "" && !contains(v.Refs, x.Ref) {
			v.Refs = append(v.Refs, x.Ref)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	before := n.refused[mirror]
	now := map[string]bool{}
	if !complete {
		for k := range before {
			now[k] = true
		}
	}
	var out []VersionRefused
	for _, id := range order {
		v := byVersion[id]
		key := v.Version + "\x00" + v.Reason
		now[key] = true
		if !before[key] {
			out = append(out, *v)
		}
	}
	n.refused[mirror] = now
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

type recordText struct{ author, message string }

// readRecords reads the author and message of the versions refs moved to,
// from the mirror's copy of their records (Sink.ReadRecord), judged as
// every record is (source.JudgeRecord) and cut to their bounds. A record
// that cannot be read, or that breaks the rules, leaves them empty: the
// event still goes.
func (n *Notifier) readRecords(m config.Mirror, moves []fdlsync.RefMove) map[string]recordText {
	out := map[string]recordText{}
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.RecordTimeout)
	defer cancel()
	store, closeStore, err := location.Open(ctx, m.Sink, location.Options{Retries: m.Retries, CAFile: m.CAFile, Logger: n.log})
	if err != nil {
		n.log.Warn("notification: cannot open the mirror to read version records", zap.String("mirror", m.Name), zap.String("error", RedactText(err.Error())))
		return out
	}
	defer closeStore()
	mirror := sink.NewReader(store, n.log)
	for _, mv := range moves {
		if _, done := out[mv.To]; done {
			continue
		}
		out[mv.To] = recordText{}
		raw, err := mirror.Versions().ReadRecord(ctx, mv.To)
		if err != nil {
			n.log.Warn("notification: cannot read a version record", zap.String("mirror", m.Name), zap.String("version", mv.To), zap.String("error", RedactText(err.Error())))
			continue
		}
		rec, bad := source.JudgeRecord(mv.To, raw)
		if bad != nil {
			n.log.Warn("notification: a version record breaks the rules; sent without its author and message", zap.String("mirror", m.Name), zap.String("version", mv.To), zap.String("error", RedactText(bad.Error())))
			continue
		}
		out[mv.To] = recordText{author: cutUTF8(rec.Author, maxAuthorBytes), message: cutUTF8(rec.Message, maxMessageBytes)}
	}
	return out
}

// cutUTF8 cuts s to at most limit bytes on a character boundary.
func cutUTF8(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	for limit > 0 && !utf8.RuneStart(s[limit]) {
		limit--
	}
	return s[:limit]
}

// Sign returns the signature header's value for body: "sha256=" and the
// hex HMAC-SHA256 of the body keyed with secret.
func Sign(body []byte, secret string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// WebhookKey is the HMAC key of a Standard Webhooks signature: a secret
// written as the spec serializes one ("whsec_" and base64) is the bytes it
// encodes; any other secret is its own bytes.
func WebhookKey(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if key, err := base64.StdEncoding.DecodeString(rest); err == nil {
			return key
		}
	}
	return []byte(secret)
}

// SignWebhook returns the webhook-signature value of an event: "v1," and
// the base64 HMAC-SHA256 of id.timestamp.body keyed with WebhookKey(secret).
func SignWebhook(id string, timestamp int64, body []byte, secret string) string {
	return signWebhook(id, strconv.FormatInt(timestamp, 10), body, secret)
}

// signWebhook signs the timestamp as written in the header.
func signWebhook(id, timestamp string, body []byte, secret string) string {
	mac := hmac.New(sha256.New, WebhookKey(secret))
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// WebhookTolerance is how far a webhook-timestamp may be from the
// receiver's clock, as Standard Webhooks' libraries allow.
const WebhookTolerance = 5 * time.Minute

// VerifyWebhook checks a request's Standard Webhooks headers as a receiver
// does: a webhook-id, a webhook-timestamp within WebhookTolerance of now,
// and a v1 signature of id.timestamp.body with secret. It returns the id;
// refusing one seen before is the caller's part.
func VerifyWebhook(h http.Header, body []byte, secret string, now time.Time) (string, error) {
	id, ts := h.Get(WebhookIDHeader), h.Get(WebhookTimestampHeader)
	sent, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil {
		return "", errors.New("no webhook-id or webhook-timestamp")
	}
	if age := now.Sub(time.Unix(sent, 0)); age > WebhookTolerance || age < -WebhookTolerance {
		return "", fmt.Errorf("webhook-timestamp %s from now; the tolerance is %s", age.Round(time.Second), WebhookTolerance)
	}
	want := signWebhook(id, ts, body, secret)
	for _, sig := range strings.Fields(h.Get(WebhookSignatureHeader)) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return id, nil
		}
	}
	return "", errors.New("no webhook-signature made with the secret")
}

// signing is what re-signs an attempt: each carries its own timestamp.
type signing struct {
	id     string
	body   []byte
	secret string
}

type signingKey struct{}

// signAttempt sets the headers of one attempt of a delivery.
func signAttempt(req *http.Request) error {
	s, ok := req.Context().Value(signingKey{}).(signing)
	if !ok {
		return nil
	}
	now := time.Now().Unix()
	req.Header.Set(SignatureHeader, Sign(s.body, s.secret))
	req.Header.Set(WebhookIDHeader, s.id)
	req.Header.Set(WebhookTimestampHeader, strconv.FormatInt(now, 10))
	req.Header.Set(WebhookSignatureHeader, SignWebhook(s.id, now, s.body, s.secret))
	return nil
}

// deliver posts one event to one receiver, with retries.
func (n *Notifier) deliver(d delivery) {
	label := targetLabel(d.target.URL)
	log := n.log.With(zap.String("target", label), zap.String("type", d.event), zap.String("id", d.id))
	// Every retry included: a receiver cannot hold a worker longer.
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.DeliveryTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, signingKey{}, signing{id: d.id, body: d.body, secret: d.target.Secret.Reveal()})
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, d.target.URL, d.body)
	if err != nil {
		n.total.WithLabelValues(label, NotifyFailed).Inc()
		log.Error("notification not sent: bad request", zap.String("error", scrubTarget(err.Error(), d.target.URL, label)))
		return
	}
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set("User-Agent", "fdl-mirror")
	signAttempt(req.Request)
	resp, err := n.client.Do(req)
	if err != nil {
		if n.ctx.Err() != nil {
			// The process is exiting: the event goes to the spool.
			n.mu.Lock()
			n.spill = append(n.spill, spoolEntry(d))
			n.mu.Unlock()
			log.Info("notification cut by the stop; kept for the spool")
			return
		}
		n.total.WithLabelValues(label, NotifyFailed).Inc()
		log.Warn("notification not delivered", zap.String("result", NotifyFailed), zap.String("error", scrubTarget(err.Error(), d.target.URL, label)))
		return
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		n.total.WithLabelValues(label, NotifyFailed).Inc()
		log.Warn("notification refused by the receiver", zap.Int("status", resp.StatusCode))
		return
	}
	n.total.WithLabelValues(label, NotifyDelivered).Inc()
	log.Debug("notification delivered", zap.Int("status", resp.StatusCode))
}

// Close stops taking events and waits at most wait for those queued to be
// sent; then it cancels the requests in flight, and writes the events
// still queued or cut to the spool (SpoolFile), or counts them dropped.
func (n *Notifier) Close(wait time.Duration) {
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	n.startWorkers() // so that the goroutine closing made exists
	close(n.runs)
	n.mu.Unlock()
	deadline := time.After(wait)
	done := make(chan struct{})
	go func() {
		<-n.made
		n.lanes.Range(func(_, l any) bool {
			close(l.(*lane).queue)
			return true
		})
		n.done.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-deadline:
		n.log.Warn("notifications still pending at exit", zap.Duration("waited", wait))
		n.cancel()
		<-done
	}
	n.cancel()
	// What the workers left: in flight when cut, or still queued.
	left := n.spill
	n.lanes.Range(func(_, l any) bool {
		for d := range l.(*lane).queue {
			left = append(left, spoolEntry(d))
		}
		return true
	})
	n.saveSpool(left)
}

// eventAddress is the sink's address as events show it: no credentials.
// The one place to swap in a fuller redaction.
func eventAddress(addr string) string { return Redact(addr) }

// targetLabel names a receiver in metrics and logs: its scheme and host
// only. User information, a query, and even the path (a Slack-style
// webhook's path is its secret) stay out.
func targetLabel(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host
}

// scrubTarget replaces a receiver's URL in an error message by its label,
// and redacts any other URL the message quotes.
func scrubTarget(msg, raw, label string) string {
	if u, err := url.Parse(raw); err == nil {
		msg = strings.ReplaceAll(msg, u.Redacted(), label)
		msg = strings.ReplaceAll(msg, u.String(), label)
	}
	msg = strings.ReplaceAll(msg, raw, label)
	return RedactText(msg)
}

// NotifyWaitAtStop is how long a stopping daemon waits for notifications
// still queued, while its HTTP server shuts down (as long): after
// DefaultStopTimeout, within the 15 s an orchestrator grants.
const NotifyWaitAtStop = 2 * time.Second
