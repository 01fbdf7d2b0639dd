// Package prune removes from a mirror what its upstream withdrew: refs the
// upstream deleted, versions it expired (expired.json) or deleted that no
// remaining ref points to, and the data files that only those versions
// needed. restic's forget/prune and `git remote prune` are the models:
// explicit, previewable, and never deleting what something still needs.
//
// The whole plan is made from reads before anything is deleted, so a
// refusal (an upstream that cannot be read, more deletions than allowed)
// deletes nothing. Then the work runs in the sync's order read backwards,
// pointers before what they point to:
//
//  1. refs the upstream no longer has: refs.json rewritten without them,
//     HEAD removed if it names one of them, then the ref files;
//  2. versions expired or gone upstream that no remaining ref names:
//     version.json first (the version stops being complete), then the rest
//     of its folder except its catalogs;
//  3. data files no remaining complete version needs by its catalogs;
//  4. the catalogs of the removed versions, last, because they are how a
//     prune killed before step 3 ended knows, the next time, which data
//     files the removed versions named.
//
// A prune killed at any moment leaves every remaining ref pointing at a
// complete version, and the next prune finds what is left to do: ref files
// still there, version folders without version.json, catalogs naming data
// files nothing needs.
//
// Its place: internal/mirror opens the stores, takes the lock and calls
// Run; the upstream is read through internal/source (settings, refs and
// the versions they name, whether a version is expired or gone), the
// mirror through internal/sink (its refs, versions, data files and
// catalogs, each with its version token; its source record), which also
// makes every removal. It does not import sync.
//
// On an object store, whose lock is a lease a paused run can outlive,
// steps 2 to 4 wait a grace period (grace.go): what the plan finds
// unreferenced is first recorded as a candidate, and removed by a later
// prune that finds it still so after Options.Grace.
//
// Files: prune.go (Run, the plan, the removals), grace.go (the grace
// period and its candidates), upstream.go (what the
// upstream still has), mirror.go (the mirror's refs, versions, data
// files and catalogs), report.go (Report). A prune as the command line
// or the config gives it is internal/mirror's PruneJob.
package prune

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// DefaultMaxDelete is how many objects a prune removes before it refuses,
// unless told more: a mass deletion should be asked for, as with rsync's
// --max-delete.
const DefaultMaxDelete = 1000

// ErrTooManyDeletions is wrapped by the error of a prune that would remove
// more objects than Options.MaxDelete allows; nothing was removed.
var ErrTooManyDeletions = errors.New("more deletions than --max-delete allows")

// Options tune one prune.
type Options struct {
	// DryRun plans and reports, and deletes nothing.
	DryRun bool
	// MaxDelete bounds the objects removed (ref files, HEAD, version
	// files, data files); 0 means DefaultMaxDelete. Over it, the prune
	// removes nothing and returns ErrTooManyDeletions.
	MaxDelete int
	// Selected says which refs of the mirror this prune may remove; nil
	// selects every ref. Ref selection (patterns of the refs a mirror
	// follows) plugs in here: a ref it does not select is never removed,
	// and its version stays.
	Selected func(ref string) bool
	// TempDir holds catalogs while they are read; "" is os.TempDir
	// (mirror.Prune gives each prune a folder the next run cleans, see
	// internal/scratch).
	TempDir string
	// CatalogLimits bound reading each of the mirror's catalogs (zero
	// fields: the defaults), as the mirror's syncs are bound: the
	// catalogs a sync published came from the upstream.
	CatalogLimits catalog.Limits
	// Source is the source's address as a sync records it (location.Clean's
	// form); "" takes the source store's Location. Where neither side's
	// fdl.json has an id, a mirror made from another address is refused:
	// against another repository every ref would look withdrawn.
	Source string
	Logger *zap.Logger
	// Grace, when above 0, holds every removal but the refs' back until
	// its object has been a candidate for that long (see grace.go); 0
	// removes at once, as on a local mirror, whose flock holds.
	Grace time.Duration
	// Now is the clock the grace is judged by; nil is time.Now.
	Now func() time.Time
	// Lease, when set, is asked before every removal and write
	// (sink.Options.Lease): a prune paused past its lock's lease removes
	// nothing more once it wakes.
	Lease func() error
}

