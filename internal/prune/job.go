package prune

import (
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
)

// Job is one prune as the command line or the config gives it;
// mirror.Prune opens its stores, takes the lock and runs it.
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
	// Grace holds removals on an object store back (Options.Grace); 0 is
	// DefaultGrace. A local mirror removes at once: its flock holds.
	Grace time.Duration
	// Now removes at once, on a local mirror; on an object store it is
	// refused unless NowUnsafe says the risk was understood.
	Now bool
	// NowUnsafe removes at once on an object store as well: a run paused
	// past its lease may then have its removals land under a sync that
	// relies on the files (--now-unsafe-on-object-stores).
	NowUnsafe bool
	// Selected says which refs may be removed; nil selects all (see Options).
	Selected func(ref string) bool
	// CatalogLimits bound reading the mirror's catalogs (Options.CatalogLimits).
	CatalogLimits catalog.Limits
	// CAFile and HTTPAllowInsecureAuth: as for a sync (mirror.Job).
	CAFile                string
	HTTPAllowInsecureAuth bool
}
