package sync

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// inventory is what the sink holds, read before anything is written.
type inventory struct {
	settings []byte // the sink's fdl.json; nil when it has none
	refs     repo.Refs
	refsJSON []byte // nil when absent
	head     []byte // nil when absent
	// versions are the version tokens (backend.FileInfo.Version) of the
	// ref files, refs.json and HEAD as this run read them, for the
	// conditional writes of stage two (see putRead); an object absent
	// when read has none. Empty on a store without conditional writes.
	versions map[string]string
	// refsMoving: RefsMovingFile is there (an earlier run stopped while
	// moving refs, or this run is moving them).
	refsMoving bool
}

// takeInventory reads the sink's fdl.json, refs, refs.json and HEAD, and
// lists versions/ in the sink and (where it lists) in the source.
func (e *engine) takeInventory(ctx context.Context) (*inventory, error) {
	inv := &inventory{versions: map[string]string{}}
	var err error
	if inv.settings, err = e.readOptional(ctx, repo.SettingsFile, repo.MaxSmallFile); err != nil {
		return nil, err
	}
	if inv.settings != nil {
		if err := e.sameRepository(inv.settings); err != nil {
			return nil, err
		}
	}
	if err := e.checkSource(ctx, inv.settings != nil); err != nil {
		return nil, err
	}
	if err := e.listVersions(ctx); err != nil {
		return nil, err
	}
	if err := e.readSinkRefs(ctx, inv); err != nil {
		return nil, err
	}
	if err := e.loadPending(ctx); err != nil {
		return nil, err
	}
	if err := e.loadUnsynced(ctx); err != nil {
		return nil, err
	}
	if inv.head, err = e.readVersioned(ctx, inv, repo.HeadFile, repo.MaxSmallFile); err != nil {
		return nil, err
	}
	return inv, nil
}

// readOptional reads a small file of the sink; nil when it is absent.
func (e *engine) readOptional(ctx context.Context, name string, limit int64) ([]byte, error) {
	b, err := backend.ReadAll(ctx, e.dst, name, limit)
	if backend.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fatalf("sink %s: %s: %w", e.dst.Location(), name, err)
	}
	return b, nil
}

// readVersioned is readOptional that records the version read in
// inv.versions, for a write of stage two conditional on it.
func (e *engine) readVersioned(ctx context.Context, inv *inventory, name string, limit int64) ([]byte, error) {
	b, version, err := backend.ReadAllVersion(ctx, e.dst, name, limit)
	if backend.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fatalf("sink %s: %s: %w", e.dst.Location(), name, err)
	}
	if version != "" {
		inv.versions[name] = version
	}
	return b, nil
}

// hasWork says whether the run would write anything: it errs towards yes,
// and a write without the lock fails loudly (see guarded) rather than race.
func (e *engine) hasWork(inv *inventory, upstream repo.Refs, head string) bool {
	if inv.settings == nil || len(e.pending) > 0 || e.opts.Repair || len(e.dur.distrusted) > 0 || e.sourceUnrecorded() || inv.refsMoving {
		return true
	}
	for name, id := range upstream {
		if inv.refs[name] != id || !e.published[id] {
			return true
		}
	}
	for range e.newFilesInCompleteVersions() {
		return true
	}
	if !e.upstreamUnread && e.upstreamStateStale(upstream) {
		return true // when upstream refs changed is to be recorded
	}
	// Every upstream ref is as upstream has it: what is left to write is
	// refs.json and HEAD, if they do not say what the ref files say.
	if string(inv.refsJSON) != string(repo.RefsJSON(inv.refs)) {
		return true
	}
	return head != "" && inv.refs[head] != "" && string(inv.head) != "ref: "+head+"\n"
}