// Run prunes the mirror dst against the upstream src, each side as its
// caller made it (source.New, sink.New); the prune writes dst through
// its own view of it (sink.ForRun: its dry run and lease). The caller
// holds the mirror's lock (see mirror.Prune). The error says why
// nothing, or not everything, was removed; the report says what was (or,
// in a dry run, would be).
func Run(ctx context.Context, src *source.Source, dst *sink.Sink, opts Options) (*Report, error) {
	if opts.MaxDelete <= 0 {
		opts.MaxDelete = DefaultMaxDelete
	}
	if opts.Selected == nil {
		opts.Selected = func(string) bool { return true }
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	rep := &Report{
		Source: src.Location(), Sink: dst.Location(), DryRun: opts.DryRun, Started: time.Now(),
		RefsRemoved: []RemovedRef{}, VersionsRemoved: []RemovedVersion{}, DataFilesRemoved: []string{},
		Removed: []string{}, Unnamed: []string{},
	}
	defer func() { rep.Duration = time.Since(rep.Started) }()
	p := &pruner{opts: opts, log: opts.Logger, report: rep,
		sink: dst.ForRun(sink.Options{DryRun: opts.DryRun, Logger: opts.Logger, Lease: opts.Lease})}

	// First, as a sync does: refs.json as the ref files say, where an
	// earlier run stopped between them (sink.Refs.Mend).
	if _, err := p.sink.Refs().Mend(ctx); err != nil {
		return rep, err
	}
	// Read and plan; nothing is deleted before the plan is whole.
	up, err := readUpstream(ctx, src)
	if err != nil {
		return rep, err
	}
	m, err := readMirror(ctx, p.sink)
	if err != nil {
		return rep, err
	}
	if err := sameRepository(up.settings, m.settings, dst.Location()); err != nil {
		return rep, err
	}
	if err := sameSource(ctx, p.sink, up.settings, m.settings, opts.Source, src.Location()); err != nil {
		return rep, err
	}
	p.versionOf = m.versionOf
	if opts.Grace > 0 {
		// Read before the plan: a data file listed whose version went
		// since is named by no catalog any more, and stays a candidate.
		if p.listed, p.listedVersion, err = p.sink.Holdings().ReadCandidates(ctx); err != nil {
			return rep, err
		}
	}
	pl, err := p.plan(ctx, up, m)
	if err != nil {
		return rep, err
	}
	var grace *graceState
	if opts.Grace > 0 {
		rep.Grace = opts.Grace
		grace = p.applyGrace(pl)
	}
	rep.Deletions, rep.Unnamed = pl.deletions(), append(rep.Unnamed, pl.unnamed...)
	for _, name := range pl.unnamed {
		p.log.Info("data file named by no catalog in the mirror; left", zap.String("file", name))
	}
	if opts.DryRun {
		// A dry run lists the whole plan, and says too whether a real
		// run would refuse it.
		p.describe(pl)
	}
	if rep.Deletions > opts.MaxDelete {
		return rep, fmt.Errorf("sink %s: %w: the prune would remove %d objects, the limit is %d; nothing removed (raise --max-delete to allow it)",
			dst.Location(), ErrTooManyDeletions, rep.Deletions, opts.MaxDelete)
	}
	if opts.DryRun {
		return rep, nil
	}

	if err := p.execute(ctx, pl); err != nil {
		return rep, err
	}
	if grace != nil {
		p.recordRemoved(grace, pl)
	}
	if grace == nil && len(rep.Removed) > 0 {
		// Removed at once: what an earlier prune listed leaves the list,
		// or an object copied again with the same token (an S3 ETag is
		// the bytes' MD5) would count its grace from the first listing.
		if grace, err = p.forgetRemoved(ctx); err != nil {
			return rep, err
		}
	}
	if grace != nil && grace.changed {
		// Last: a prune stopped before it leaves the list it read, which
		// the next one reads again (the objects removed since are no
		// longer listed, and leave it).
		if err := p.sink.Holdings().WriteCandidates(ctx, grace.next, grace.version); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// execute removes what the plan says, step by step. Each step's removals
// are made durable before the next step's begin (one barrier on a local
// disk, where a removal is otherwise durable only once its folder is
// fsynced): a power cut must not bring back a ref whose version is gone,
// or a version.json whose files are.
func (p *pruner) execute(ctx context.Context, pl *plan) error {
	dctx := p.sink.Durability().WithoutSync(ctx)
	settle := func() error {
		if err := p.sink.Durability().Barrier(ctx); err != nil {
			return fmt.Errorf("sink %s: making removals durable: %w", p.sink.Location(), err)
		}
		return nil
	}
	steps := []func() error{
		// Step 1: refs, pointers first.
		func() error { return p.removeRefs(ctx, dctx, pl) },
		// Step 2: versions, version.json first; catalogs stay for now.
		func() error {
			for _, v := range pl.versions {
				if err := p.removeVersion(dctx, v); err != nil {
					return err
				}
			}
			return nil
		},
		// Step 3: data files that no remaining complete version needs.
		// First, durably, a new epoch for the versions' file lists (see
		// sink.FileListWriter): a list says what the mirror had when it
		// was written, and the lists are not read to plan this, so none
		// written before counts once a data file may be gone.
		func() error {
			if len(pl.dataFiles) > 0 {
				if err := p.sink.State().NewFileListEpoch(ctx); err != nil {
					return err
				}
			}
			for _, name := range pl.dataFiles {
				if err := p.remove(dctx, name); err != nil {
					return err
				}
				p.report.DataFilesRemoved = append(p.report.DataFilesRemoved, name)
			}
			return nil
		},
		// Step 4: the removed versions' catalogs, which named those files.
		func() error {
			for _, v := range pl.versions {
				for _, name := range v.catalogs {
					if err := p.remove(dctx, name); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
		if err := settle(); err != nil {
			return err
		}
	}
	return nil
}

type pruner struct {
	// versionOf: see mirror.versionOf.
	versionOf map[string]string
	sink      *sink.Sink // the mirror, read to plan and written
	opts      Options
	log       *zap.Logger
	report    *Report
	// listed is the candidates file as read (with Options.Grace), and
	// listedVersion its token.
	listed        *sink.Candidates
	listedVersion string
}

// plan is everything a prune will remove, decided before it removes any.
type plan struct {
	refs      []RemovedRef // refs to remove, sorted by name
	refFiles  []string     // the files of those refs that exist
	refsJSON  []byte       // refs.json to write first; nil: leave it
	head      bool         // remove HEAD: it names a ref that goes
	headRef   string
	versions  []*versionPlan
	dataFiles []string // sorted
	unnamed   []string // data files no catalog in the mirror names, left alone
}

type versionPlan struct {
	id       string
	reason   string   // ReasonExpired or ReasonGone
	complete bool     // has version.json (else a folder an earlier run left)
	files    []string // every object of its folder but the record and the catalogs
	catalogs []string // its catalogs, removed last
	// names are the data files its catalogs name (data_dir included),
	// for a grace that holds it back (applyGrace).
	names []string
}

func (pl *plan) deletions() int {
	n := len(pl.refFiles) + len(pl.dataFiles)
	if pl.head {
		n++
	}
	for _, v := range pl.versions {
		n += len(v.files) + len(v.catalogs)
		if v.complete {
			n++
		}
	}
	return n
}

// plan decides the three steps from the upstream's and the mirror's state.
func (p *pruner) plan(ctx context.Context, up *upstream, m *mirror) (*plan, error) {
	pl := &plan{}
	remaining := p.planRefs(pl, up, m)
	if err := p.planVersions(ctx, pl, up, m, remaining); err != nil {
		return nil, err
	}
	if err := p.planDataFiles(ctx, pl, m); err != nil {
		return nil, err
	}
	return pl, nil
}

// planRefs is step 1: the mirror's selected refs, by their files or in
// refs.json, that upstream does not have. A ref upstream holds but
// refused (a bad name or value) is still upstream's: it is not withdrawn.
// It returns the ref files that remain.
func (p *pruner) planRefs(pl *plan, up *upstream, m *mirror) repo.Refs {
	remaining := repo.Refs{}
	for _, name := range m.refs.Names() {
		if up.hasRef(name) || !p.opts.Selected(name) {
			remaining[name] = m.refs[name]
		}
	}
	for _, name := range unionNames(m.refs, m.refsJSONRefs) {
		if up.hasRef(name) || !p.opts.Selected(name) {
			continue
		}
		id, isFile := m.refs[name]
		if !isFile {
			id = m.refsJSONRefs[name]
		}
		pl.refs = append(pl.refs, RemovedRef{Ref: name, Version: id})
		if isFile {
			pl.refFiles = append(pl.refFiles, name)
		}
	}
	if len(pl.refs) > 0 {
		// Written from the ref files that stay, as a sync writes it.
		if want := repo.RefsJSON(remaining); string(want) != string(m.refsJSON) {
			pl.refsJSON = want
		}
		if m.head != "" && containsRef(pl.refs, m.head) {
			pl.head, pl.headRef = true, m.head
		}
	}
	return remaining
}

// planVersions is step 2: versions no remaining ref names (in the ref
// files, in refs.json, which readers that cannot list follow, or
// upstream), that upstream expired or no longer has.
func (p *pruner) planVersions(ctx context.Context, pl *plan, up *upstream, m *mirror, remaining repo.Refs) error {
	protected := map[string]bool{}
	for _, id := range remaining {
		protected[id] = true
	}
	for name, id := range m.refsJSONRefs {
		if !containsRef(pl.refs, name) {
			protected[id] = true
		}
	}
	for _, id := range up.refs {
		protected[id] = true
	}
	for _, id := range sortedKeys(m.versions) {
		if protected[id] {
			continue
		}
		status, err := up.versionStatus(ctx, id)
		if err != nil {
			return err
		}
		if status == source.Kept {
			continue
		}
		pl.versions = append(pl.versions, newVersionPlan(id, status, m.versions[id]))
	}
	return nil
}

// planDataFiles is step 3: the data files the removed versions' catalogs
// name, less those a remaining complete version needs. Without a removed
// catalog there is nothing to look for, and no catalog is read.
func (p *pruner) planDataFiles(ctx context.Context, pl *plan, m *mirror) error {
	candidates := map[string]bool{}
	for _, v := range pl.versions {
		for _, name := range v.catalogs {
			files, err := readCatalog(ctx, p.sink, name, p.opts.TempDir, p.opts.CatalogLimits)
			if err != nil {
				// Its files stay, reported as named by no catalog: keeping
				// too much is safe, deleting on a guess is not.
				p.log.Warn("catalog of a removed version unreadable; the data files it names stay",
					zap.String("version", v.id), zap.String("catalog", name), zap.Error(err))
				continue
			}
			for _, f := range files {
				candidates[m.settings.DataDir+f] = true
				v.names = append(v.names, m.settings.DataDir+f)
			}
		}
	}
	if p.listed != nil {
		// Listed by an earlier prune while the version that named it was
		// removed (its own grace restarted by a rewrite): still a
		// candidate, though no catalog names it any more; so is one
		// rewritten or removed within the grace (applyGrace holds it).
		for _, m2 := range []map[string]sink.Candidate{p.listed.Objects, p.listed.Rewritten, p.listed.Removed} {
			for name := range m2 {
				if strings.HasPrefix(name, m.settings.DataDir) && !strings.HasPrefix(name, repo.VersionsDir) && !strings.HasPrefix(name, backend.ReservedPrefix) {
					candidates[name] = true
				}
			}
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	removed := map[string]bool{}
	for _, v := range pl.versions {
		removed[v.id] = true
	}
	// Every version that stays counts, complete or not: a folder without
	// version.json may be a sync's version on its way (its catalog is
	// written before its record), and a run that lost its lock while
	// paused may still publish it; the files its catalog names stay.
	needed := map[string]bool{}
	for _, id := range sortedKeys(m.versions) {
		files := m.versions[id]
		if removed[id] {
			continue
		}
		complete := hasKey(files, repo.RecordFile)
		cats := catalogsOf(id, files)
		if len(cats) == 0 && !complete {
			continue // nothing of it named yet
		}
		if len(cats) == 0 {
			return fmt.Errorf("sink %s: version %s stays but has no catalog, so the data files it needs are unknown; nothing removed",
				p.sink.Location(), id)
		}
		for _, name := range cats {
			names, err := readCatalog(ctx, p.sink, name, p.opts.TempDir, p.opts.CatalogLimits)
			if err != nil {
				// A remaining version whose needs are unknown could lose a
				// file it needs: remove nothing.
				return fmt.Errorf("sink %s: version %s stays but its catalog %s cannot be read, so the data files it needs are unknown; nothing removed: %w",
					p.sink.Location(), id, name, err)
			}
			for _, f := range names {
				needed[m.settings.DataDir+f] = true
			}
		}
	}
	data, err := listData(ctx, p.sink, m.settings.DataDir, m.versionOf)
	if err != nil {
		return err
	}
	for _, name := range data {
		switch {
		case needed[name]:
		case candidates[name]:
			pl.dataFiles = append(pl.dataFiles, name)
		default:
			pl.unnamed = append(pl.unnamed, name)
		}
	}
	return nil
}

func newVersionPlan(id, reason string, files map[string]int64) *versionPlan {
	v := &versionPlan{id: id, reason: reason, complete: hasKey(files, repo.RecordFile)}
	cats := map[string]bool{}
	for _, c := range catalogsOf(id, files) {
		cats[c] = true
	}
	for _, f := range sortedKeys(files) {
		name := repo.VersionFile(id, f)
		switch {
		case f == repo.RecordFile:
		case cats[name]:
			v.catalogs = append(v.catalogs, name)
		default:
			v.files = append(v.files, name)
		}
	}
	return v
}

// catalogsOf names a version's catalogs in the mirror, as the engine
// reads them: ducklake.duckdb (metadata.db where it is absent, as newer
// tools name it), and the alternates, every catalogs/<format>.duckdb and a
// metadata.db beside ducklake.duckdb, entry points for readers like the
// main one.
func catalogsOf(id string, files map[string]int64) []string {
	var out []string
	if main := repo.MainCatalog(files); hasKey(files, main) {
		out = append(out, repo.VersionFile(id, main))
	}
	for _, f := range repo.AlternateCatalogs(files) {
		out = append(out, repo.VersionFile(id, f))
	}
	return out
}

// describe fills a dry run's report with the whole plan; a real run's
// report grows as the work is done.
func (p *pruner) describe(pl *plan) {
	r := p.report
	r.RefsRemoved = append(r.RefsRemoved, pl.refs...)
	r.HeadRemoved = pl.headRef
	for _, v := range pl.versions {
		r.VersionsRemoved = append(r.VersionsRemoved, RemovedVersion{Version: v.id, Reason: v.reason, Complete: v.complete})
	}
	r.DataFilesRemoved = append(r.DataFilesRemoved, pl.dataFiles...)
	r.Removed = pl.objects()
}

// objects lists every object the plan removes, in the order it removes them.
func (pl *plan) objects() []string {
	var out []string
	if pl.head {
		out = append(out, repo.HeadFile)
	}
	out = append(out, pl.refFiles...)
	for _, v := range pl.versions {
		if v.complete {
			out = append(out, repo.VersionFile(v.id, repo.RecordFile))
		}
		out = append(out, v.files...)
	}
	out = append(out, pl.dataFiles...)
	for _, v := range pl.versions {
		out = append(out, v.catalogs...)
	}
	return out
}

// removeRefs is step 1: refs.json without the refs that go, then HEAD if
// it names one of them, then their files. A reader that follows refs.json
// or HEAD never meets a ref whose file is gone; a prune killed after
// refs.json finds the ref files still there, and removes them next time.
// refs.json is durable when written; the removals are made under rctx
// (see Run).
func (p *pruner) removeRefs(ctx, rctx context.Context, pl *plan) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if pl.refsJSON == nil && !pl.head && len(pl.refFiles) == 0 {
		return nil
	}
	// The marker first: stopped before the last ref file goes, this
	// prune leaves refs.json without refs whose files are still there,
	// and the next run mends that before it reads anything else.
	if err := p.sink.Refs().StartRemoving(ctx); err != nil {
		return fmt.Errorf("sink %s: writing %s%s: %w", p.sink.Location(), backend.ReservedPrefix, sink.RefsMovingFile, err)
	}
	if pl.refsJSON != nil {
		if err := p.sink.Holdings().Replace(ctx, repo.RefsFile, pl.refsJSON, p.versionOf[repo.RefsFile]); err != nil {
			return fmt.Errorf("sink %s: writing %s: %w", p.sink.Location(), repo.RefsFile, err)
		}
	}
	if pl.head {
		if err := p.remove(rctx, repo.HeadFile); err != nil {
			return err
		}
		p.report.HeadRemoved = pl.headRef
		p.log.Info("HEAD removed: the ref it names is gone", zap.String("ref", pl.headRef))
	}
	for _, name := range pl.refFiles {
		if err := p.remove(rctx, name); err != nil {
			return err
		}
	}
	p.sink.Refs().DoneRemoving(ctx)
	for _, r := range pl.refs {
		p.report.RefsRemoved = append(p.report.RefsRemoved, r)
		p.log.Info("ref removed: upstream no longer has it", zap.String("ref", r.Ref), zap.String("version", r.Version))
	}
	return nil
}

// removeVersion is step 2 for one version: version.json first, then the
// rest of its folder but its catalogs (step 4).
func (p *pruner) removeVersion(ctx context.Context, v *versionPlan) error {
	if v.complete {
		if err := p.remove(ctx, repo.VersionFile(v.id, repo.RecordFile)); err != nil {
			return err
		}
	}
	for _, name := range v.files {
		if err := p.remove(ctx, name); err != nil {
			return err
		}
	}
	// Its file list, which only a difference of a child of it reads.
	if err := p.sink.State().RemoveFileList(ctx, v.id); err != nil {
		return fmt.Errorf("sink %s: removing the file list of %s: %w", p.sink.Location(), v.id, err)
	}
	p.report.VersionsRemoved = append(p.report.VersionsRemoved, RemovedVersion{Version: v.id, Reason: v.reason, Complete: v.complete})
	p.log.Info("version removed", zap.String("version", v.id), zap.String("reason", v.reason))
	return nil
}

// remove deletes one object, stopping first if the run was cancelled (the
// lock lost, a signal): every point between two removals is a safe one.
func (p *pruner) remove(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Conditional on the version the plan saw, where the store can: a
	// prune paused past its lock's lifetime removes nothing that another
	// run wrote since. (A file another run relies on without rewriting it
	// keeps its version: that window is the lock's, checked before the
	// removals begin.)
	if err := p.sink.Holdings().Remove(ctx, name, p.versionOf[name]); err != nil {
		if ctx.Err() != nil && !backend.IsPreconditionFailed(err) && !errors.Is(err, sink.ErrNotSent) {
			// Stopped with the request out: a cancelled client gives up
			// on the answer, not on the removal, which may have landed.
			// (One the lease check held back never left.)
			p.report.MaybeRemoved = append(p.report.MaybeRemoved, name)
		}
		return fmt.Errorf("sink %s: removing %s: %w", p.sink.Location(), name, err)
	}
	p.report.Removed = append(p.report.Removed, name)
	return nil
}

// sameRepository refuses to prune a mirror of another repository against
// this upstream: its refs would all look withdrawn.
func sameRepository(up, mine *repo.Settings, location string) error {
	if err := sink.SameRepository(location, up, mine); err != nil {
		return fmt.Errorf("%w; nothing removed", err)
	}
	return nil
}

// sameSource refuses to prune, against a source at another address, a
// mirror of a repository without id made from the address it recorded
// (sink.SourceFile). A mirror with no record is pruned: prune writes
// none, the next sync does.
func sameSource(ctx context.Context, dst *sink.Sink, up, mine *repo.Settings, source, fallback string) error {
	if up.ID != "" || mine.ID != "" {
		return nil
	}
	if source == "" {
		source = fallback
	}
	rec, err := dst.State().SourceRecord(ctx)
	if err != nil {
		return fmt.Errorf("sink %s: %w; nothing removed", dst.Location(), err)
	}
	if rec != nil && rec.Address != source {
		return fmt.Errorf("sink %s was made from %s (recorded in %s%s), not from %s, and neither side's fdl.json has an id: "+
			"refusing to prune it against another repository; nothing removed (if it is the same repository at a new address, "+
			"a sync with --force records the new one)", dst.Location(), rec.Address, backend.ReservedPrefix, sink.SourceFile, source)
	}
	return nil
}

func containsRef(refs []RemovedRef, name string) bool {
	for _, r := range refs {
		if r.Ref == name {
			return true
		}
	}
	return false
}

func unionNames(a, b repo.Refs) []string {
	all := map[string]bool{}
	for n := range a {
		all[n] = true
	}
	for n := range b {
		all[n] = true
	}
	return sortedKeys(all)
}

func hasKey[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
