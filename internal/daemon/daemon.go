// Package daemon runs the mirrors of a config file on their schedules, and
// serves their metrics and health over HTTP.
//
// Each mirror runs on its own: a tick that comes while the mirror's previous
// run is still going is skipped (never two runs of one mirror at once), and
// one mirror's failure, or even a panic, never stops the others. Stopping
// cancels the running syncs, which the engine ends at a safe point, so a
// daemon stopped at any moment leaves every ref in every mirror pointing at
// a complete version.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/prune"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// RunFunc runs one mirror to one sink once: a stand-in for the engine,
// which tests give as Options.Run.
type RunFunc func(ctx context.Context, job mirror.Job, log *zap.Logger, progress func(files, bytes int64)) (*fdlsync.Report, error)

// PruneFunc prunes one mirror once; mirror.Prune in production.
type PruneFunc func(ctx context.Context, job mirror.PruneJob, log *zap.Logger) (*prune.Report, error)

// DefaultStopTimeout is how long a stop waits for running syncs to reach a
// safe point: with the HTTP server's shutdown after it, the process exits
// within the 15 s an orchestrator usually grants before SIGKILL.
const DefaultStopTimeout = 12 * time.Second

// Options configure a Daemon.
type Options struct {
	// ConfigPath is the file loaded at start and on every reload.
	ConfigPath string
	// Shard limits the daemon to the mirrors of one shard of the config,
	// at start and at every reload; the zero Shard runs them all.
	Shard  config.Shard
	Logger *zap.Logger
	// Run stands in for the engine, called once per sink; nil means
	// mirror.RunJob, which runs a mirror of several sinks in one run
	// that reads the upstream once.
	Run RunFunc
	// Prune prunes a mirror configured with prune: true after each
	// successful run; nil means mirror.Prune.
	Prune PruneFunc
	// StopTimeout bounds the wait for running syncs at a stop; 0 means
	// DefaultStopTimeout.
	StopTimeout time.Duration
	// HTTPIdleTimeout closes a kept-alive connection to the status server
	// that sends no request for this long; 0 means DefaultHTTPIdleTimeout.
	HTTPIdleTimeout time.Duration
	// HTTPMaxConnections bounds the connections the status server holds
	// at once; 0 means DefaultHTTPMaxConnections.
	HTTPMaxConnections int
	// HTTPMaxPerAddress bounds the connections of one client address;
	// 0 means DefaultHTTPMaxPerAddress.
	HTTPMaxPerAddress int
	// HTTPHealthReserve connections past HTTPMaxConnections serve
	// /healthz, /readyz and /metrics only; 0 means
	// DefaultHTTPHealthReserve, a negative value none.
	HTTPHealthReserve int
	// Notify tunes the delivery of notifications; the zero value is the
	// production default.
	Notify NotifyOptions
}

// The status server's bounds. Its pages are small and made in
// milliseconds, so a client that takes longer than these is stuck or
// hostile, and each connection it holds is a descriptor the daemon needs
// for its stores.
const (
	// DefaultHTTPReadHeaderTimeout bounds reading a request's headers:
	// a client sends them in one packet, so a connection dripping them
	// is closed after this.
	DefaultHTTPReadHeaderTimeout = 3 * time.Second
	// DefaultHTTPReadTimeout bounds reading one request, headers and
	// body (a CloudEvent trigger's, at most 1 MiB).
	DefaultHTTPReadTimeout = 10 * time.Second
	// DefaultHTTPWriteTimeout bounds a response from the end of its
	// request: far above the largest page (the status page of a
	// thousand mirrors, /metrics of as many) on a slow link.
	DefaultHTTPWriteTimeout = 60 * time.Second
	// DefaultHTTPIdleTimeout closes a kept-alive connection left idle:
	// no longer than the shortest probe period of deploy/kubernetes
	// (10 s), so that a connection a client keeps is not held between
	// two probes.
	DefaultHTTPIdleTimeout = 10 * time.Second
	// DefaultHTTPMaxConnections: a Prometheus, a few browsers and probes
	// need a handful; connections above the bound (and the health
	// reserve) are closed at accept.
	DefaultHTTPMaxConnections = 64
)