// upstreamRefs reads every ref upstream: by listing refs/ where the source
// can list, else from refs.json. Refs that break the rules are refused and
// left out; the rest go on. A ref file whose listing shows the content of
// the value the mirror last saw upstream (see repo.ListingHolds) is not
// read again. The upstream state must be loaded first.
func (e *engine) upstreamRefs(ctx context.Context) (repo.Refs, string) {
	var refs repo.Refs
	var bad []*repo.RefError
	var err error
	if e.src.Properties().CanList {
		var files []backend.FileInfo
		if files, err = repo.ListRefFiles(ctx, e.src); err == nil {
			seen, read := e.upstreamState.loaded.Refs, e.upstreamRead
			refs, bad, err = repo.ReadRefFiles(ctx, e.src, files, func(fi backend.FileInfo) (string, bool) {
				if s, ok := seen[fi.Name]; ok && repo.ListingHolds(fi, s.Version) {
					return s.Version, true
				}
				// What this run read before it took the lock.
				id, ok := read[fi.Name]
				return id, ok && repo.ListingHolds(fi, id)
			})
			if err == nil {
				e.upstreamRead = refs
			}
		}
	} else {
		refs, bad, err = repo.ReadRefs(ctx, e.src)
	}
	if err != nil {
		where := repo.RefsDir
		if !e.src.Properties().CanList {
			where = repo.RefsFile
		}
		e.addRefusal(refuse(ReasonBadRef, "", where, "source %s: %v", e.src.Location(), err))
		refs = repo.Refs{}
		e.upstreamUnread = true
	}
	for _, b := range bad {
		r := refuse(ReasonBadRef, "", b.Ref, "%v", b.Err)
		r.Ref = b.Ref
		e.addRefusal(r)
	}

	head := ""
	raw, err := backend.ReadAll(ctx, e.src, repo.HeadFile, repo.MaxSmallFile)
	switch {
	case err == nil:
		if head, err = repo.ParseHead(raw); err != nil {
			r := refuse(ReasonBadRef, "", repo.HeadFile, "%v", err)
			r.Ref = repo.HeadFile
			e.addRefusal(r)
		}
	case !backend.IsNotExist(err):
		e.addRefusal(refuse(ReasonBadRef, "", repo.HeadFile, "reading %s: %v", repo.HeadFile, err))
	}
	return e.selectRefs(refs, head)
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
		e.excluded[name] = refs[name]
		e.log.Debug("ref not selected; not mirrored", zap.String("ref", name))
	}
	if head != "" && !e.opts.Refs.Selects(head) {
		e.log.Info("HEAD names a ref that is not selected; HEAD not mirrored", zap.String("head", head))
		head = ""
	}
	return selected, head
}

// listVersions takes inventory of versions/ in the sink (which versions are
// complete, which files they already have) and, where it can list, in the
// source. Two listings, whatever the number of versions.
func (e *engine) listVersions(ctx context.Context) error {
	var err error
	e.dstVersions, err = versionListing(ctx, e.dst)
	if err != nil {
		return fatalf("sink %s: %w", e.dst.Location(), err)
	}
	e.published = map[string]bool{}
	for id, files := range e.dstVersions {
		if _, ok := files[repo.RecordFile]; ok {
			e.published[id] = true
		}
	}
	if e.src.Properties().CanList {
		if e.srcVersions, err = versionListing(ctx, e.src); err != nil {
			return fatalf("source %s: %w", e.src.Location(), err)
		}
	}
	return nil
}

func versionListing(ctx context.Context, r backend.Reader) (map[string]map[string]int64, error) {
	out := map[string]map[string]int64{}
	err := r.List(ctx, repo.VersionsDir, func(fi backend.FileInfo) error {
		rest := strings.TrimPrefix(fi.Name, repo.VersionsDir)
		id, file, ok := strings.Cut(rest, "/")
		if !ok || repo.CheckVersionID(id) != nil {
			return nil // not a version directory: someone else's file
		}
		if out[id] == nil {
			out[id] = map[string]int64{}
		}
		out[id][file] = fi.Size
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", repo.VersionsDir, err)
	}
	return out, nil
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
		if e.srcVersions == nil {
			return
		}
		for id, have := range e.dstVersions {
			if _, complete := have[repo.RecordFile]; !complete {
				continue
			}
			for f, size := range e.srcVersions[id] {
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

// lazyListing is one folder of a store, listed the first time a run needs
// it and then shared by every goroutine that asks.
type lazyListing struct {
	once   sync.Once
	files  map[string]int64 // name → size
	err    error
	loaded atomic.Bool // once has run
}

// load lists dir in r on the first call; every call returns that listing.
func (l *lazyListing) load(ctx context.Context, r backend.Reader, dir string) (map[string]int64, error) {
	l.once.Do(func() {
		l.files = map[string]int64{}
		l.err = r.List(ctx, dir, func(fi backend.FileInfo) error {
			l.files[fi.Name] = fi.Size
			return nil
		})
		l.loaded.Store(true)
	})
	return l.files, l.err
}
