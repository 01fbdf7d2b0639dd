// Package mirror is the composition of a job as the command line or the
// config file gives it (addresses, trust, lock wait): it opens the stores
// by their addresses, loads the trust policy, makes the two sides (the
// upstream as a source.Source, the mirror as a sink.Sink, which alone
// read and write the stores), takes the mirror's lock through the sink,
// and runs a sync (internal/sync, which takes the lock when it knows it
// has something to write) or a prune (internal/prune) on those sides.
//
// A sync's Job and a prune's PruneJob share one Stores: how the stores
// are reached and locked, and the catalogs bounded, taken from a
// configured mirror in one place (StoresOf).
//
// Files: mirror.go (Job, Run: a sync; RunSinks: a sync to several sinks;
// Status, Pending), config.go (StoresOf, SyncJob, PruneJobOf: a
// configured mirror's jobs), prune.go (PruneJob, Prune), stores.go
// (Stores; opening a job's stores, taking the lock, ConfigError, the one
// way both kinds of run do it), format.go (HumanBytes, for printers).
package mirror

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/limiter"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

// Job is one sync of a mirror as the command line or the config gives it.
type Job struct {
	Name string // for logs and metrics; "" for a plain CLI sync
	Stores
	// Sinks are the sinks of a mirror the config gives several (Sink is
	// then the first): RunJob runs them all with RunSinks. nil otherwise.
	Sinks              []string
	TrustedSigners     string // allowed_signers path; "" checks no signatures
	RequireSignatures  bool
	SignatureNamespace string // "" = "fdl"
	Concurrency        int
	DryRun             bool
	Refs               repo.RefSelection
	AllowRewind        []string      // ref patterns whose branches may rewind (Options.AllowRewind)
	MaxUpstreamAge     time.Duration // status: upstream stale when no ref changed for longer; 0 = never
	BWLimit            int64         // bytes per second for the whole run; 0 = no limit
	Repair             bool          // copy back data files complete versions lost in the sink
	// Force mirrors a source other than the one a sink without
	// repository ids was made from (fdlsync.Options.Force).
	Force bool
}

// Policy loads the job's trust policy; nil when it checks no signatures.
func (j Job) Policy() (*verify.Policy, error) {
	if j.TrustedSigners == "" {
		if j.RequireSignatures {
			return nil, &ConfigError{errors.New("--require-signatures needs --trusted-signers: an allowed_signers file of keys you trust")}
		}
		return nil, nil
	}
	signers, err := verify.LoadAllowedSigners(j.TrustedSigners)
	if err != nil {
		return nil, &ConfigError{err}
	}
	return &verify.Policy{Signers: signers, Require: j.RequireSignatures, Namespace: j.SignatureNamespace}, nil
}

// Run opens the source and the sink and runs the engine, which takes
// the sink's lock once it knows it has something to write (a run with
// nothing new never waits for the lock) and releases it at the end.
// Cancelling ctx stops the run at a safe point: never a ref to an
// incomplete version.
func Run(ctx context.Context, job Job, log *zap.Logger, progress func(files, bytes int64)) (*fdlsync.Report, error) {
	r := RunSinks(ctx, job, []string{job.Sink}, log, progress)[0]
	return r.Report, r.Err
}

// RunJob runs a job to each of its sinks: Sinks where it has them (a
// fan-out, RunSinks), else Sink.
func RunJob(ctx context.Context, job Job, log *zap.Logger, progress func(files, bytes int64)) []SinkRun {
	sinks := job.Sinks
	if len(sinks) == 0 {
		sinks = []string{job.Sink}
	}
	return RunSinks(ctx, job, sinks, log, progress)
}

// SinkRun is one sink's part of a run: its report (nil where it never
// started), and the error that stopped it.
type SinkRun struct {
	Sink   string // its address, as given
	Report *fdlsync.Report
	Err    error
}

