package daemon

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/prune"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Run results, the values of the runs_total "result" label.
const (
	ResultSuccess  = "success"  // finished, nothing refused
	ResultRefused  = "refused"  // finished, something refused (exit 1 of a plain sync)
	ResultFailed   = "failed"   // stopped as a whole: cannot open, lock held, another repository...
	ResultCanceled = "canceled" // stopped by a shutdown
	ResultLocked   = "locked"   // another run (a manual sync, another daemon) holds the sink's lock
)

var results = []string{ResultSuccess, ResultRefused, ResultFailed, ResultCanceled, ResultLocked}

// Metrics are the daemon's Prometheus metrics, on a registry of their own so
// that nothing a library registers globally leaks into /metrics.
type Metrics struct {
	Registry *prometheus.Registry

	lastSuccess   *prometheus.GaugeVec
	lastRun       *prometheus.GaugeVec
	lastDuration  *prometheus.GaugeVec
	runs          *prometheus.CounterVec
	skipped       *prometheus.CounterVec
	running       *prometheus.GaugeVec
	files         *prometheus.CounterVec
	bytes         *prometheus.CounterVec
	versions      *prometheus.CounterVec
	refsMoved     *prometheus.CounterVec
	refused       *prometheus.CounterVec
	lag           *prometheus.GaugeVec
	upChange      *prometheus.GaugeVec
	upStale       *prometheus.GaugeVec
	period        *prometheus.GaugeVec
	pending       *prometheus.GaugeVec
	reloads       *prometheus.CounterVec
	configSuccess prometheus.Gauge
	prunes        *prometheus.CounterVec
	pruned        *prometheus.CounterVec
	sandbox       *prometheus.GaugeVec
	connRefused   *prometheus.CounterVec
	connOpen      *prometheus.GaugeVec
	landlockABI   prometheus.Gauge
	scrubs        *prometheus.CounterVec
	lastScrub     *prometheus.GaugeVec
	scrubMissing  *prometheus.CounterVec
	scrubRestored *prometheus.CounterVec
	scrubPeriod   *prometheus.GaugeVec

	// twins are the per-run vectors' twins with a sink label (bySink).
	twins *bySink
	mu    sync.Mutex
	sinks map[string][]string // each mirror's sinks, as track last gave them
}

// A mirror of several sinks has the per-run series (runs, copies, lag,
// prunes, scrubs...) of each sink, told apart by a `sink` label: the
// sink's address, redacted as on the status page. The address, not the
// sink's place in the list: it is what the logs and /status.json name,
// it stays with the sink when the list is reordered, and no sink is
// named twice. A mirror of one sink keeps its series as they were,
// without the label. A vector's labels are fixed, so each per-run metric
// is two vectors of one name and help: the one registered as usual, and
// its twin with `sink`, which bySink collects unchecked (the registry
// then checks each series, not the family's labels). Prometheus reads an
// absent label as empty: {sink=""} selects the mirrors of one sink, and
// an aggregation by (mirror, sink) counts the sinks of both kinds apart.
// The mirror's own series (running, skipped ticks, schedule and scrub
// periods) have no sink label: the mirror's run is one run.
type bySink struct {
	counters map[*prometheus.CounterVec]*prometheus.CounterVec
	gauges   map[*prometheus.GaugeVec]*prometheus.GaugeVec
	all      []interface {
		prometheus.Collector
		DeletePartialMatch(prometheus.Labels) int
	}
}

// counter makes a per-run counter vector and its twin.
func (b *bySink) counter(opts prometheus.CounterOpts, labels []string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(opts, labels)
	twin := prometheus.NewCounterVec(opts, append(slices.Clone(labels), "sink"))
	b.counters[v] = twin
	b.all = append(b.all, twin)
	return v
}

// gauge makes a per-run gauge vector and its twin.
func (b *bySink) gauge(opts prometheus.GaugeOpts, labels []string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(opts, labels)
	twin := prometheus.NewGaugeVec(opts, append(slices.Clone(labels), "sink"))
	b.gauges[v] = twin
	b.all = append(b.all, twin)
	return v
}

// Describe describes nothing: the twins share their names with vectors
// registered with other labels, which only an unchecked collector may.
func (b *bySink) Describe(chan<- *prometheus.Desc) {}

