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
// The run is plan, transfer, publish. The planner (planner.go) decides
// from values both sides were read into: refs selected, the version
// graph, whether there is work, which refs move, what stays pending. The
// transfer (transfer.go, copy.go, databatch.go) takes source streams to
// sink writes. The publisher writes a version's folder then its
// version.json (versiondir.go), then refs, refs.json and HEAD (refs.go,
// reftarget.go), then the run's state (pending.go, upstreamstate.go). The
// catalog reader (datafiles.go, difference.go) fetches and reads
// catalogs. engine.go holds Run and the order, and the lock's checks;
// the parts share the run's ledger (engine.go, report.go).
//
// Other files: inventory.go (both sides read at once), settings.go
// (fdl.json on both sides), recordedsource.go (the source on record for
// a repository without id), versions.go (walking the version graph,
// publishing parents first), ancestry.go (forward, rewound, diverged),
// repair.go (sync --repair), status.go (Compare, for status),
// options.go and report.go (what a run is told and what it tells).
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

// engine is one run: it reads both sides, has the planner decide, the
// transfer copy and the publisher write, in the order above. What its
// parts share is the run's ledger.
type engine struct {
	src  *source.Source
	sink *sink.Sink
	opts Options
	log  *zap.Logger

	*ledger                 // where versions and refs stand; the report
	planner  planner        // the run's decisions, from values
	recorded sourceCheck    // the source on record, for a repository without id (see recordedsource.go)
	ancestry *ancestry      // parents of versions, read once (see ancestry.go)
	catalogs *catalogReader // fetches and reads catalogs, upstream's and the sink's
	transfer *transfer      // source streams to sink writes
	publish  *publisher     // versions, then refs
}

