package daemon

import (
	"errors"
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
}

// NewMetrics makes the metrics and registers them, with the Go runtime and
// process collectors, on a new registry.
func NewMetrics() *Metrics {
	const ns = "fdl_mirror"
	mirror := []string{"mirror"}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "last_success_timestamp_seconds",
			Help: "Unix time of the end of the last run that finished with nothing refused.",
		}, mirror),
		lastRun: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "last_run_timestamp_seconds",
			Help: "Unix time of the end of the last run, whatever its result.",
		}, mirror),
		lastDuration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "last_run_duration_seconds",
			Help: "How long the last run took.",
		}, mirror),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
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
		files: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "files_copied_total",
			Help: "Files written to the mirror.",
		}, mirror),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "bytes_copied_total",
			Help: "Bytes written to the mirror.",
		}, mirror),
		versions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "versions_published_total",
			Help: "Versions made complete in the mirror.",
		}, mirror),
		refsMoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "refs_moved_total",
			Help: "Refs written in the mirror (new or moved).",
		}, mirror),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "refused_total",
			Help: "Refs and versions refused, by kind (ref, version) and reason; counted again at every run that refuses them.",
		}, []string{"mirror", "kind", "reason"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "lag_refs",
			Help: "Upstream refs the mirror did not match at the end of the last run.",
		}, mirror),
		upChange: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "upstream_last_change_timestamp_seconds",
			Help: "When the mirror last saw a selected upstream ref change (its record in .fdl-mirror/upstream.json).",
		}, mirror),
		upStale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "upstream_stale",
			Help: "1 when no selected upstream ref changed for longer than the mirror's max_upstream_age (a frozen upstream), else 0.",
		}, mirror),
		period: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "schedule_period_seconds",
			Help: "Time between two ticks of the mirror's schedule, for alerts in schedule periods (no clean run for 3 periods).",
		}, mirror),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
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
		prunes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "prunes_total",
			Help: "Prunes after a successful sync (mirrors with prune: true), by result: success, failed (nothing removed, or stopped part way at a safe point), locked (another run held the sink; also counted in runs_total).",
		}, []string{"mirror", "result"}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
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
		scrubs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "scrubs_total",
			Help: "Scrubs (runs with the repair's check: the scrub schedule, or every run with repair: true) by result: success, refused (a data file could not be checked or copied back), failed, canceled, locked.",
		}, []string{"mirror", "result"}),
		lastScrub: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "last_scrub_timestamp_seconds",
			Help: "Unix time of the end of the last scrub that checked every data file of every complete version and copied back each one missing.",
		}, mirror),
		scrubMissing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "scrub_missing_files_total",
			Help: "Data files scrubs found missing from the mirror, or of another size than their catalog records.",
		}, mirror),
		scrubRestored: prometheus.NewCounterVec(prometheus.CounterOpts{
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
func (m *Metrics) AddMirror(name string) {
	for _, r := range results {
		m.runs.WithLabelValues(name, r)
	}
	m.skipped.WithLabelValues(name)
	m.running.WithLabelValues(name)
	m.files.WithLabelValues(name)
	m.bytes.WithLabelValues(name)
	m.versions.WithLabelValues(name)
	m.refsMoved.WithLabelValues(name)
}

// SchedulePeriod records the time between two ticks of a mirror's schedule.
func (m *Metrics) SchedulePeriod(name string, p time.Duration) {
	m.period.WithLabelValues(name).Set(p.Seconds())
}

// ScrubPeriod records the time between two scrubs of a mirror's scrub
// schedule, and makes its scrub counters at zero; 0 (no scrub schedule)
// removes the period.
func (m *Metrics) ScrubPeriod(name string, p time.Duration) {
	if p <= 0 {
		m.scrubPeriod.DeleteLabelValues(name)
		return
	}
	m.scrubPeriod.WithLabelValues(name).Set(p.Seconds())
	for _, r := range results {
		m.scrubs.WithLabelValues(name, r)
	}
	m.scrubMissing.WithLabelValues(name)
	m.scrubRestored.WithLabelValues(name)
}

// ObserveScrub records one finished scrub.
func (m *Metrics) ObserveScrub(name string, s ScrubStatus) {
	m.scrubs.WithLabelValues(name, s.Result).Inc()
	m.scrubMissing.WithLabelValues(name).Add(float64(s.FilesMissing))
	m.scrubRestored.WithLabelValues(name).Add(float64(s.FilesRestored))
	if s.Result == ResultSuccess {
		m.lastScrub.WithLabelValues(name).Set(float64(s.Ended.UnixNano()) / 1e9)
	}
}

// RemoveMirror drops every series of a mirror no longer in the config.
func (m *Metrics) RemoveMirror(name string) {
	l := prometheus.Labels{"mirror": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.lastSuccess, m.lastRun, m.lastDuration, m.runs, m.skipped, m.running,
		m.files, m.bytes, m.versions, m.refsMoved, m.refused, m.lag, m.upChange, m.upStale, m.period, m.pending, m.prunes, m.pruned,
		m.scrubs, m.lastScrub, m.scrubMissing, m.scrubRestored, m.scrubPeriod,
	} {
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
	result := "success"
	switch {
	case errors.Is(err, lock.ErrLocked):
		// Locked out by another run is not failed: counted as a locked
		// run, as a sync is.
		result = ResultLocked
		m.runs.WithLabelValues(name, ResultLocked).Inc()
	case err != nil:
		result = "failed"
	}
	m.prunes.WithLabelValues(name, result).Inc()
	if rep != nil && !rep.DryRun {
		m.pruned.WithLabelValues(name).Add(float64(len(rep.Removed)))
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

// Observe records one finished run.
// ObserveUpstream records when upstream last changed and whether that is
// longer ago than maxAge (0: never stale).
func (m *Metrics) ObserveUpstream(name string, lastChange time.Time, maxAge time.Duration, now time.Time) {
	if lastChange.IsZero() {
		return
	}
	m.upChange.WithLabelValues(name).Set(float64(lastChange.UnixNano()) / 1e9)
	stale := 0.0
	if maxAge > 0 && now.Sub(lastChange) > maxAge {
		stale = 1
	}
	m.upStale.WithLabelValues(name).Set(stale)
}

func (m *Metrics) Observe(name string, end time.Time, took time.Duration, result string, rep *fdlsync.Report) {
	m.runs.WithLabelValues(name, result).Inc()
	m.lastRun.WithLabelValues(name).Set(float64(end.UnixNano()) / 1e9)
	m.lastDuration.WithLabelValues(name).Set(took.Seconds())
	if result == ResultSuccess {
		m.lastSuccess.WithLabelValues(name).Set(float64(end.UnixNano()) / 1e9)
	}
	if rep == nil {
		return
	}
	m.files.WithLabelValues(name).Add(float64(rep.FilesCopied))
	m.bytes.WithLabelValues(name).Add(float64(rep.BytesCopied))
	m.versions.WithLabelValues(name).Add(float64(len(rep.VersionsPublished)))
	m.refsMoved.WithLabelValues(name).Add(float64(len(rep.RefsMoved)))
	for _, r := range rep.Refused {
		m.refused.WithLabelValues(name, RefusalKind(r), r.Reason).Inc()
	}
	// Only a run that went to the end compared every ref.
	if result == ResultSuccess || result == ResultRefused {
		m.lag.WithLabelValues(name).Set(float64(rep.Lag))
		m.pending.WithLabelValues(name).Set(float64(len(rep.Pending)))
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