// Collect collects every twin.
func (b *bySink) Collect(ch chan<- prometheus.Metric) {
	for _, v := range b.all {
		v.Collect(ch)
	}
}

// series are the per-run series of one sink of a mirror: sink "" for a
// mirror of one sink, whose series have no sink label.
type series struct {
	m            *Metrics
	mirror, sink string
}

// of returns the series of the mirror's sink; sink is "" for a mirror of
// one sink, else the sink's address (redacted here).
func (m *Metrics) of(mirror, sink string) series {
	if sink != "" {
		sink = Redact(sink)
	}
	return series{m, mirror, sink}
}

func (s series) counter(v *prometheus.CounterVec, labels ...string) prometheus.Counter {
	lv := append([]string{s.mirror}, labels...)
	if s.sink == "" {
		return v.WithLabelValues(lv...)
	}
	return s.m.twins.counters[v].WithLabelValues(append(lv, s.sink)...)
}

func (s series) gauge(v *prometheus.GaugeVec, labels ...string) prometheus.Gauge {
	lv := append([]string{s.mirror}, labels...)
	if s.sink == "" {
		return v.WithLabelValues(lv...)
	}
	return s.m.twins.gauges[v].WithLabelValues(append(lv, s.sink)...)
}

// NewMetrics makes the metrics and registers them, with the Go runtime and
// process collectors, on a new registry.
func NewMetrics() *Metrics {
	const ns = "fdl_mirror"
	mirror := []string{"mirror"}
	twins := &bySink{counters: map[*prometheus.CounterVec]*prometheus.CounterVec{}, gauges: map[*prometheus.GaugeVec]*prometheus.GaugeVec{}}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		twins:    twins,
		sinks:    map[string][]string{},
		lastSuccess: twins.gauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "last_success_timestamp_seconds",
			Help: "Unix time of the end of the last run that finished with nothing refused.",
		}, mirror),
		lastRun: twins.gauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "last_run_timestamp_seconds",
			Help: "Unix time of the end of the last run, whatever its result.",
		}, mirror),
		lastDuration: twins.gauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "last_run_duration_seconds",
			Help: "How long the last run took.",
		}, mirror),
		runs: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "runs_total",
			Help: "Runs by result: success, refused (something refused, the rest mirrored), failed (the run stopped as a whole), canceled (shutdown), locked (another run held the sink, for a sync or a prune).",
		}, []string{"mirror", "result"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "skipped_ticks_total",
			Help: "Schedule ticks skipped because the mirror's previous run was still going.",
		}, mirror),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "running",
			Help: "1 while a run of the mirror is going.",
		}, mirror),
		files: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "files_copied_total",
			Help: "Files written to the mirror.",
		}, mirror),
		bytes: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "bytes_copied_total",
			Help: "Bytes written to the mirror.",
		}, mirror),
		versions: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "versions_published_total",
			Help: "Versions made complete in the mirror.",
		}, mirror),
		refsMoved: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "refs_moved_total",
			Help: "Refs written in the mirror (new or moved).",
		}, mirror),
		refused: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "refused_total",
			Help: "Refs and versions refused, by kind (ref, version) and reason; counted again at every run that refuses them.",
		}, []string{"mirror", "kind", "reason"}),
		lag: twins.gauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "lag_refs",
			Help: "Upstream refs the mirror did not match at the end of the last run.",
		}, mirror),
		upChange: twins.gauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "upstream_last_change_timestamp_seconds",
			Help: "When the mirror last saw a selected upstream ref change (its record in .fdl-mirror/upstream.json).",
		}, mirror),
		upStale: twins.gauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "upstream_stale",
			Help: "1 when no selected upstream ref changed for longer than the mirror's max_upstream_age (a frozen upstream), else 0.",
		}, mirror),
		period: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "schedule_period_seconds",
			Help: "Time between two ticks of the mirror's schedule, for alerts in schedule periods (no clean run for 3 periods).",
		}, mirror),
		pending: twins.gauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "pending_versions",
			Help: "Ancestor versions the mirror could not mirror yet, kept and retried at every run.",
		}, mirror),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "config_loads_total",
			Help: "Config loads, at start and on SIGHUP, by result: success, failed (a failed reload keeps the old config).",
		}, []string{"result"}),
		configSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "config_last_reload_successful",
			Help: "1 when the last config load succeeded, 0 when it failed and the previous config is in use.",
		}),
		prunes: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "prunes_total",
			Help: "Prunes after a successful sync (mirrors with prune: true), by result: success, failed (nothing removed, or stopped part way at a safe point), locked (another run held the sink; also counted in runs_total).",
		}, []string{"mirror", "result"}),
		pruned: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "pruned_objects_total",
			Help: "Objects removed from the mirror by prunes (ref files, HEAD, version files, data files).",
		}, mirror),
		sandbox: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "catalog_sandbox",
			Help: "1 when catalog readers are confined by the layer (landlock, seccomp), 0 when the kernel does not give it.",
		}, []string{"layer"}),
		connRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "http_connections_refused_total",
			Help: "HTTP connections closed at accept, by reason: per-address (the client address holds its share), full (every slot, the health reserve too, is held).",
		}, []string{"reason"}),
		connOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "http_connections_open",
			Help: "HTTP connections open, by slot: public (counted against http_max_connections), reserve (past it, for probes and scrapes).",
		}, []string{"slot"}),
		landlockABI: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "catalog_sandbox_landlock_abi",
			Help: "The Landlock ABI catalog readers are confined with (0: none). Landlock counts as a layer from ABI 1 with seccomp, from 6 without.",
		}),
		scrubs: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "scrubs_total",
			Help: "Scrubs (runs with the repair's check: the scrub schedule, or every run with repair: true) by result: success, refused (a data file could not be checked or copied back), failed, canceled, locked.",
		}, []string{"mirror", "result"}),
		lastScrub: twins.gauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "last_scrub_timestamp_seconds",
			Help: "Unix time of the end of the last scrub that checked every data file of every complete version and copied back each one missing.",
		}, mirror),
		scrubMissing: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "scrub_missing_files_total",
			Help: "Data files scrubs found missing from the mirror, or of another size than their catalog records.",
		}, mirror),
		scrubRestored: twins.counter(prometheus.CounterOpts{
			Namespace: ns, Name: "scrub_restored_files_total",
			Help: "Data files scrubs copied back from upstream.",
		}, mirror),
		scrubPeriod: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "scrub_period_seconds",
			Help: "Time between two scrubs of the mirror's scrub schedule; absent for a mirror without one.",
		}, mirror),
	}
	m.connRefused.WithLabelValues(refusedPerAddress)
	m.connRefused.WithLabelValues(refusedFull)
	m.connOpen.WithLabelValues(slotPublic)
	m.connOpen.WithLabelValues(slotReserve)
	m.Registry.MustRegister(
		m.sandbox, m.connRefused, m.connOpen, m.landlockABI,
		m.lastSuccess, m.lastRun, m.lastDuration, m.runs, m.skipped, m.running,
		m.files, m.bytes, m.versions, m.refsMoved, m.refused, m.lag, m.upChange, m.upStale, m.period, m.pending,
		m.reloads, m.configSuccess, m.prunes, m.pruned,
		m.scrubs, m.lastScrub, m.scrubMissing, m.scrubRestored, m.scrubPeriod,
		twins,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failed")
	return m
}