// ledger is the run's record, shared by its parts: what the sink held
// when last read, where each version stands, the upstream's refs as read,
// the report, and whether the lock was lost. mu guards versions and
// report where parts run at once.
type ledger struct {
	src      *source.Source // its settings' data_dir tells data files from the mirror's own
	log      *zap.Logger
	progress func(files, bytes int64) // Options.Progress

	mu          sync.Mutex
	inv         *sink.Inventory // what the sink holds, as last read
	versions    versionStates   // where each version stands in this run
	upstream    upstreamView    // the upstream's refs as this run reads them
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

// catalogReader fetches a version's catalogs, upstream's and the
// sink's, and reads them, a bounded number at once (datafiles.go,
// difference.go, databatch.go).
type catalogReader struct {
	*ledger
	src      *source.Source
	sink     *sink.Sink
	opts     Options
	pool     *catalog.Pool // fetches and reads catalogs, upstream's and the sink's
	slots    slots
	transfer *transfer // its retries
	// epoch is the mirror's file lists' epoch, read once (listEpoch).
	epochOnce sync.Once
	epoch     string
}

// publisher writes what the run mirrored, in order: a version's folder,
// its version.json last (versiondir.go); then the refs the planner lets
// move, refs.json and HEAD (refs.go, reftarget.go); then what stays
// pending (pending.go).
type publisher struct {
	*ledger
	src      *source.Source
	sink     *sink.Sink
	opts     Options
	planner  planner
	catalogs *catalogReader
	transfer *transfer
	ancestry *ancestry
}

// versionStates is where each version stands in this run; the ledger's mu guards it.
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

// Run mirrors the upstream src into the mirror dst, each side as its
// caller made it (source.New, sink.New); the run writes dst through its
// own view of it (sink.ForRun: its guard and counters). The error is a
// FatalError, or the context's error when the run was cancelled;
// everything else that went wrong is a Refusal in the report, and the
// rest of the repository is still mirrored where that is safe.
func Run(ctx context.Context, src *source.Source, dst *sink.Sink, opts Options) (*Report, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Source == "" {
		opts.Source = src.Location()
	}
	opts.DryRun = opts.DryRun || dst.DryRun()
	e := &engine{
		src:     src,
		opts:    opts,
		log:     opts.Logger,
		planner: planner{sel: opts.Refs, allowRewind: opts.AllowRewind},
		ledger: &ledger{
			src: src, log: opts.Logger, progress: opts.Progress,
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
		},
	}
	e.sink = dst.ForRun(sink.Options{DryRun: opts.DryRun, Guarded: opts.Lock != nil, Logger: e.log,
		Copied: e.copied, Planned: e.plan, NoUnsyncedRecord: noUnsyncedRecord, Lease: opts.Lease})
	e.transfer = newTransfer(e.src, e.sink, opts, e.plan)
	e.ancestry = newAncestry(e.sink, e.src)
	// As many DuckDB instances as catalogs are read at once, each kept
	// for the next catalog.
	const catalogsAtOnce = 2
	pool, err := catalog.NewPool(opts.TempDir, catalogsAtOnce, opts.CatalogLimits)
	if err != nil {
		return e.report, &FatalError{err}
	}
	e.catalogs = &catalogReader{ledger: e.ledger, src: e.src, sink: e.sink, opts: opts, pool: pool, transfer: e.transfer,
		slots: slots{
			catalog: make(chan struct{}, catalogsAtOnce), version: make(chan struct{}, 2),
			ahead: make(chan struct{}, 8), aheadFetch: make(chan struct{}, 1),
		}}
	e.publish = &publisher{ledger: e.ledger, src: e.src, sink: e.sink, opts: opts, planner: e.planner,
		catalogs: e.catalogs, transfer: e.transfer, ancestry: e.ancestry}
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
	// The upstream's fdl.json, read and checked.
	if _, err := e.src.ReadSettings(ctx); err != nil {
		return &FatalError{err}
	}
	refusedBefore := len(e.report.Refused)
	// The state says what the mirror last saw upstream (for upstreamRefs,
	// and refsMovedUpstream's hint); read again under the lock.
	e.loadUpstreamState(ctx)
	// A run whose upstream's refs.json says refs moved has something to
	// write: it takes the lock first, and reads both sides once, under it.
	lockFirst := e.opts.Lock != nil && e.refsMovedUpstream(ctx)
	var upstream repo.Refs
	var head string
	var inv *sink.Inventory
	if !lockFirst {
		var err error
		upstream, head, inv, err = e.readBothSides(ctx)
		switch {
		case err != nil && e.opts.Lock != nil && backend.IsNotExist(err):
			// Read without the lock, a file of the mirror listed may be
			// gone when it is read: another run that held the lock
			// removed it meanwhile (a prune of a withdrawn tag; two
			// daemon replicas met so). The lock orders such writes; the
			// mirror is read again under it.
			e.log.Info("a file of the mirror went while it was read without the lock; reading it again under the lock", zap.Error(err))
			lockFirst = true
		case err != nil:
			return err
		}
	}
	if e.opts.Lock != nil && (lockFirst || e.hasWork(inv, upstream, head)) {
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
		e.sink.Runs().Locked()
		// First: refs.json as the ref files say, where a run stopped
		// between them (sink.Refs.Mend).
		if _, err := e.sink.Refs().Mend(ctx); err != nil {
			if backend.IsPreconditionFailed(err) {
				e.lockLost.Store(true)
			}
			return &FatalError{err}
		}
		// What another run wrote while we waited counts, upstream and in
		// the sink: a plan made from the refs read before waiting could
		// move a ref back to where another run had moved it from.
		e.mu.Lock()
		e.report.Refused = e.report.Refused[:refusedBefore]
		e.mu.Unlock()
		e.loadUpstreamState(ctx)
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
	e.sink.Durability().RewriteDistrusted(ctx, e.transfer.copyFile)
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
	if err := e.publish.publishRefs(ctx, upstream, head, inv); err != nil {
		return err
	}
	if err := e.checkLock(ctx); err != nil {
		return err
	}
	e.publish.saveUpstreamState(ctx, upstream, !e.upstream.unread)
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
	e.sink.Durability().SettleUnsynced(ctx)
	isRoot := map[string]bool{}
	for _, id := range roots {
		isRoot[id] = true
	}
	e.publish.savePending(ctx, isRoot)
	return nil
}

// readBothSides reads upstream's refs and takes the sink's inventory at
// once: each is listings and reads that wait on their own store (two
// listings of 20,000 refs took 2 s each on the test gateway).
// The caller has loaded the upstream state (loadUpstreamState) first.
func (e *engine) readBothSides(ctx context.Context) (repo.Refs, string, *sink.Inventory, error) {
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
	if !e.sink.Runs().IsLocked() || e.opts.CheckLock == nil {
		return nil
	}
	if err := e.opts.CheckLock(ctx); err != nil {
		e.lockLost.Store(true)
		return fatalf("sink %s: %v", e.sink.Location(), err)
	}
	return nil
}
