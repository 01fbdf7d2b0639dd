// Package sync is the engine: it decides what to copy from an upstream
// repository to a mirror, in which order, and what to refuse.
//
// The order is git's and Debian's: every data file a version needs, then the
// version's directory with version.json last (its presence is what makes a
// version complete), then the ref files, then refs.json, then HEAD. A run
// that stops anywhere leaves every ref in the mirror pointing at a complete
// version. Immutable files (data files, version directories) are never
// overwritten; a tag is never moved.
//
// Its place: internal/mirror composes a job and calls Run; the run reads
// and judges the upstream through internal/source and reads and writes
// the mirror through internal/sink, which keeps the mirror's orders
// (version.json last behind a barrier; marker, ref files, refs.json,
// HEAD). sync decides: which versions, parents first, which refs move.
//
// Files: engine.go (Run: the order; the lock and its checks),
// inventory.go (both sides read at once, what has work, ref selection),
// settings.go (fdl.json on both sides), recordedsource.go (the source on
// record for a repository without id), versions.go (walking the version
// graph, cycles, publishing parents first), datafiles.go (a version's
// catalogs and data files), versiondir.go (the version folder, then
// publishing it), copy.go (copying one file, size checks, retries),
// refs.go (stage two: decide, write, report), reftarget.go (the policy
// on a ref's target in the sink), ancestry.go (forward, rewound,
// diverged), pending.go (ancestors kept to retry), repair.go (sync
// --repair), upstreamstate.go (when upstream refs last changed),
// status.go (Compare, for status), options.go and report.go (what a run
// is told and what it tells).
package sync

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// engine is one run: the plan and its order, between the upstream (src)
// and the mirror (sink).
type engine struct {
	src  *source.Source
	sink *sink.Sink
	opts Options
	log  *zap.Logger

	planner planner // the run's decisions, from values

	slots    slots           // bounds on the work done at once
	inv      *sink.Inventory // what the sink holds, as last read
	versions versionStates   // where each version stands in this run
	upstream upstreamView    // the upstream's refs as this run reads them
	recorded sourceCheck     // the source on record, for a repository without id (see recordedsource.go)
	ancestry *ancestry       // parents of versions, read once (see ancestry.go)
	catalogs *catalog.Pool   // fetches and reads catalogs, upstream's and the sink's

	transfer *transfer // source streams to sink writes

	mu          sync.Mutex
	report      *Report
	plannedData int // data files a dry run named in the report

	lockLost atomic.Bool
}

// slots bound the work of a run done at once.
type slots struct {
	catalog    chan struct{} // catalogs fetched and read at once
	version    chan struct{} // versions holding a catalog's file list
	ahead      chan struct{} // versions with a catalog fetched, waiting for a version slot
	aheadFetch chan struct{} // one catalog download ahead of its version at a time
}

// versionStates is where each version stands in this run; e.mu guards it.
type versionStates struct {
	published    map[string]bool                // complete in the sink, before or now
	publishedNow map[string]bool                // published by this run
	refused      map[string]*refusal            // refused in this run
	pending      map[string]sink.PendingVersion // ancestors earlier runs could not mirror
	absent       map[string]bool                // ancestors upstream does not have
	targetChecks map[string]*refusal            // policy verdicts on ref targets, per run
	confirmed    map[string][]string            // versions from before confirmed in stage two → data files missing (see confirmFiles)
}

// upstreamView is the upstream's refs as this run reads them.
type upstreamView struct {
	state    *upstreamState // when upstream refs last changed (see upstreamstate.go)
	excluded repo.Refs      // upstream refs not selected
	unread   bool           // upstream's refs could not be read
}

// Run mirrors src into dst. The error is a FatalError, or the context's
// error when the run was cancelled; everything else that went wrong is a
// Refusal in the report, and the rest of the repository is still mirrored
// where that is safe.
func Run(ctx context.Context, src backend.Reader, dst backend.Backend, opts Options) (*Report, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Source == "" {
		opts.Source = src.Location()
	}
	e := &engine{
		src:     source.New(src, opts.Trust, opts.Logger),
		opts:    opts,
		log:     opts.Logger,
		planner: planner{sel: opts.Refs, allowRewind: opts.AllowRewind},
		slots: slots{
			catalog: make(chan struct{}, 2), version: make(chan struct{}, 2),
			ahead: make(chan struct{}, 8), aheadFetch: make(chan struct{}, 1),
		},
		versions: versionStates{
			published: map[string]bool{}, publishedNow: map[string]bool{}, refused: map[string]*refusal{},
			absent: map[string]bool{}, targetChecks: map[string]*refusal{}, confirmed: map[string][]string{},
		},
		upstream: upstreamView{excluded: repo.Refs{}},
		report: &Report{
			Source: src.Location(), Sink: dst.Location(), DryRun: opts.DryRun,
			Started: time.Now(), VersionsPublished: []string{}, RefsMoved: []RefMove{}, Refused: []Refusal{}, Pending: []PendingVersion{},
			Refs: []RefStatus{},
		},
	}
	e.sink = sink.New(dst, sink.Options{DryRun: opts.DryRun, Guarded: opts.Lock != nil, Logger: e.log,
		Copied: e.copied, Planned: e.plan, NoUnsyncedRecord: noUnsyncedRecord, Lease: opts.Lease})
	e.transfer = newTransfer(e.src, e.sink, opts, e.plan)
	e.ancestry = newAncestry(dst, e.src)
	// As many DuckDB instances as catalogs are read at once, each kept
	// for the next catalog.
	pool, err := catalog.NewPool(opts.TempDir, cap(e.slots.catalog), opts.CatalogLimits)
	if err != nil {
		return e.report, &FatalError{err}
	}
	e.catalogs = pool
	err = e.run(ctx)
	pool.Close()
	// A run that lost its lock says so first, whatever stopped it: the
	// cancellation the loss caused reaches a step at a time of its own
	// choosing, and not every step wraps the context's error.
	if e.lockLost.Load() && ctx.Err() == nil {
		msg := fmt.Sprintf("sink %s: lost the mirror's lock; stopped at a safe point", dst.Location())
		if err != nil && !errors.Is(err, context.Canceled) {
			msg += " (then: " + err.Error() + ")"
		}
		err = &FatalError{errors.New(msg)}
	}
	e.report.Duration = time.Since(e.report.Started)
	sort.Strings(e.report.VersionsPublished)
	return e.report, err
}