// CatalogSandbox records the layers catalog readers have.
func (m *Metrics) CatalogSandbox(l catalog.Layers) {
	m.sandbox.WithLabelValues("landlock").Set(b2f(l.Landlock()))
	m.sandbox.WithLabelValues("seccomp").Set(b2f(l.Seccomp))
	m.landlockABI.Set(float64(l.LandlockABI))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// AddMirror creates a mirror's series at zero, so that rates and alerts work
// before its first run. The timestamps stay absent until there is one.
func (m *Metrics) AddMirror(name string) { m.addMirror(name, nil) }

// addMirror is AddMirror for a mirror of the given sinks: those of a
// mirror of several (each with series of its own), or none for a mirror
// of one. Series of sinks the mirror no longer has (a reload) are
// removed, and the plain series of a mirror that now has several.
func (m *Metrics) addMirror(name string, sinks []string) {
	m.mu.Lock()
	before := m.sinks[name]
	m.sinks[name] = slices.Clone(sinks)
	m.mu.Unlock()
	if len(sinks) > 0 && len(before) == 0 {
		m.removePlain(name)
	}
	for _, gone := range before {
		if !slices.Contains(sinks, gone) {
			m.removeSink(name, gone)
		}
	}
	m.skipped.WithLabelValues(name)
	m.running.WithLabelValues(name)
	for _, sink := range sinksOrOne(sinks) {
		s := m.of(name, sink)
		for _, r := range results {
			s.counter(m.runs, r)
		}
		s.counter(m.files)
		s.counter(m.bytes)
		s.counter(m.versions)
		s.counter(m.refsMoved)
	}
}

// sinksOrOne is the sinks whose series a mirror has: its sinks, or ""
// for a mirror of one sink.
func sinksOrOne(sinks []string) []string {
	if len(sinks) == 0 {
		return []string{""}
	}
	return sinks
}

// SchedulePeriod records the time between two ticks of a mirror's schedule.
func (m *Metrics) SchedulePeriod(name string, p time.Duration) {
	m.period.WithLabelValues(name).Set(p.Seconds())
}

// ScrubPeriod records the time between two scrubs of a mirror's scrub
// schedule, and makes its scrub counters at zero; 0 (no scrub schedule)
// removes the period.
func (m *Metrics) ScrubPeriod(name string, p time.Duration) { m.scrubPeriodOf(name, nil, p) }

// scrubPeriodOf is ScrubPeriod for a mirror of the given sinks (none for
// a mirror of one): the counters are each sink's.
func (m *Metrics) scrubPeriodOf(name string, sinks []string, p time.Duration) {
	if p <= 0 {
		m.scrubPeriod.DeleteLabelValues(name)
		return
	}
	m.scrubPeriod.WithLabelValues(name).Set(p.Seconds())
	for _, sink := range sinksOrOne(sinks) {
		s := m.of(name, sink)
		for _, r := range results {
			s.counter(m.scrubs, r)
		}
		s.counter(m.scrubMissing)
		s.counter(m.scrubRestored)
	}
}

// ObserveScrub records one finished scrub.
func (m *Metrics) ObserveScrub(name string, s ScrubStatus) { m.of(name, "").observeScrub(s) }

func (s series) observeScrub(sc ScrubStatus) {
	m := s.m
	s.counter(m.scrubs, sc.Result).Inc()
	s.counter(m.scrubMissing).Add(float64(sc.FilesMissing))
	s.counter(m.scrubRestored).Add(float64(sc.FilesRestored))
	if sc.Result == ResultSuccess {
		s.gauge(m.lastScrub).Set(float64(sc.Ended.UnixNano()) / 1e9)
	}
}

// perRun are the vectors whose series are a sink's (and have twins).
func (m *Metrics) perRun() []interface{ DeletePartialMatch(prometheus.Labels) int } {
	return []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.lastSuccess, m.lastRun, m.lastDuration, m.runs,
		m.files, m.bytes, m.versions, m.refsMoved, m.refused, m.lag, m.upChange, m.upStale, m.pending, m.prunes, m.pruned,
		m.scrubs, m.lastScrub, m.scrubMissing, m.scrubRestored,
	}
}

