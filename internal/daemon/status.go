package daemon

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/robfig/cron/v3"
)

// A mirror's state on the status page and in /status.json.
const (
	StatePending = "pending" // no run has ended since the daemon started or the mirror was added
	StateRunning = "running" // a run is going
	StateOK      = "ok"      // the last run ended clean: every upstream ref matched
	StateBehind  = "behind"  // refs lag upstream without a refusal: another writer held the lock, or the run stopped early
	StateFailing = "failing" // the last run failed as a whole or refused something
	StateStale   = "stale"   // no clean run for StalePeriods schedule periods, and no failed one either
)

// StalePeriods is how many schedule periods without a clean run make a
// mirror stale; deploy/prometheus/alerts.yaml alerts at the same count.
const StalePeriods = 3

// scheduleParser reads the `schedule` of a mirror: five cron fields or a
// descriptor (@hourly, @every 10m), as config.Load accepts them.
var scheduleParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Status is what GET /status.json serves and the status page shows.
type Status struct {
	Generated time.Time      `json:"generated"`
	Mirrors   []MirrorStatus `json:"mirrors"`
}

// MirrorStatus is one mirror as the daemon knows it. Its first fields are
// those `fdl-mirror status --json` prints, with the same names; the refs are
// as the last run that went to the end compared them. A mirror of several
// sinks has a MirrorStatus per sink, as `status --json` prints one per
// sink: each names the mirror and its sink, with the sink's own last run,
// error, refs and scrub; the schedule, running_since and last_trigger
// are the mirror's, the same in each.
type MirrorStatus struct {
	Mirror string `json:"mirror"`
	Source string `json:"source"` // credentials removed (see Redact)
	Sink   string `json:"sink"`
	// SinkIndex is the sink's place in its mirror's sinks, from 1; 0
	// (left out) for a mirror of one sink.
	SinkIndex int                 `json:"sink_index,omitempty"`
	Behind    bool                `json:"behind"`
	Refs      []fdlsync.RefStatus `json:"refs"`
	// Pending: ancestors not mirrored yet, retried at every run; they make
	// the mirror behind, as in `status --json`.
	Pending []fdlsync.PendingVersion `json:"pending"`
	// PendingMore counts the pending versions left out of Pending.
	PendingMore int    `json:"pending_more,omitempty"`
	Error       string `json:"error,omitempty"` // the last run's, when it failed
	// UpstreamStale: no selected ref changed upstream for longer than the
	// mirror's max_upstream_age (a frozen upstream), as in `status --json`.
	UpstreamStale      bool      `json:"upstream_stale"`
	UpstreamLastChange time.Time `json:"upstream_last_change,omitzero"`
	// CatalogSandbox is the layers that confine the catalog readers
	// (the same for every mirror of the daemon).
	CatalogSandbox catalog.SandboxStatus `json:"catalog_sandbox"`

	State    string `json:"state"`
	Schedule string `json:"schedule"`
	Lag      int    `json:"lag"`
	// RunningSince is set while a run is going.
	RunningSince *time.Time `json:"running_since,omitempty"`
	LastRun      *RunStatus `json:"last_run,omitempty"`
	LastSuccess  *time.Time `json:"last_success,omitempty"`
	// RefsCompared is when the refs were compared (the end of the last run
	// that went to the end).
	RefsCompared *time.Time `json:"refs_compared,omitempty"`
	// LastTrigger is the last POST /mirrors/{name}/sync (trigger.go).
	LastTrigger *TriggerStatus `json:"last_trigger,omitempty"`
	// Scrub is the mirror's scrub schedule ("" none); LastScrub its last
	// scrub since the daemon started that was neither canceled nor locked
	// out (scrub.go).
	Scrub     string       `json:"scrub,omitempty"`
	LastScrub *ScrubStatus `json:"last_scrub,omitempty"`
}

// RunStatus is one finished run.
type RunStatus struct {
	Started           time.Time         `json:"started"`
	Ended             time.Time         `json:"ended"`
	DurationSeconds   float64           `json:"duration_seconds"`
	Result            string            `json:"result"` // one of the runs_total results
	FilesCopied       int64             `json:"files_copied"`
	BytesCopied       int64             `json:"bytes_copied"`
	VersionsPublished int               `json:"versions_published"`
	RefsMoved         int               `json:"refs_moved"`
	Refused           []fdlsync.Refusal `json:"refused"`
	// RefusedMore counts the refusals left out of Refused.
	RefusedMore int    `json:"refused_more,omitempty"`
	Error       string `json:"error,omitempty"`
}