func (e *engine) run(ctx context.Context) error {
	if err := e.readSettings(ctx); err != nil {
		return err
	}
	refusedBefore := len(e.report.Refused)
	upstream, head, inv, err := e.readBothSides(ctx)
	if err != nil {
		return err
	}
	if e.opts.Lock != nil && e.hasWork(inv, upstream, head) {
		// Only a run with something to write takes the mirror's lock: a
		// run with nothing new reads and leaves, and never waits.
		locked, unlock, err := e.opts.Lock(ctx)
		if err != nil {
			return &FatalError{err}
		}
		defer unlock()
		outer := ctx
		defer func() {
			// Only a lost lock cancels the locked context alone.
			if locked.Err() != nil && outer.Err() == nil {
				e.lockLost.Store(true)
			}
		}()
		ctx = locked
		e.sink.Locked()
		// What another run wrote while we waited counts, upstream and in
		// the sink: a plan made from the refs read before waiting could
		// move a ref back to where another run had moved it from.
		e.mu.Lock()
		e.report.Refused = e.report.Refused[:refusedBefore]
		e.mu.Unlock()
		if upstream, head, inv, err = e.readBothSides(ctx); err != nil {
			return err
		}
	}
	// The source's address before fdl.json: a mirror with fdl.json but
	// no record would take the next source as its first.
	if err := e.recordSource(ctx); err != nil {
		return err
	}
	if err := e.ensureSinkSettings(ctx, inv.Settings); err != nil {
		return err
	}
	// Files an earlier run wrote with no barrier behind them (a power
	// cut) are copied again before any version that needs them is
	// published.
	e.sink.RewriteDistrusted(ctx, e.transfer.copyFile)
	if e.opts.Repair {
		e.repair(ctx)
	}

	if err := e.stageOne(ctx, upstream); err != nil {
		return err // never move refs after an interrupted stage one
	}
	// Stage two is only for the lock's holder, checked again now rather
	// than at the next renewal, so that two runs never both move refs.
	if err := e.checkLock(ctx); err != nil {
		return err
	}

	// Stage two: refs, refs.json, HEAD.
	if err := e.publishRefs(ctx, upstream, head, inv); err != nil {
		return err
	}
	if err := e.checkLock(ctx); err != nil {
		return err
	}
	e.saveUpstreamState(ctx, upstream, !e.upstream.unread)
	return nil
}

// stageOne mirrors the versions the refs name and the data files they
// need, makes the writes durable, and records what stays pending. Its
// error is the context's: refs never move after an interrupted stage one.
func (e *engine) stageOne(ctx context.Context, upstream repo.Refs) error {
	var roots []string
	for _, name := range upstream.Names() {
		roots = append(roots, upstream[name])
	}
	e.mirrorVersions(ctx, roots)
	e.completeVersionDirs(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	e.sink.SettleUnsynced(ctx)
	isRoot := map[string]bool{}
	for _, id := range roots {
		isRoot[id] = true
	}
	e.savePending(ctx, isRoot)
	return nil
}

// readBothSides reads upstream's refs and takes the sink's inventory at
// once: each is listings and reads that wait on their own store (two
// listings of 20,000 refs took 2 s each on the test gateway).
func (e *engine) readBothSides(ctx context.Context) (repo.Refs, string, *sink.Inventory, error) {
	// The state says what the mirror last saw upstream, for upstreamRefs.
	e.loadUpstreamState(ctx)
	var inv *sink.Inventory
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		inv, err = e.takeInventory(ctx)
	}()
	upstream, head := e.upstreamRefs(ctx)
	<-done
	return upstream, head, inv, err
}

// checkLock confirms the run still holds the mirror's lock (see
// Options.CheckLock).
func (e *engine) checkLock(ctx context.Context) error {
	if e.lockLost.Load() {
		return fatalf("sink %s: lost the mirror's lock to another run", e.sink.Location())
	}
	if !e.sink.IsLocked() || e.opts.CheckLock == nil {
		return nil
	}
	if err := e.opts.CheckLock(ctx); err != nil {
		e.lockLost.Store(true)
		return fatalf("sink %s: %v", e.sink.Location(), err)
	}
	return nil
}