// removePlain drops the per-run series without a sink label of a mirror.
func (m *Metrics) removePlain(name string) {
	for _, v := range m.perRun() {
		v.DeletePartialMatch(prometheus.Labels{"mirror": name})
	}
}

// removeSink drops the series of one sink of a mirror of several.
func (m *Metrics) removeSink(name, sink string) {
	for _, v := range m.twins.all {
		v.DeletePartialMatch(prometheus.Labels{"mirror": name, "sink": Redact(sink)})
	}
}

// RemoveMirror drops every series of a mirror no longer in the config.
func (m *Metrics) RemoveMirror(name string) {
	m.mu.Lock()
	delete(m.sinks, name)
	m.mu.Unlock()
	l := prometheus.Labels{"mirror": name}
	for _, v := range append(m.perRun(), m.skipped, m.running, m.period, m.scrubPeriod) {
		v.DeletePartialMatch(l)
	}
	for _, v := range m.twins.all {
		v.DeletePartialMatch(l)
	}
}

// Skipped counts a tick that found the mirror's previous run still going.
func (m *Metrics) Skipped(name string) { m.skipped.WithLabelValues(name).Inc() }

// Running marks a mirror's run as going or not.
func (m *Metrics) Running(name string, on bool) {
	v := 0.0
	if on {
		v = 1
	}
	m.running.WithLabelValues(name).Set(v)
}