// RefusedCount is every refusal of the run, listed or not.
func (r *RunStatus) RefusedCount() int { return len(r.Refused) + r.RefusedMore }

// maxListed bounds the refusals and pending versions the status keeps
// per mirror (each message is bounded by the engine): an upstream can
// make any number of versions fail, and the page and /status.json must
// stay small whatever it wrote. The rest are counted.
const maxListed = 100

// mirrorRecord is what the board remembers of one mirror, or of one sink
// of a mirror of several (whose runningSince is its mirror's record's).
type mirrorRecord struct {
	added        time.Time
	runningSince time.Time // zero when no run is going
	last         *RunStatus
	decisive     string // result of the last run that was not canceled
	lastSuccess  time.Time
	refs         []fdlsync.RefStatus
	pending      []fdlsync.PendingVersion // as the last run that went to the end left them
	pendingMore  int
	refsCompared time.Time
	scrub        *ScrubStatus
}

// board keeps the outcome of every mirror's runs for the status page.
type board struct {
	mu      sync.Mutex
	mirrors map[string]*mirrorRecord // by recordKey
}

// recordKey is where the board keeps a record: under the mirror's name
// for the mirror (of one sink: its runs too), and under the name and the
// sink's address for each sink of a mirror of several.
func recordKey(mirror, sink string) string {
	if sink == "" {
		return mirror
	}
	return mirror + "\x00" + sink
}

func newBoard() *board { return &board{mirrors: map[string]*mirrorRecord{}} }

func (b *board) record(name string, now time.Time) *mirrorRecord {
	r, ok := b.mirrors[name]
	if !ok {
		r = &mirrorRecord{added: now}
		b.mirrors[name] = r
	}
	return r
}

// add makes a mirror, and each of its sinks where it has several, known
// from now; a mirror or sink already known keeps its past, and a sink
// the mirror no longer has is forgotten.
func (b *board) add(name string, sinks []string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.record(name, now)
	for _, s := range sinks {
		b.record(recordKey(name, s), now)
	}
	for key := range b.mirrors {
		if mirror, sink, ok := strings.Cut(key, "\x00"); ok && mirror == name && !slices.Contains(sinks, sink) {
			delete(b.mirrors, key)
		}
	}
}

// remove forgets a mirror no longer in the config, and its sinks.
func (b *board) remove(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for key := range b.mirrors {
		if mirror, _, _ := strings.Cut(key, "\x00"); mirror == name {
			delete(b.mirrors, key)
		}
	}
}

// started marks a run of the mirror as going.
func (b *board) started(name string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.record(name, at).runningSince = at
}

