package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/limiter"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

// Job is one mirror as the command line or the config gives it.
type Job struct {
	Name               string // for logs and metrics; "" for a plain CLI sync
	Source, Sink       string // addresses
	HTTPHeaders        []string
	TrustedSigners     string // allowed_signers path; "" checks no signatures
	RequireSignatures  bool
	SignatureNamespace string // "" = "fdl"
	Concurrency        int
	DryRun             bool
	LockWait           time.Duration // how long to wait for another run's lock
	LockTTL            time.Duration // an object-store lock's lifetime; 0 = sink.DefaultLockTTL
	Retries            int           // retries of one request; 0 = each backend's default
	CatalogLimits      catalog.Limits
	HTTPAllowRedirects []string // hosts an HTTP(S) source may redirect to besides its origin
	BWLimit            int64    // bytes per second for the whole run; 0 = no limit
}

func (j Job) sourceOptions(log *zap.Logger) source.Options {
	return source.Options{HTTPHeaders: j.HTTPHeaders, HTTPAllowRedirects: j.HTTPAllowRedirects, Retries: j.Retries, Logger: log}
}

// ConfigError is a problem with the job itself (an address, a trust file):
// the command line calls it a usage error.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

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

// policyTrust adapts *verify.Policy to the engine's Trust.
type policyTrust struct{ p *verify.Policy }

func (t policyTrust) CheckVersion(id string, record, sig []byte) error {
	_, err := t.p.CheckVersion(id, record, sig)
	return err
}
func (t policyTrust) CompareRepoSigners(lines []string) string { return t.p.CompareRepoSigners(lines) }

// TrustOf returns the engine's Trust for a policy (nil for none).
func TrustOf(p *verify.Policy) Trust {
	if p == nil {
		return nil
	}
	return policyTrust{p}
}

// RunJob opens the source and the sink and runs the engine, which takes
// the sink's lock once it knows it has something to write (a run with
// nothing new never waits for the lock) and releases it at the end.
// Cancelling ctx stops the run at a safe point: never a ref to an
// incomplete version.
func RunJob(ctx context.Context, job Job, log *zap.Logger, progress func(files, bytes int64)) (*Report, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if job.Name != "" {
		log = log.With(zap.String("mirror", job.Name))
	}
	policy, err := job.Policy()
	if err != nil {
		return nil, err
	}
	src, closeSrc, err := source.Open(ctx, job.Source, job.sourceOptions(log))
	if err != nil {
		return nil, &ConfigError{err}
	}
	defer closeSrc()
	if job.BWLimit > 0 {
		// Every byte the run writes is read from the source first: one
		// limit there counts each byte of every transfer once.
		src = limiter.New(job.BWLimit).Wrap(src)
	}
	dst, closeDst, err := sink.Open(ctx, job.Sink, sink.Options{Retries: job.Retries, Logger: log})
	if err != nil {
		return nil, &ConfigError{err}
	}
	defer closeDst()

	opts := Options{Concurrency: job.Concurrency, DryRun: job.DryRun, Trust: TrustOf(policy), Logger: log, Progress: progress, CatalogLimits: job.CatalogLimits}
	if job.DryRun {
		return Run(ctx, src, readOnly{dst}, opts)
	}
	opts.Lock = func(ctx context.Context) (func(), <-chan struct{}, error) {
		held, err := sink.Lock(ctx, dst, sink.LockOptions{Wait: job.LockWait, TTL: job.LockTTL, Logger: log})
		if err != nil {
			return nil, nil, fmt.Errorf("sink %s: %w", dst.Location(), err)
		}
		// Uploads older than the lock's lifetime were started by runs
		// that no longer hold it (killed mid-upload): nothing else
		// removes them.
		sink.AbortStaleUploads(ctx, dst, job.LockTTL, log)
		unlock := func() {
			if err := held.Release(context.WithoutCancel(ctx)); err != nil {
				log.Warn("releasing the sink's lock", zap.Error(err))
			}
		}
		return unlock, held.Lost(), nil
	}
	return Run(ctx, src, dst, opts)
}

// readOnly lets a dry run read the sink while making sure it writes nothing.
type readOnly struct{ backend.Backend }

func (r readOnly) Put(ctx context.Context, name string, _ io.Reader, _ int64) error {
	return fmt.Errorf("dry run: refusing to write %s", name)
}

func (r readOnly) Create(ctx context.Context, name string, _ io.Reader, _ int64) error {
	return fmt.Errorf("dry run: refusing to write %s", name)
}

func (r readOnly) Remove(ctx context.Context, name string) error {
	return fmt.Errorf("dry run: refusing to remove %s", name)
}

// StatusJob reads the refs upstream and in the mirror, copying nothing.
func StatusJob(ctx context.Context, job Job, log *zap.Logger) ([]RefStatus, error) {
	if log == nil {
		log = zap.NewNop()
	}
	src, closeSrc, err := source.Open(ctx, job.Source, job.sourceOptions(log))
	if err != nil {
		return nil, &ConfigError{err}
	}
	defer closeSrc()
	mine := repo.Refs{}
	dst, closeDst, err := source.Open(ctx, job.Sink, source.Options{Retries: job.Retries, Logger: log})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A mirror not made yet is behind on every ref.
	case err != nil:
		return nil, &ConfigError{err}
	default:
		defer closeDst()
		if mine, _, err = repo.ReadRefs(ctx, dst); err != nil {
			return nil, fmt.Errorf("mirror %s: %w", dst.Location(), err)
		}
	}
	up, _, upErr := repo.ReadRefs(ctx, src)
	if upErr != nil {
		return nil, fmt.Errorf("source %s: %w", src.Location(), upErr)
	}
	var out []RefStatus
	for _, name := range up.Names() {
		out = append(out, RefStatus{Ref: name, Upstream: up[name], Mirror: mine[name], Behind: up[name] != mine[name]})
	}
	return out, nil
}