// Daemon schedules the mirrors of one config file.
type Daemon struct {
	opts    Options
	log     *zap.Logger
	metrics *Metrics
	board   *board // what the status page shows
	ready   atomic.Bool

	// runCtx is the parent of every run; cancelling it is how a stop asks
	// running syncs to end.
	runCtx    context.Context
	cancelRun context.CancelFunc

	mu       sync.Mutex
	cfg      *config.Config
	gen      int // bumped at every reload; ticks of an older schedule are ignored
	sched    *cron.Cron
	running  map[string]bool
	queued   map[string]bool // a trigger came during the run (trigger.go)
	scrubDue map[string]bool // the mirror's next run is a scrub (scrub.go)
	stopping bool
	runs     sync.WaitGroup

	trig   *triggers // POST /mirrors/{name}/sync (trigger.go)
	notify *Notifier // events after runs (notify.go)
}

// New loads the config and prepares the daemon. A config that does not
// validate is returned as config.Problems, every problem with its line.
func New(opts Options) (*Daemon, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Prune == nil {
		opts.Prune = mirror.Prune
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.HTTPIdleTimeout <= 0 {
		opts.HTTPIdleTimeout = DefaultHTTPIdleTimeout
	}
	if opts.HTTPMaxConnections <= 0 {
		opts.HTTPMaxConnections = DefaultHTTPMaxConnections
	}
	if opts.HTTPMaxPerAddress <= 0 {
		opts.HTTPMaxPerAddress = DefaultHTTPMaxPerAddress
	}
	switch {
	case opts.HTTPHealthReserve == 0:
		opts.HTTPHealthReserve = DefaultHTTPHealthReserve
	case opts.HTTPHealthReserve < 0:
		opts.HTTPHealthReserve = 0
	}
	cfg, err := load(opts.ConfigPath, opts.Shard)
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		opts:    opts,
		log:     opts.Logger,
		metrics: NewMetrics(),
		board:   newBoard(),
		cfg:     cfg,
		running: map[string]bool{},
	}
	d.runCtx, d.cancelRun = context.WithCancel(context.Background())
	d.trig = newTriggers(d.metrics.Registry)
	nopts := opts.Notify
	if nopts.SpoolFile == "" {
		nopts.SpoolFile = cfg.NotifySpool
	}
	d.notify = NewNotifier(d.log, d.metrics.Registry, nopts)
	for _, m := range cfg.Mirrors {
		d.track(m)
	}
	d.warnExposed(cfg)
	d.metrics.Reloaded(true)
	if l := catalog.ProbeSandbox(); len(l.Missing()) > 0 {
		d.log.Warn("catalog readers run "+l.String(), zap.Strings("missing", l.Missing()))
	}
	d.metrics.CatalogSandbox(catalog.ProbeSandbox())
	if path, note := catalog.ReaderNow(); note != "" {
		d.log.Info("catalog readers start from "+path+", re-executed", zap.String("why", note))
	} else {
		d.log.Info("catalog readers start from " + path)
	}
	return d, nil
}

// load reads a config the daemon can run: every mirror needs a schedule,
// those of other shards too (every replica of a sharded daemon reads the
// same file and must agree whether it is valid). It returns the mirrors
// of shard.
func load(path string, shard config.Shard) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	var ps config.Problems
	for _, m := range cfg.Mirrors {
		if m.Schedule == "" {
			ps = append(ps, config.Problem{File: path, Line: m.Line,
				Msg: fmt.Sprintf("mirror %q: no schedule; the daemon needs one for every mirror (sync --config runs mirrors without)", m.Name)})
		}
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return cfg.InShard(shard), nil
}

// notifyTargets are every receiver of cfg's mirrors.
func notifyTargets(cfg *config.Config) []config.NotifyTarget {
	var out []config.NotifyTarget
	for _, m := range cfg.Mirrors {
		out = append(out, m.Notify...)
	}
	return out
}

// warnExposed warns when the config file holds a credential itself and
// every user of the machine can read it.
func (d *Daemon) warnExposed(cfg *config.Config) {
	if where := config.ExposedSecrets(cfg); where != nil {
		d.log.Warn("the config holds secrets and every user can read it: chmod o-r it, or move them to ${VAR}s or http_headers_file",
			zap.String("config", cfg.Path), zap.Strings("secrets_at", where))
	}
}

// track makes a configured mirror known to the metrics and the status
// page, each of its sinks where it has several.
func (d *Daemon) track(m config.Mirror) {
	now := time.Now()
	sinks := several(m)
	d.metrics.addMirror(m.Name, sinks)
	d.metrics.SchedulePeriod(m.Name, period(m.Schedule, now))
	d.metrics.scrubPeriodOf(m.Name, sinks, period(m.Scrub, now))
	d.board.add(m.Name, sinks, now)
}