// RunSinks is Run for a mirror of several sinks (job.Sink is not used):
// the upstream is opened once and the sinks run one after another on one
// source.Source, which serves each later sink what it read and judged for
// the first (refs, records, signatures, the catalogs' files: reading the
// catalogs was most of a sink's own cost) and reads the immutable files a
// later sink copies from an earlier sink of the run that holds them,
// before the upstream (see internal/source's fanout.go). One after
// another, rather than a stream split to several writers: each sink keeps
// the order of its own run (lock, data files, version folders, refs),
// and a sink that is slow, locked or fails holds no other back. Only a
// sink whose run ended without error serves the later ones: its stage
// one settled (written and made durable), files an interrupted run left
// distrusted copied again. Each sink has its own lock, state, fencing and
// report; one that fails or is locked does not stop the others.
func RunSinks(ctx context.Context, job Job, sinks []string, log *zap.Logger, progress func(files, bytes int64)) []SinkRun {
	runs := make([]SinkRun, len(sinks))
	for i, addr := range sinks {
		runs[i].Sink = addr
		runs[i].Err = clash(job.Source, sinks[:i], addr)
	}
	fail := func(err error) []SinkRun {
		for i := range runs {
			runs[i].Err = err
		}
		return runs
	}
	log = jobLogger(log, job.Name)
	policy, err := job.Policy()
	if err != nil {
		return fail(err)
	}
	src, closeSrc, err := location.Open(ctx, job.Source, job.SourceOptions(log))
	if err != nil {
		return fail(&ConfigError{fmt.Errorf("source: %w", err)})
	}
	defer closeSrc()
	if job.BWLimit > 0 {
		// Every byte the run writes is read from the source first: one
		// limit there counts each byte of every transfer once.
		src = limiter.New(job.BWLimit).Wrap(src)
	}
	upstream := source.New(src, policy.AsTrust(), log)
	if len(sinks) > 1 {
		upstream.Fanout().Share()
		defer upstream.Fanout().Close()
	}
	for i, addr := range sinks {
		if i > 0 {
			upstream.Fanout().NextSink()
		}
		if runs[i].Err != nil {
			continue // a sink that nests (clash): not opened
		}
		if err := ctx.Err(); err != nil {
			runs[i].Err = err
			continue
		}
		sinkLog := log
		if len(sinks) > 1 {
			sinkLog = namingSink(log, addr)
		}
		j := job
		j.Sink = addr
		dst, report, err := runSink(ctx, j, upstream, sinkLog, progress)
		runs[i].Report, runs[i].Err = report, err
		if dst == nil {
			continue
		}
		if err == nil && !job.DryRun && i < len(sinks)-1 {
			upstream.Fanout().AddPeer(dst.Backend)
			defer dst.close()
		} else {
			dst.close()
		}
	}
	return runs
}

// clash is the configuration error of a sink that is its source's store,
// lies in it or holds it (the run would write into the upstream, or its
// cleanup reach into it), or is an earlier sink's or nests with one (the
// sinks' cleanups would reach into each other's files): that sink is not
// run, the others are. A config refuses the same of its sinks when it
// loads; this is for the command line's, and a source a config cannot
// compare until it is expanded.
func clash(source string, earlier []string, sink string) error {
	if source != "" && config.Nest(sink, source) {
		return &ConfigError{fmt.Errorf("sink %s and the source %s are one store or nest: the run would write into the upstream", redact.URL(sink), redact.URL(source))}
	}
	for _, e := range earlier {
		if config.Nest(sink, e) {
			return &ConfigError{fmt.Errorf("sink %s and the sink %s before it are one store or nest: each sink's cleanup would reach into the other's files", redact.URL(sink), redact.URL(e))}
		}
	}
	return nil
}

