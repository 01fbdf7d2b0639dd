package prune

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/lock"
	"github.com/fdl-mirror/fdl-mirror/internal/scratch"
)

// Job is one prune as the command line or the config gives it.
type Job struct {
	Name         string // for logs; "" for a plain CLI prune
	Source, Sink string // addresses
	HTTPHeaders  []string
	// HTTPAllowRedirects are hosts an HTTP(S) source may redirect to
	// besides its origin, as for a sync.
	HTTPAllowRedirects []string
	DryRun             bool
	MaxDelete          int           // 0 = DefaultMaxDelete
	LockWait           time.Duration // how long to wait for another run's lock
	LockTTL            time.Duration // an object-store lock's lifetime; 0 = lock.DefaultTTL
	Retries            int           // retries of one request; 0 = each backend's default
	// Selected says which refs may be removed; nil selects all (see Options).
	Selected func(ref string) bool
	// CatalogLimits bound reading the mirror's catalogs (Options.CatalogLimits).
	CatalogLimits catalog.Limits
}

// ConfigError is a problem with the job itself (an address): the command
// line calls it a usage error.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// RunJob opens the source and the sink, takes the sink's lock as a sync
// does (a dry run takes none: it only reads), and prunes. Losing the lock
// or cancelling ctx stops the prune between two removals, which are all
// safe points.
func RunJob(ctx context.Context, job Job, log *zap.Logger) (*Report, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if job.Name != "" {
		log = log.With(zap.String("mirror", job.Name))
	}
	src, closeSrc, err := location.Open(ctx, job.Source, location.Options{HTTPHeaders: job.HTTPHeaders, HTTPAllowRedirects: job.HTTPAllowRedirects, Retries: job.Retries, Logger: log})
	if err != nil {
		return nil, &ConfigError{err}
	}
	defer closeSrc()
	if scheme, path := location.Scheme(job.Sink); scheme == "file" {
		// Opening a local sink makes its folder; a prune has nothing to
		// do with one that is not there, and must not leave it made.
		if _, err := os.Stat(path); err != nil {
			return nil, &ConfigError{fmt.Errorf("sink %s: %w", job.Sink, err)}
		}
	}
	openSink := location.OpenWritable
	if job.DryRun {
		// Read-only: a dry run removes nothing, and makes no temporary
		// folder in a local sink either.
		openSink = location.OpenReadOnly
	}
	dst, closeDst, err := openSink(ctx, job.Sink, location.Options{Retries: job.Retries, Logger: log})
	if err != nil {
		return nil, &ConfigError{err}
	}
	defer closeDst()
	tmp, err := scratch.Private()
	if err != nil {
		return nil, err
	}
	defer tmp.Close()

	opts := Options{DryRun: job.DryRun, MaxDelete: job.MaxDelete, Selected: job.Selected, CatalogLimits: job.CatalogLimits, TempDir: tmp.Path(), Source: location.Clean(job.Source), Logger: log}
	if job.DryRun {
		return Run(ctx, src, dst, opts)
	}
	held, err := lock.Lock(ctx, dst, lock.Options{Wait: job.LockWait, TTL: job.LockTTL, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("sink %s: %w", dst.Location(), err)
	}
	defer func() {
		if err := held.Release(context.WithoutCancel(ctx)); err != nil {
			log.Warn("releasing the sink's lock", zap.Error(err))
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost atomic.Bool
	go func() {
		select {
		case <-held.Lost():
			log.Error("lost the mirror's lock; stopping the prune at a safe point", zap.String("sink", dst.Location()))
			lost.Store(true)
			cancel()
		case <-ctx.Done():
		}
	}()
	rep, err := Run(ctx, src, dst, opts)
	if err != nil && lost.Load() {
		err = fmt.Errorf("sink %s: lost the mirror's lock; stopped at a safe point: %w", dst.Location(), err)
	}
	return rep, err
}
