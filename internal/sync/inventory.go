package sync

import (
	"context"
	"iter"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// takeInventory takes the sink's (see sink.TakeInventory), checks that it
// holds this upstream's repository, and lists versions/ in the source
// where it lists.
func (e *engine) takeInventory(ctx context.Context) (*sink.Inventory, error) {
	inv, err := e.sink.TakeInventory(ctx, e.src.Settings().DataDir)
	if err != nil {
		return nil, &FatalError{err}
	}
	if inv.Settings != nil {
		if err := e.sameRepository(inv.Settings); err != nil {
			return nil, err
		}
	}
	if err := e.checkSource(ctx, inv.Settings != nil); err != nil {
		return nil, err
	}
	if err := e.listSourceVersions(ctx); err != nil {
		return nil, err
	}
	e.inv = inv
	e.versions.published = map[string]bool{}
	for id := range inv.Versions {
		if inv.Complete(id) {
			e.versions.published[id] = true
		}
	}
	e.versions.pending = inv.Pending
	e.report.Distrusted = inv.Distrusted
	return inv, nil
}

// hasWork says whether the run would write anything: it errs towards yes,
// and a write without the lock fails loudly (see guarded) rather than race.
func (e *engine) hasWork(inv *sink.Inventory, upstream repo.Refs, head string) bool {
	if inv.Settings == nil || len(e.versions.pending) > 0 || e.opts.Repair || len(inv.Distrusted) > 0 || e.sourceUnrecorded() || inv.RefsMoving {
		return true
	}
	for name, id := range upstream {
		if inv.Refs[name] != id || !e.versions.published[id] {
			return true
		}
	}
	for range e.newFilesInCompleteVersions() {
		return true
	}
	if !e.upstream.unread && e.upstreamStateStale(upstream) {
		return true // when upstream refs changed is to be recorded
	}
	// Every upstream ref is as upstream has it: what is left to write is
	// refs.json and HEAD, if they do not say what the ref files say.
	if string(inv.RefsJSON) != string(repo.RefsJSON(inv.Refs)) {
		return true
	}
	return head != "" && inv.Refs[head] != "" && string(inv.Head) != "ref: "+head+"\n"
}

// upstreamRefs reads every ref upstream (source.ReadRefs), refusing those
// that break the rules, with the values the mirror last saw upstream as
// the hint. The upstream state must be loaded first.
func (e *engine) upstreamRefs(ctx context.Context) (repo.Refs, string) {
	seen := e.upstream.state.loaded.Refs
	got := e.src.ReadRefs(ctx, func(ref string) (string, bool) {
		s, ok := seen[ref]
		return s.Version, ok
	})
	for _, r := range got.Refused {
		e.addRefusal(r)
	}
	if got.Unread {
		e.upstream.unread = true
	}
	return e.selectRefs(got.Refs, got.Head)
}

// selectRefs keeps the refs the operator chose (Options.Refs); the others,
// and the versions only they reach, are not mirrored. HEAD is kept only
// when its ref is selected.
func (e *engine) selectRefs(refs repo.Refs, head string) (repo.Refs, string) {
	selected := repo.Refs{}
	for _, name := range refs.Names() {
		if e.opts.Refs.Selects(name) {
			selected[name] = refs[name]
			continue
		}
		e.report.Excluded = append(e.report.Excluded, name)
		e.upstream.excluded[name] = refs[name]
		e.log.Debug("ref not selected; not mirrored", zap.String("ref", name))
	}
	if head != "" && !e.opts.Refs.Selects(head) {
		e.log.Info("HEAD names a ref that is not selected; HEAD not mirrored", zap.String("head", head))
		head = ""
	}
	return selected, head
}

// listSourceVersions lists versions/ in the source, where it can list.
func (e *engine) listSourceVersions(ctx context.Context) error {
	if err := e.src.ListVersions(ctx); err != nil {
		return &FatalError{err}
	}
	return nil
}

// newVersionFile is a file upstream in a version the sink holds complete,
// missing from the sink's copy of that version.
type newVersionFile struct {
	version, file string
	size          int64
}

// newFilesInCompleteVersions yields the files that appeared upstream in
// versions the sink already holds complete (expired.json is added when a
// version passes its retention period), from the two listings taken. It
// alone decides it: hasWork (whether to take the lock) and
// completeVersionDirs (what to write) must never disagree. Nothing where
// the source cannot list. A version's catalog and signature are never
// among them: they are written before version.json, never after.
func (e *engine) newFilesInCompleteVersions() iter.Seq[newVersionFile] {
	return func(yield func(newVersionFile) bool) {
		upstream := e.src.Versions()
		if upstream == nil {
			return
		}
		for id, have := range e.inv.Versions {
			if _, complete := have[repo.RecordFile]; !complete {
				continue
			}
			for f, size := range upstream[id] {
				if _, ok := have[f]; ok || f == repo.SignatureFile || f == repo.CatalogFile {
					continue
				}
				if !yield(newVersionFile{id, f, size}) {
					return
				}
			}
		}
	}
}

// listPart is how many names a part of a split listing of data_dir is
// meant to hold (see backend.WithListBounds): a few pages each, up to
// maxListParts parts. Refs are not listed in parts: upstream's and the
// sink's are listed at the same time already, and on the 2-core test
// machine splitting both made a no-op of 20,000 refs slower (1.58 s ->
// 1.66-2.01 s), where one listing alone in four parts took 0.82 s
// instead of 1.19 s.
const (
	listPart     = 2500
	maxListParts = 4
)