// several is the sinks of a mirror of several, each with its own record,
// series and log lines; nil for a mirror of one sink, whose are the
// mirror's, as they were before mirrors had several.
func several(m config.Mirror) []string {
	if len(m.Sinks) > 1 {
		return m.Sinks
	}
	return nil
}

// Metrics returns the daemon's metrics.
func (d *Daemon) Metrics() *Metrics { return d.metrics }

// Config returns the config in use.
func (d *Daemon) Config() *config.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// Handler serves the status page on / and as JSON on /status.json,
// the trigger, /metrics, /healthz (200 while the process serves) and
// /readyz (200 once the config is loaded and the mirrors scheduled, 503
// before and while stopping). Each takes GET (and HEAD); another method
// is 405.
func (d *Daemon) Handler() http.Handler { return d.handler(true, true) }

// handler serves the public endpoints (status page, trigger) and the
// health ones (/metrics, /healthz, /readyz), either or both.
func (d *Daemon) handler(public, health bool) http.Handler {
	mux := http.NewServeMux()
	if public {
		mux.HandleFunc("GET /{$}", d.servePage)
		mux.HandleFunc("GET /status.json", d.serveStatusJSON)
		d.handleTriggers(mux)
	}
	if health {
		mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.Registry, promhttp.HandlerOpts{
			Registry:          d.metrics.Registry,
			EnableOpenMetrics: true,
		}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, "ok")
		})
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			if !d.ready.Load() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ready")
		})
	}
	return mux
}

// server is one listener and its HTTP server.
type server struct {
	srv  *http.Server
	done chan struct{}
}

// listen serves h on addr, admitting connections as admitListener says.
func (d *Daemon) listen(addr, what string, h http.Handler, reserve int) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	al := newAdmitListener(ln, d.opts.HTTPMaxConnections, d.opts.HTTPMaxPerAddress, reserve, d.metrics.connRefused, d.metrics.connOpen)
	s := &server{done: make(chan struct{}), srv: &http.Server{
		Handler:           reserveOnly(h),
		ConnContext:       connContext,
		ReadHeaderTimeout: DefaultHTTPReadHeaderTimeout,
		ReadTimeout:       DefaultHTTPReadTimeout,
		WriteTimeout:      DefaultHTTPWriteTimeout,
		IdleTimeout:       d.opts.HTTPIdleTimeout,
		// The server's own errors (a bad TLS hello, a client gone)
		// are the client's business, not the operator's.
		ErrorLog: zap.NewStdLog(d.log.WithOptions(zap.IncreaseLevel(zap.ErrorLevel))),
	}}
	d.log.Info("serving "+what, zap.String("address", ln.Addr().String()))
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(al); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("HTTP server stopped", zap.String("address", addr), zap.Error(err))
		}
	}()
	return s, nil
}

func (s *server) shutdown() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	<-s.done
}

// Serve schedules the mirrors and serves HTTP on the config's listen address
// until ctx is done; a value on reload reloads the config. When ctx is done
// it stops scheduling, cancels running syncs and waits for them (at most
// StopTimeout). The error is for what kept it from starting.
func (d *Daemon) Serve(ctx context.Context, reload <-chan struct{}) error {
	cfg := d.Config()
	var public, health *server
	var err error
	if cfg.MetricsListen != "" {
		health, err = d.listen(cfg.MetricsListen, "/metrics, /healthz, /readyz", d.handler(false, true), 0)
		if err != nil {
			return err
		}
	}
	if cfg.Listen != "" {
		what, withHealth, reserve := "the status page (/, /status.json), /metrics, /healthz, /readyz", true, d.opts.HTTPHealthReserve
		if health != nil {
			what, withHealth, reserve = "the status page (/, /status.json)", false, 0
		}
		public, err = d.listen(cfg.Listen, what, d.handler(true, withHealth), reserve)
		if err != nil {
			health.shutdown()
			return err
		}
	}

	// Serve, not New: daemon --check must leave the spool alone.
	d.notify.LoadSpool(notifyTargets(cfg))
	d.mu.Lock()
	d.scheduleLocked(d.cfg)
	d.mu.Unlock()
	d.ready.Store(true)

wait:
	for {
		select {
		case <-reload:
			d.Reload()
		case <-ctx.Done():
			break wait
		}
	}

	d.ready.Store(false)
	d.stop()
	// Notifications still queued go out while the server shuts down.
	notified := make(chan struct{})
	go func() {
		defer close(notified)
		d.notify.Close(NotifyWaitAtStop)
	}()
	defer func() { <-notified }()
	public.shutdown()
	health.shutdown()
	return nil
}