// runSink runs the engine from upstream into one sink, job.Sink; the
// sink's store is returned open (nil where it could not be opened), to
// serve the sinks after it.
func runSink(ctx context.Context, job Job, upstream *source.Source, log *zap.Logger, progress func(files, bytes int64)) (*openSink, *fdlsync.Report, error) {
	dst, err := openSinkStore(ctx, job.Sink, job.sinkOptions(log), job.DryRun, false)
	if err != nil {
		return nil, nil, err
	}
	mine := sink.New(dst.Backend, sink.Options{DryRun: job.DryRun, Logger: log})
	tmp, err := mine.Runs().Scratch()
	if err != nil {
		return dst, nil, err
	}
	defer tmp.Close()

	opts := fdlsync.Options{TempDir: tmp.Path(), Concurrency: job.Concurrency, DryRun: job.DryRun, Logger: log, Progress: progress, CatalogLimits: job.CatalogLimits,
		Refs: job.Refs, AllowRewind: job.AllowRewind, Repair: job.Repair, Source: location.Clean(job.Source), Force: job.Force}
	if job.DryRun {
		report, err := fdlsync.Run(ctx, upstream, mine, opts)
		return dst, report, err
	}
	var held *lock.Held
	opts.CheckLock = func(ctx context.Context) error { return held.Check(ctx) }
	opts.Lease = func() error { return held.CheckLease() }
	opts.Lock = func(ctx context.Context) (context.Context, func(), error) {
		locked, h, release, err := takeLock(ctx, mine, job.LockWait, job.LockTTL, log)
		if err != nil {
			return nil, nil, err
		}
		held = h
		// Uploads older than the lock's lifetime were started by runs
		// that no longer hold it (killed mid-upload): nothing else
		// removes them.
		mine.Runs().AbortStaleUploads(locked, job.LockTTL)
		return locked, release, nil
	}
	report, err := fdlsync.Run(ctx, upstream, mine, opts)
	return dst, report, err
}

// Status reads the refs upstream and in the mirror, copying nothing.
func Status(ctx context.Context, job Job, log *zap.Logger) ([]fdlsync.RefStatus, error) {
	log = jobLogger(log, "")
	src, closeSrc, err := location.Open(ctx, job.Source, job.SourceOptions(log))
	if err != nil {
		return nil, &ConfigError{fmt.Errorf("source: %w", err)}
	}
	defer closeSrc()
	var mine *sink.Sink
	dst, closeDst, err := location.Open(ctx, job.Sink, job.sinkOptions(log))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A mirror not made yet is behind on every ref.
	case err != nil:
		return nil, &ConfigError{err}
	default:
		defer closeDst()
		mine = sink.NewReader(dst, nil)
	}
	return fdlsync.Compare(ctx, source.New(src, nil, nil), mine, job.Refs)
}

// Pending reads the versions a mirror has kept to retry (see
// fdlsync.PendingVersion); none for a mirror not made yet.
func Pending(ctx context.Context, job Job, log *zap.Logger) ([]fdlsync.PendingVersion, int, error) {
	log = jobLogger(log, "")
	dst, closeDst, err := location.Open(ctx, job.Sink, job.sinkOptions(log))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, &ConfigError{fmt.Errorf("sink: %w", err)}
	}
	defer closeDst()
	return sink.NewReader(dst, log).State().ReadPending(ctx)
}

// namingSink is log with a `sink` field naming addr (redacted, as the
// daemon's lines, status and metrics name it), for a run of several
// sinks, and that field only: the lock, the sink and the engine name the
// store in some lines of their own (where a run of one sink has no other
// name for it), and a line of the run would carry `sink` twice, perhaps
// with two spellings of one address. Their `sink` fields are dropped.
func namingSink(log *zap.Logger, addr string) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return sinkNamed{c.With([]zapcore.Field{zap.String("sink", redact.URL(addr))})}
	}))
}

// sinkNamed is a core whose lines already carry `sink`: it drops any
// other field of that key, given to With or to the line.
type sinkNamed struct{ zapcore.Core }

func (c sinkNamed) With(fields []zapcore.Field) zapcore.Core {
	return sinkNamed{c.Core.With(withoutSink(fields))}
}

// Check asks the wrapped core whether it takes the entry (its level, a
// sampler's count), and writes the entry here, through Write: to the
// wrapped core as a whole (the commands' loggers are one core, no tee of
// cores at several levels).
func (c sinkNamed) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Core.Check(e, nil) == nil {
		return ce
	}
	return ce.AddCore(e, c)
}

func (c sinkNamed) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return c.Core.Write(e, withoutSink(fields))
}

func withoutSink(fields []zapcore.Field) []zapcore.Field {
	if !slices.ContainsFunc(fields, isSink) {
		return fields
	}
	return slices.DeleteFunc(slices.Clone(fields), isSink)
}

func isSink(f zapcore.Field) bool { return f.Key == "sink" }