// finished records a run's outcome, for the mirror's sink ("" for a
// mirror of one sink), and marks the mirror's run ended. Messages are
// redacted here, once, so that no credential that an error quotes is kept.
func (b *board) finished(name, sink string, start, end time.Time, result string, rep *fdlsync.Report, err error) {
	run := &RunStatus{Started: start, Ended: end, DurationSeconds: end.Sub(start).Seconds(), Result: result, Refused: []fdlsync.Refusal{}}
	if err != nil {
		run.Error = RedactText(err.Error())
	}
	if rep != nil {
		run.FilesCopied, run.BytesCopied = rep.FilesCopied, rep.BytesCopied
		run.VersionsPublished, run.RefsMoved = len(rep.VersionsPublished), len(rep.RefsMoved)
		for _, r := range rep.Refused {
			if len(run.Refused) == maxListed {
				run.RefusedMore++
				continue
			}
			r.Message = RedactText(r.Message)
			run.Refused = append(run.Refused, r)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.record(name, start).runningSince = time.Time{}
	r := b.record(recordKey(name, sink), start)
	r.last = run
	if result != ResultCanceled {
		r.decisive = result
	}
	if result == ResultSuccess {
		r.lastSuccess = end
	}
	// Only a run that went to the end compared every ref.
	if rep != nil && (result == ResultSuccess || result == ResultRefused) {
		r.refs = slices.Clone(rep.Refs)
		r.pending, r.pendingMore = nil, rep.PendingMore
		for _, p := range rep.Pending {
			if len(r.pending) == maxListed {
				r.pendingMore++
				continue
			}
			p.Message = RedactText(p.Message)
			r.pending = append(r.pending, p)
		}
		r.refsCompared = end
	}
}

// scrubbed records a scrub's outcome, for the mirror's sink ("" for a
// mirror of one sink).
func (b *board) scrubbed(name, sink string, s ScrubStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.record(recordKey(name, sink), s.Started).scrub = &s
}

// snapshot returns the status of the mirrors of cfg, in the config's
// order: an entry per mirror, or per sink of a mirror of several, in the
// order of its sinks.
func (b *board) snapshot(cfg *config.Config, now time.Time) Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Status{Generated: now, Mirrors: []MirrorStatus{}}
	sandbox := catalog.SandboxNow().Status()
	for _, m := range cfg.Mirrors {
		mr := b.record(m.Name, now)
		if len(m.Sinks) <= 1 {
			st.Mirrors = append(st.Mirrors, mr.status(m, m.Sink, 0, sandbox, now))
			continue
		}
		for i, sink := range m.Sinks {
			r := *b.record(recordKey(m.Name, sink), now)
			r.runningSince = mr.runningSince
			st.Mirrors = append(st.Mirrors, r.status(m, sink, i+1, sandbox, now))
		}
	}
	return st
}

// status is the entry of the record of m's sink (its index among
// several, from 1; 0 for a mirror of one).
func (r *mirrorRecord) status(m config.Mirror, sink string, index int, sandbox catalog.SandboxStatus, now time.Time) MirrorStatus {
	ms := MirrorStatus{
		Mirror: m.Name, Source: Redact(m.Source), Sink: Redact(sink), SinkIndex: index,
		Refs: slices.Clone(r.refs), Schedule: m.Schedule, CatalogSandbox: sandbox,
	}
	if ms.Refs == nil {
		ms.Refs = []fdlsync.RefStatus{}
	}
	ms.Pending, ms.PendingMore = slices.Clone(r.pending), r.pendingMore
	if ms.Pending == nil {
		ms.Pending = []fdlsync.PendingVersion{}
	}
	for _, ref := range ms.Refs {
		if ref.Behind {
			ms.Lag++
		}
	}
	ms.Behind = ms.Lag > 0 || len(ms.Pending) > 0
	for _, ref := range ms.Refs {
		if ref.State != fdlsync.RefExcluded && ref.LastChange.After(ms.UpstreamLastChange) {
			ms.UpstreamLastChange = ref.LastChange
		}
	}
	ms.UpstreamStale = m.MaxUpstreamAge > 0 && len(ms.Refs) > 0 && now.Sub(ms.UpstreamLastChange) > m.MaxUpstreamAge
	if !r.runningSince.IsZero() {
		t := r.runningSince
		ms.RunningSince = &t
	}
	if r.last != nil {
		last := *r.last
		last.Refused = slices.Clone(last.Refused)
		ms.LastRun = &last
		ms.Error = last.Error
	}
	if !r.lastSuccess.IsZero() {
		t := r.lastSuccess
		ms.LastSuccess = &t
	}
	if !r.refsCompared.IsZero() {
		t := r.refsCompared
		ms.RefsCompared = &t
	}
	ms.Scrub = m.Scrub
	if r.scrub != nil {
		sc := *r.scrub
		ms.LastScrub = &sc
	}
	ms.State = r.state(m.Schedule, ms.Lag, now)
	return ms
}

// state sums a mirror up in one word; see the State constants. A failing
// mirror stays failing however long it fails (its refusals say why); stale
// is for a mirror with no clean run and no failure to show for it.
func (r *mirrorRecord) state(schedule string, lag int, now time.Time) string {
	if !r.runningSince.IsZero() {
		return StateRunning
	}
	if r.decisive == ResultFailed || r.decisive == ResultRefused {
		return StateFailing
	}
	since := r.lastSuccess
	if since.IsZero() {
		since = r.added
	}
	if p := period(schedule, now); p > 0 && now.Sub(since) > StalePeriods*p {
		return StateStale
	}
	switch {
	case r.decisive == "":
		return StatePending
	case r.decisive == ResultLocked || lag > 0:
		// A locked run found work upstream that another writer holds
		// the sink's lock for: until a run here completes, behind.
		return StateBehind
	}
	return StateOK
}

// period is the time between two runs of a schedule from now; 0 for one
// that does not parse (config.Load has rejected those).
func period(schedule string, now time.Time) time.Duration {
	s, err := scheduleParser.Parse(schedule)
	if err != nil {
		return 0
	}
	next := s.Next(now)
	return s.Next(next).Sub(next)
}

// Redact is redact.URL: an address fit for a page anyone on the network
// may read.
func Redact(addr string) string { return redact.URL(addr) }

// RedactText is redact.Text: a message with every address it quotes, and
// every known secret, redacted.
func RedactText(s string) string { return redact.Text(s) }