// stop ends scheduling, cancels the running syncs and waits for them to
// reach a safe point.
func (d *Daemon) stop() {
	d.mu.Lock()
	d.stopping = true
	if d.sched != nil {
		d.sched.Stop()
	}
	running := make([]string, 0, len(d.running))
	for name := range d.running {
		running = append(running, name)
	}
	d.mu.Unlock()
	slices.Sort(running)
	d.log.Info("stopping: no new runs; cancelling running syncs", zap.Strings("running", running))
	d.cancelRun()

	done := make(chan struct{})
	go func() {
		d.runs.Wait()
		close(done)
	}()
	select {
	case <-done:
		d.log.Info("stopped")
	case <-time.After(d.opts.StopTimeout):
		// Writes are atomic and refs move last: exiting now still leaves
		// no ref to an incomplete version, only temporary files to clean.
		d.log.Error("syncs still running after the stop timeout; exiting anyway", zap.Duration("timeout", d.opts.StopTimeout))
	}
}

// Reload reads the config file again. A config that does not validate is
// logged, with every problem, and the one in use kept.
func (d *Daemon) Reload() error {
	cfg, err := load(d.opts.ConfigPath, d.opts.Shard)
	if err != nil {
		d.metrics.Reloaded(false)
		var ps config.Problems
		if errors.As(err, &ps) {
			lines := make([]string, len(ps))
			for i, p := range ps {
				lines[i] = p.String()
			}
			d.log.Error("config reload refused; keeping the config in use", zap.String("config", d.opts.ConfigPath), zap.Strings("problems", lines))
		} else {
			d.log.Error("config reload failed; keeping the config in use", zap.String("config", d.opts.ConfigPath), zap.Error(err))
		}
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return nil
	}
	old := d.cfg
	if cfg.Listen != old.Listen {
		d.log.Warn("listen changed; it takes effect at the next restart", zap.String("in_use", old.Listen), zap.String("new", cfg.Listen))
		cfg.Listen = old.Listen
	}
	if cfg.MetricsListen != old.MetricsListen {
		d.log.Warn("metrics_listen changed; it takes effect at the next restart", zap.String("in_use", old.MetricsListen), zap.String("new", cfg.MetricsListen))
		cfg.MetricsListen = old.MetricsListen
	}
	for _, m := range old.Mirrors {
		if _, ok := cfg.Mirror(m.Name); !ok && !d.running[m.Name] {
			d.metrics.RemoveMirror(m.Name)
			d.board.remove(m.Name)
			d.trig.forget(m.Name)
		}
		if n, ok := cfg.Mirror(m.Name); !ok || n.Scrub == "" {
			delete(d.scrubDue, m.Name)
		}
	}
	for _, m := range cfg.Mirrors {
		d.track(m)
	}
	d.cfg = cfg
	d.scheduleLocked(cfg)
	d.metrics.Reloaded(true)
	d.warnExposed(cfg)
	d.log.Info("config reloaded", zap.String("config", d.opts.ConfigPath), zap.Strings("mirrors", cfg.Names()))
	return nil
}

// scheduleLocked replaces the schedule with cfg's. Runs going on continue;
// their mirrors still skip ticks until they end.
func (d *Daemon) scheduleLocked(cfg *config.Config) {
	if d.sched != nil {
		d.sched.Stop()
	}
	d.gen++
	gen := d.gen
	d.sched = cron.New(cron.WithParser(scheduleParser))
	for _, m := range cfg.Mirrors {
		name := m.Name
		if _, err := d.sched.AddFunc(m.Schedule, func() { d.tick(gen, name) }); err != nil {
			// config.Load parsed the same spec with the same parser.
			d.log.Error("mirror not scheduled", zap.String("mirror", name), zap.String("schedule", m.Schedule), zap.Error(err))
			continue
		}
		where := zap.String("sink", redact.URL(m.Sink))
		if sinks := several(m); sinks != nil {
			shown := make([]string, len(sinks))
			for i, s := range sinks {
				shown[i] = redact.URL(s)
			}
			where = zap.Strings("sinks", shown)
		}
		d.log.Info("mirror scheduled", zap.String("mirror", name), zap.String("schedule", m.Schedule),
			zap.String("source", redact.URL(m.Source)), where)
		if m.Scrub == "" {
			continue
		}
		if _, err := d.sched.AddFunc(m.Scrub, func() { d.scrubTick(gen, name) }); err != nil {
			d.log.Error("mirror's scrub not scheduled", zap.String("mirror", name), zap.String("scrub", m.Scrub), zap.Error(err))
			continue
		}
		d.log.Info("mirror's scrub scheduled", zap.String("mirror", name), zap.String("scrub", m.Scrub))
	}
	d.sched.Start()
}

