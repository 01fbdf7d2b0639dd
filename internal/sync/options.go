package sync

import (
	"context"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// Options tune one run of the engine.
type Options struct {
	// Concurrency is how many files are copied at once (default 8).
	Concurrency int
	// DryRun plans and reports, and writes nothing.
	DryRun bool
	// Logger receives structured logs; nil logs nothing.
	Logger *zap.Logger
	// Progress, when set, is told of every file copied (for a display).
	Progress func(files int64, bytes int64)
	// Lock, when set, takes the mirror's lock; the run calls it only once
	// it knows it has something to write, goes on under the context it
	// returns, and calls unlock at its end. That context is ctx, cancelled
	// when the lock is lost (lock.Held.Watch): the run then stops at a safe
	// point and says so.
	Lock func(ctx context.Context) (locked context.Context, unlock func(), err error)
	// CatalogLimits bound each upstream catalog's download and read (zero
	// fields: the defaults); a catalog past one is a refusal of its
	// version, and the run goes on.
	CatalogLimits catalog.Limits
	// Refs chooses the upstream refs to mirror; the zero value follows
	// branches and tags (repo.DefaultRefPatterns).
	Refs repo.RefSelection
	// AllowRewind lists ref patterns whose branches may move to a version
	// that does not descend from their value in the mirror (rewound or
	// diverged upstream); the report still says so. Empty: never.
	AllowRewind []string
	// CheckLock, when set, confirms the lock is still this run's; it is
	// called just before the refs are written and once they are. A run
	// that fails it stops with a FatalError (exit 1).
	CheckLock func(ctx context.Context) error
	// Lease, when set, judges the lock by this process's clocks before
	// every write and removal (sink.Options.Lease); it is asked only
	// once Lock has returned.
	Lease func() error
	// TempDir holds catalogs while they are read; "" is os.TempDir.
	// mirror.Run gives each run a folder the next run cleans after a
	// kill (internal/scratch).
	TempDir string
	// Source is the source's address as recorded in the mirror
	// (location.Clean's form); "" takes the source store's Location. It
	// matters only where neither the upstream's nor the sink's fdl.json
	// has an id: a sink made from one address refuses another.
	Source string
	// Force mirrors a source other than the one recorded (the same
	// repository moved to a new address) and records it. It bypasses
	// nothing else: not the id check, not a ref's rewind or a tag's move.
	Force bool
	// Repair re-checks every complete version's data files against the
	// sink's listing and copies back what is missing or of another size.
	Repair bool
}

// Trust judges a version's signature against keys the operator trusts
// (see source.Trust).
type Trust = source.Trust

// noUnsyncedRecord turns the sink's record of unsynced files off, for the
// test that shows what a power cut does without it (export_test.go).
var noUnsyncedRecord = false

// UnsyncedFile (under .fdl-mirror/) names the data files a run was
// writing without a barrier behind them yet (see sink.UnsyncedFile).
const UnsyncedFile = sink.UnsyncedFile