// ObservePrune records one prune of a mirror.
func (m *Metrics) ObservePrune(name string, rep *prune.Report, err error) {
	m.of(name, "").observePrune(rep, err)
}

func (s series) observePrune(rep *prune.Report, err error) {
	m := s.m
	result := "success"
	switch {
	case errors.Is(err, lock.ErrLocked):
		// Locked out by another run is not failed: counted as a locked
		// run, as a sync is.
		result = ResultLocked
		s.counter(m.runs, ResultLocked).Inc()
	case err != nil:
		result = "failed"
	}
	s.counter(m.prunes, result).Inc()
	if rep != nil && !rep.DryRun {
		s.counter(m.pruned).Add(float64(len(rep.Removed)))
	}
}

// Result classifies what a run (mirror.Run) returned.
func Result(rep *fdlsync.Report, err error, canceled bool) string {
	switch {
	case err == nil && rep != nil && rep.OK():
		return ResultSuccess
	case canceled:
		return ResultCanceled
	case errors.Is(err, lock.ErrLocked):
		return ResultLocked
	case err != nil:
		return ResultFailed
	}
	return ResultRefused
}

// RefusalKind says whether a refusal is about a ref or a version.
func RefusalKind(r fdlsync.Refusal) string {
	if r.Ref != "" || r.Reason == fdlsync.ReasonBadRef {
		return "ref"
	}
	return "version"
}

// ObserveUpstream records when upstream last changed and whether that is
// longer ago than maxAge (0: never stale).
func (m *Metrics) ObserveUpstream(name string, lastChange time.Time, maxAge time.Duration, now time.Time) {
	m.of(name, "").observeUpstream(lastChange, maxAge, now)
}

func (s series) observeUpstream(lastChange time.Time, maxAge time.Duration, now time.Time) {
	if lastChange.IsZero() {
		return
	}
	s.gauge(s.m.upChange).Set(float64(lastChange.UnixNano()) / 1e9)
	stale := 0.0
	if maxAge > 0 && now.Sub(lastChange) > maxAge {
		stale = 1
	}
	s.gauge(s.m.upStale).Set(stale)
}

// Observe records one finished run.
func (m *Metrics) Observe(name string, end time.Time, took time.Duration, result string, rep *fdlsync.Report) {
	m.of(name, "").observe(end, took, result, rep)
}

func (s series) observe(end time.Time, took time.Duration, result string, rep *fdlsync.Report) {
	m := s.m
	s.counter(m.runs, result).Inc()
	s.gauge(m.lastRun).Set(float64(end.UnixNano()) / 1e9)
	s.gauge(m.lastDuration).Set(took.Seconds())
	if result == ResultSuccess {
		s.gauge(m.lastSuccess).Set(float64(end.UnixNano()) / 1e9)
	}
	if rep == nil {
		return
	}
	s.counter(m.files).Add(float64(rep.FilesCopied))
	s.counter(m.bytes).Add(float64(rep.BytesCopied))
	s.counter(m.versions).Add(float64(len(rep.VersionsPublished)))
	s.counter(m.refsMoved).Add(float64(len(rep.RefsMoved)))
	for _, r := range rep.Refused {
		s.counter(m.refused, RefusalKind(r), r.Reason).Inc()
	}
	// Only a run that went to the end compared every ref.
	if result == ResultSuccess || result == ResultRefused {
		s.gauge(m.lag).Set(float64(rep.Lag))
		s.gauge(m.pending).Set(float64(len(rep.Pending)))
	}
}

// Reloaded records a config load or reload.
func (m *Metrics) Reloaded(ok bool) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.configSuccess.Set(1)
	} else {
		m.reloads.WithLabelValues("failed").Inc()
		m.configSuccess.Set(0)
	}
}