// lockLive takes d.mu and returns the mirror a tick of schedule
// generation gen is for. It returns false, with d.mu released, when the
// daemon stops, the schedule was replaced, or the mirror is gone; on true
// the caller holds d.mu.
func (d *Daemon) lockLive(gen int, name string) (config.Mirror, bool) {
	d.mu.Lock()
	if d.stopping || gen != d.gen {
		d.mu.Unlock()
		return config.Mirror{}, false
	}
	m, ok := d.cfg.Mirror(name)
	if !ok {
		d.mu.Unlock()
	}
	return m, ok
}

// tick starts a run of the mirror unless one is going.
func (d *Daemon) tick(gen int, name string) {
	m, ok := d.lockLive(gen, name)
	if !ok {
		return
	}
	if d.running[name] {
		d.mu.Unlock()
		d.metrics.Skipped(name)
		d.log.Info("previous run still going; tick skipped", zap.String("mirror", name))
		return
	}
	d.running[name] = true
	d.runs.Add(1)
	d.mu.Unlock()
	d.runThenQueued(m)
}

// runOnce runs a mirror, with the repair's check when scrub is set (or
// the mirror has repair: true), and records the outcome, each sink's of a
// mirror of several. A panic in the run is recovered and counted as a
// failure: it must not take the other mirrors down with it.
func (d *Daemon) runOnce(m config.Mirror, scrub bool) {
	log := d.log.With(zap.String("mirror", m.Name))
	job := mirror.SyncJob(m)
	job.Repair = job.Repair || scrub
	d.metrics.Running(m.Name, true)
	defer d.metrics.Running(m.Name, false)
	start := time.Now()
	d.board.started(m.Name, start)
	var runs []mirror.SinkRun
	func() {
		defer func() {
			if p := recover(); p != nil {
				err := fmt.Errorf("panic: %v", p)
				log.Error("run panicked", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
				runs = nil
				for _, sink := range m.AllSinks() {
					runs = append(runs, mirror.SinkRun{Sink: sink, Err: err})
				}
			}
		}()
		log.Debug("run started", zap.Bool("scrub", job.Repair))
		// The engine adds the mirror's name to its own logs, and the
		// sink's where the mirror has several.
		runs = d.runJob(d.runCtx, job)
	}()
	end := time.Now()
	d.metrics.CatalogSandbox(catalog.SandboxNow())
	scrubLocked := false
	for _, r := range runs {
		if d.finishSink(m, r, job.Repair, start, end, log) == ResultLocked {
			scrubLocked = true
		}
	}
	if scrubLocked && scrub {
		// A sink the scrub did not get to check: the next run is one
		// again, of every sink (the others' check is only repeated).
		d.scrubAgain(m.Name)
	}
}

// runJob runs a mirror's job to each of its sinks: mirror.RunJob, which
// reads the upstream once for all of them; or Options.Run, the engine's
// stand-in, once per sink.
func (d *Daemon) runJob(ctx context.Context, job mirror.Job) []mirror.SinkRun {
	if d.opts.Run == nil {
		return mirror.RunJob(ctx, job, d.log, nil)
	}
	sinks := job.Sinks
	if len(sinks) == 0 {
		sinks = []string{job.Sink}
	}
	runs := make([]mirror.SinkRun, len(sinks))
	for i, sink := range sinks {
		j := job
		j.Sink = sink
		runs[i].Sink = sink
		runs[i].Report, runs[i].Err = d.opts.Run(ctx, j, d.log, nil)
	}
	return runs
}

// finishSink records one sink's part of a run of m (the mirror's own for
// a mirror of one sink): its metrics, status, scrub, notifications, log
// line and prune. It returns the sink's result. A sink of a mirror of
// several is named in each: its log lines carry its address (redacted),
// its series a sink label, its status an entry of its own.
func (d *Daemon) finishSink(m config.Mirror, r mirror.SinkRun, repair bool, start, end time.Time, log *zap.Logger) string {
	rep, err := r.Report, r.Err
	sink := ""
	if several(m) != nil {
		sink = r.Sink
		log = log.With(zap.String("sink", redact.URL(sink)))
		if rep != nil && !rep.Started.IsZero() {
			// The sinks ran one after another: each its own time.
			start, end = rep.Started, rep.Started.Add(rep.Duration)
		}
	}
	series := d.metrics.of(m.Name, sink)
	result := Result(rep, err, d.runCtx.Err() != nil)
	series.observe(end, end.Sub(start), result, rep)
	if rep != nil {
		series.observeUpstream(rep.UpstreamLastChange, m.MaxUpstreamAge, end)
	}
	d.board.finished(m.Name, sink, start, end, result, rep, err)
	if repair {
		sc := scrubOutcome(rep, result, start, end)
		series.observeScrub(sc)
		if result != ResultCanceled && result != ResultLocked {
			// Either says nothing of the sink: the page keeps the
			// scrub before.
			d.board.scrubbed(m.Name, sink, sc)
		}
		log.Info("scrub finished", zap.String("result", sc.Result),
			zap.Int("files_missing", sc.FilesMissing), zap.Int("files_restored", sc.FilesRestored))
	}
	// The notifier names the sink the run went to, and reads the moved
	// versions' records from it.
	ran := m
	ran.Sink = r.Sink
	d.notify.AfterRun(ran, rep)

	fields := []zap.Field{zap.String("result", result), zap.Duration("took", end.Sub(start))}
	if rep != nil {
		fields = append(fields, zap.Int64("files_copied", rep.FilesCopied), zap.Int64("bytes_copied", rep.BytesCopied),
			zap.Int("versions_published", len(rep.VersionsPublished)), zap.Int("refs_moved", len(rep.RefsMoved)),
			zap.Int("refused", len(rep.Refused)), zap.Int("lag", rep.Lag))
	}
	switch {
	case err != nil && result == ResultCanceled:
		log.Info("run stopped at a safe point", append(fields, zap.Error(redact.Error(err)))...)
	case result == ResultLocked:
		// Daemon replicas meet here at every tick with something new: the
		// one that got the lock runs the mirror. Nothing is wrong, so info;
		// a lock held past its expiry is taken over in lock.Lock instead.
		log.Info("another run holds the sink's lock (another replica, a manual sync); skipped until the next tick", append(fields, zap.Error(redact.Error(err)))...)
	case err != nil:
		log.Error("run failed", append(fields, zap.Error(redact.Error(err)))...)
	case result == ResultRefused:
		log.Warn("run finished with refusals", fields...)
	default:
		log.Info("run finished", fields...)
	}
	if m.Prune {
		d.pruneAfter(m, r.Sink, series, result, log)
	}
	return result
}

// pruneAfter prunes a mirror's sink after a successful sync to it, and
// only then: a sync that could not read the upstream, or refused part of
// it, leaves the sink as it is until a sync succeeds again. The prune
// reads the upstream afresh and applies its own safety rules.
func (d *Daemon) pruneAfter(m config.Mirror, sink string, series series, result string, log *zap.Logger) {
	switch result {
	case ResultSuccess:
	case ResultLocked, ResultCanceled:
		// Another run has the sink (said already), or the daemon stops.
		return
	default:
		log.Warn("prune skipped: the sync did not succeed", zap.String("result", result))
		return
	}
	if d.runCtx.Err() != nil {
		return
	}
	start := time.Now()
	job := mirror.PruneJobOf(m)
	job.Sink = sink
	var rep *prune.Report
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
				log.Error("prune panicked", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			}
		}()
		rep, err = d.opts.Prune(d.runCtx, job, d.log)
	}()
	series.observePrune(rep, err)
	fields := []zap.Field{zap.Duration("took", time.Since(start))}
	if rep != nil {
		fields = append(fields, zap.Int("refs_removed", len(rep.RefsRemoved)), zap.Int("versions_removed", len(rep.VersionsRemoved)),
			zap.Int("data_files_removed", len(rep.DataFilesRemoved)), zap.Int("objects_removed", len(rep.Removed)))
		if len(rep.MaybeRemoved) > 0 {
			fields = append(fields, zap.Strings("maybe_removed", rep.MaybeRemoved))
		}
	}
	switch {
	case errors.Is(err, lock.ErrLocked):
		// Another replica's run, as for a sync: nothing is wrong.
		log.Info("another run holds the sink's lock; prune skipped until the next tick", append(fields, zap.Error(redact.Error(err)))...)
	case err != nil:
		log.Error("prune failed", append(fields, zap.Error(redact.Error(err)))...)
	default:
		log.Info("prune finished", fields...)
	}
}
