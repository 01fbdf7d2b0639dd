package mirror

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// ConfigError is a problem with the job itself (an address, a trust file):
// the command line calls it a usage error.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// jobLogger is log (nil: none) naming the job's mirror, when it has a name.
func jobLogger(log *zap.Logger, name string) *zap.Logger {
	if log == nil {
		log = zap.NewNop()
	}
	if name != "" {
		log = log.With(zap.String("mirror", name))
	}
	return log
}

// Stores is how a job reaches and locks a mirror's stores, and bounds
// the catalogs it reads: the part a sync (Job) and a prune (PruneJob)
// share, built from a configured mirror in one place (StoresOf) and from
// the command line's flags in one (cmd/fdl-mirror's storeFlags), so that
// a setting of how the stores are reached cannot reach one kind of run
// and not the other.
type Stores struct {
	Source, Sink string // addresses
	HTTPHeaders  []string
	// HTTPAllowRedirects are hosts an HTTP(S) source may redirect to
	// besides its origin.
	HTTPAllowRedirects []string
	// HTTPAllowInsecureAuth lets headers and a password go over http://
	// to a host that is not loopback.
	HTTPAllowInsecureAuth bool
	// CAFile is trusted besides the system's roots, by source and sink.
	CAFile   string
	LockWait time.Duration // how long to wait for another run's lock
	LockTTL  time.Duration // an object-store lock's lifetime; 0 = lock.DefaultTTL
	Retries  int           // retries of one request; 0 = each backend's default
	// CatalogLimits bound reading one catalog, upstream's or the mirror's.
	CatalogLimits catalog.Limits
}

// SourceOptions are how the source is opened (location.Open): verify
// opens the repository it checks so.
func (s Stores) SourceOptions(log *zap.Logger) location.Options {
	return location.Options{HTTPHeaders: s.HTTPHeaders, HTTPAllowRedirects: s.HTTPAllowRedirects, Retries: s.Retries, Logger: log,
		CAFile: s.CAFile, HTTPAllowInsecureAuth: s.HTTPAllowInsecureAuth}
}

func (s Stores) sinkOptions(log *zap.Logger) location.Options {
	return location.Options{Retries: s.Retries, CAFile: s.CAFile, Logger: log}
}

// opened are a job's Stores, open: its source and sink.
type opened struct {
	src     backend.Reader
	dst     backend.Backend
	closers []func() error
}

func (s *opened) close() {
	for _, c := range s.closers {
		c()
	}
}

// openStores opens a job's source to read and its sink to write; a dry
// run's sink read-only, a local one not made when missing (it reads as
// empty), so that a dry run writes nothing at all (location.OpenReadOnly).
// existingSink refuses a local sink that is not there instead of making
// it: a prune has nothing to do with one, and must not leave it made.
func openStores(ctx context.Context, source string, srcOpts location.Options, sink string, sinkOpts location.Options, dryRun, existingSink bool) (*opened, error) {
	src, closeSrc, err := location.Open(ctx, source, srcOpts)
	if err != nil {
		return nil, &ConfigError{fmt.Errorf("source: %w", err)}
	}
	st := &opened{src: src, closers: []func() error{closeSrc}}
	dst, err := openSinkStore(ctx, sink, sinkOpts, dryRun, existingSink)
	if err != nil {
		st.close()
		return nil, err
	}
	st.dst = dst.Backend
	st.closers = append(st.closers, dst.closeStore)
	return st, nil
}

// openSink is a sink's store, open.
type openSink struct {
	backend.Backend
	closeStore func() error
}

func (o *openSink) close() { o.closeStore() }

// openSinkStore opens a sink to write (see openStores).
func openSinkStore(ctx context.Context, sink string, sinkOpts location.Options, dryRun, existingSink bool) (*openSink, error) {
	if scheme, path := location.Scheme(sink); existingSink && scheme == "file" {
		if _, err := os.Stat(path); err != nil {
			return nil, &ConfigError{fmt.Errorf("sink %s: %w", sink, err)}
		}
	}
	openWith := location.OpenWritable
	if dryRun {
		openWith = location.OpenReadOnly
	}
	dst, closeDst, err := openWith(ctx, sink, sinkOpts)
	if err != nil {
		return nil, &ConfigError{fmt.Errorf("sink: %w", err)}
	}
	return &openSink{Backend: dst, closeStore: closeDst}, nil
}

// takeLock takes the sink's lock for a run that writes. The run goes on
// under locked: ctx, cancelled (cause lock.ErrLost) when the lock is
// lost. release stops the watch and gives the lock back.
func takeLock(ctx context.Context, dst *sink.Sink, wait, ttl time.Duration, log *zap.Logger) (locked context.Context, held *lock.Held, release func(), err error) {
	held, err = dst.Runs().Lock(ctx, lock.Options{Wait: wait, TTL: ttl, Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sink %s: %w", dst.Location(), err)
	}
	locked, stop := held.Watch(ctx)
	release = func() {
		stop()
		if err := held.Release(context.WithoutCancel(ctx)); err != nil {
			log.Warn("releasing the sink's lock", zap.Error(err))
		}
	}
	return locked, held, release, nil
}
