// Package sync is the engine: it decides what to copy from an upstream
// repository to a mirror, in which order, and what to refuse.
//
// The order is git's and Debian's: every data file a version needs, then the
// version's directory with version.json last (its presence is what makes a
// version complete), then the ref files, then refs.json, then HEAD. A run
// that stops anywhere leaves every ref in the mirror pointing at a complete
// version. Immutable files (data files, version directories) are never
// overwritten; a tag is never moved.
package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// FatalError stops a run as a whole: the source's settings are unreadable,
// or the sink holds another repository.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }

func fatalf(format string, args ...any) error {
	return &FatalError{fmt.Errorf(format, args...)}
}

// refusal is an error that carries its report entry.
type refusal struct{ Refusal }

func (r *refusal) Error() string { return r.Message }

func refuse(reason, version, file string, format string, args ...any) *refusal {
	return &refusal{Refusal{Version: version, File: file, Reason: reason, Message: fmt.Sprintf(format, args...)}}
}

type engine struct {
	src      backend.Reader
	dst      backend.Backend
	opts     Options
	log      *zap.Logger
	settings *repo.Settings
	tmpDir   string

	copySlots    chan struct{} // bounds file copies across all versions
	catalogSlots chan struct{} // bounds catalogs fetched and read at once
	versionSlots chan struct{} // bounds versions holding a catalog's file list

	// Inventories, each read with one listing where the store can list.
	srcVersions map[string]map[string]int64 // version → file → size; nil when the source cannot list
	dstVersions map[string]map[string]int64
	dstData     lazyListing // the sink's data_dir, listed only when a version needs it
	srcData     lazyListing // the source's data_dir, listed for many server-side copies

	mu           gosync.Mutex
	report       *Report
	published    map[string]bool          // versions complete in the sink, before or now
	publishedNow map[string]bool          // versions this run published
	refused      map[string]*refusal      // versions refused in this run
	dataCalls    map[string]*dataFileCall // one copy per data file across versions

	locked   atomic.Bool // the mirror's lock is held (see Options.Lock)
	lockLost atomic.Bool
}

type lazyListing struct {
	once   gosync.Once
	files  map[string]int64
	err    error
	loaded atomic.Bool // once has run
}

type dataFileCall struct {
	done chan struct{}
	size int64
	err  error
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
	e := &engine{
		src:          src,
		dst:          dst,
		opts:         opts,
		log:          opts.Logger,
		copySlots:    make(chan struct{}, opts.Concurrency),
		catalogSlots: make(chan struct{}, 2),
		versionSlots: make(chan struct{}, 2),
		published:    map[string]bool{},
		publishedNow: map[string]bool{},
		refused:      map[string]*refusal{},
		dataCalls:    map[string]*dataFileCall{},
		report: &Report{
			Source: src.Location(), Sink: dst.Location(), DryRun: opts.DryRun,
			Started: time.Now(), VersionsPublished: []string{}, RefsMoved: []RefMove{}, Refused: []Refusal{},
		},
	}
	if opts.Lock != nil {
		e.dst = guarded{dst, e}
	}
	err := e.run(ctx)
	if e.lockLost.Load() && ctx.Err() == nil {
		err = fatalf("sink %s: lost the mirror's lock; stopped at a safe point", dst.Location())
	}
	e.report.Duration = time.Since(e.report.Started)
	sort.Strings(e.report.VersionsPublished)
	return e.report, err
}

func (e *engine) run(ctx context.Context) error {
	if err := e.readSettings(ctx); err != nil {
		return err
	}
	upstream, head := e.upstreamRefs(ctx)
	inv, err := e.takeInventory(ctx)
	if err != nil {
		return err
	}
	if e.opts.Lock != nil && e.hasWork(inv, upstream, head) {
		// Only a run with something to write takes the mirror's lock: a
		// run with nothing new reads and leaves, and never waits.
		unlock, lost, err := e.opts.Lock(ctx)
		if err != nil {
			return &FatalError{err}
		}
		defer unlock()
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-lost:
				e.log.Error("lost the mirror's lock; stopping at a safe point", zap.String("sink", e.dst.Location()))
				e.lockLost.Store(true)
				cancel()
			case <-ctx.Done():
			}
		}()
		e.locked.Store(true)
		// What another run wrote before we held the lock counts.
		if inv, err = e.takeInventory(ctx); err != nil {
			return err
		}
	}
	if err := e.ensureSinkSettings(ctx, inv.settings); err != nil {
		return err
	}

	// Stage one: versions and the data files they need.
	var roots []string
	for _, name := range upstream.Names() {
		roots = append(roots, upstream[name])
	}
	e.mirrorVersions(ctx, roots)
	e.completeVersionDirs(ctx)
	if err := ctx.Err(); err != nil {
		return err // never move refs after an interrupted stage one
	}

	// Stage two: refs, refs.json, HEAD.
	return e.publishRefs(ctx, upstream, head, inv)
}

// guarded is the sink of a run that locks lazily: a write before the lock
// is held is a bug in hasWork, and fails instead of racing another run.
type guarded struct {
	backend.Backend
	e *engine
}

func (g guarded) check(name string) error {
	if !g.e.locked.Load() {
		return fmt.Errorf("internal error: writing %s before holding the mirror's lock", name)
	}
	return nil
}

func (g guarded) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := g.check(name); err != nil {
		return err
	}
	return g.Backend.Put(ctx, name, r, size)
}

func (g guarded) Create(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := g.check(name); err != nil {
		return err
	}
	return g.Backend.Create(ctx, name, r, size)
}

func (g guarded) Remove(ctx context.Context, name string) error {
	if err := g.check(name); err != nil {
		return err
	}
	return g.Backend.Remove(ctx, name)
}

func (g guarded) Unwrap() backend.Reader { return g.Backend }

func (g guarded) CanCopyFrom(src backend.Reader) bool {
	c := backend.CopierOf(g.Backend)
	return c != nil && c.CanCopyFrom(src)
}

func (g guarded) CopyFrom(ctx context.Context, src backend.Reader, srcName, dstName string, size int64) (bool, error) {
	if err := g.check(dstName); err != nil {
		return false, err
	}
	return backend.CopierOf(g.Backend).CopyFrom(ctx, src, srcName, dstName, size)
}

// inventory is what the sink holds, read before anything is written.
type inventory struct {
	settings []byte // the sink's fdl.json; nil when it has none
	refs     repo.Refs
	refsJSON []byte // nil when absent
	head     []byte // nil when absent
}

// takeInventory reads the sink's fdl.json, refs, refs.json and HEAD, and
// lists versions/ in the sink and (where it lists) in the source.
func (e *engine) takeInventory(ctx context.Context) (*inventory, error) {
	inv := &inventory{}
	var err error
	if inv.settings, err = e.readOptional(ctx, repo.SettingsFile, repo.MaxSmallFile); err != nil {
		return nil, err
	}
	if inv.settings != nil {
		if err := e.sameRepository(inv.settings); err != nil {
			return nil, err
		}
	}
	if err := e.listVersions(ctx); err != nil {
		return nil, err
	}
	if inv.refs, err = e.sinkRefs(ctx); err != nil {
		return nil, err
	}
	if inv.refsJSON, err = e.readOptional(ctx, repo.RefsFile, repo.MaxRefsJSON); err != nil {
		return nil, err
	}
	if inv.head, err = e.readOptional(ctx, repo.HeadFile, repo.MaxSmallFile); err != nil {
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

// hasWork says whether the run would write anything: it errs towards yes,
// and a write without the lock fails loudly (see guarded) rather than race.
func (e *engine) hasWork(inv *inventory, upstream repo.Refs, head string) bool {
	if inv.settings == nil {
		return true
	}
	for name, id := range upstream {
		if inv.refs[name] != id || !e.published[id] {
			return true
		}
	}
	if e.srcVersions != nil {
		for id, have := range e.dstVersions {
			if _, complete := have[repo.RecordFile]; !complete {
				continue
			}
			for f := range e.srcVersions[id] {
				if _, ok := have[f]; !ok && f != repo.SignatureFile && f != repo.CatalogFile {
					return true
				}
			}
		}
	}
	// Every upstream ref is as upstream has it: what is left to write is
	// refs.json and HEAD, if they do not say what the ref files say.
	if string(inv.refsJSON) != string(repo.RefsJSON(inv.refs)) {
		return true
	}
	return head != "" && inv.refs[head] != "" && string(inv.head) != "ref: "+head+"\n"
}

func (e *engine) addRefusal(r *refusal) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.report.Refused = append(e.report.Refused, r.Refusal)
	e.log.Warn("refused", zap.String("reason", r.Reason), zap.String("ref", r.Ref),
		zap.String("version", r.Version), zap.String("file", r.File), zap.String("message", r.Message))
}

// readSettings reads and checks the upstream's fdl.json.
func (e *engine) readSettings(ctx context.Context) error {
	raw, err := backend.ReadAll(ctx, e.src, repo.SettingsFile, repo.MaxSmallFile)
	if err != nil {
		return fatalf("source %s: %s: %w", e.src.Location(), repo.SettingsFile, err)
	}
	s, err := repo.ParseSettings(raw)
	if err != nil {
		return fatalf("source %s: %w", e.src.Location(), err)
	}
	e.settings = s
	if e.opts.Trust != nil {
		if w := e.opts.Trust.CompareRepoSigners(s.Signers); w != "" {
			e.log.Warn("repository signers differ from the trusted signers", zap.String("detail", w))
		}
	}

	return nil
}

// sameRepository refuses a sink whose fdl.json is another repository's.
func (e *engine) sameRepository(have []byte) error {
	mine, err := repo.ParseSettings(have)
	if err != nil {
		return fatalf("sink %s: existing %w", e.dst.Location(), err)
	}
	if mine.ID != e.settings.ID {
		return fatalf("sink %s holds another repository: its %s has id %q, upstream's is %q; refusing to mix them",
			e.dst.Location(), repo.SettingsFile, mine.ID, e.settings.ID)
	}
	if mine.DataDir != e.settings.DataDir {
		return fatalf("sink %s: %s has data_dir %q, upstream's is %q", e.dst.Location(), repo.SettingsFile, mine.DataDir, e.settings.DataDir)
	}
	return nil
}

// ensureSinkSettings creates the sink's fdl.json, with upstream's bytes,
// only where it has none (If-None-Match: *); an existing one is kept.
func (e *engine) ensureSinkSettings(ctx context.Context, have []byte) error {
	raw := e.settings.Raw
	if have != nil {
		if string(have) != string(raw) {
			// fdl.json is created once and kept: a changed upstream copy
			// is reported, not copied over.
			e.log.Warn("upstream fdl.json differs from the mirror's; the mirror keeps the one it was created with",
				zap.String("sink", e.dst.Location()))
		}
		return nil
	}
	if e.opts.DryRun {
		e.plan(repo.SettingsFile)
		return nil
	}
	err := e.dst.Create(ctx, repo.SettingsFile, strings.NewReader(string(raw)), int64(len(raw)))
	if errors.Is(err, backend.ErrExist) {
		// Made between our read and our create (or by our own create
		// whose answer was lost and retried): judge what is there.
		have, err := e.readOptional(ctx, repo.SettingsFile, repo.MaxSmallFile)
		if err != nil {
			return err
		}
		if have == nil {
			return fatalf("sink %s: %s exists and then does not", e.dst.Location(), repo.SettingsFile)
		}
		return e.sameRepository(have)
	}
	if err != nil {
		return fatalf("sink %s: creating %s: %w", e.dst.Location(), repo.SettingsFile, err)
	}
	return nil
}

// upstreamRefs reads every ref upstream: by listing refs/ where the source
// can list, else from refs.json. Refs that break the rules are refused and
// left out; the rest go on.
func (e *engine) upstreamRefs(ctx context.Context) (repo.Refs, string) {
	refs, bad, err := repo.ReadRefs(ctx, e.src)
	if err != nil {
		where := repo.RefsDir
		if !e.src.Properties().CanList {
			where = repo.RefsFile
		}
		e.addRefusal(refuse(ReasonBadRef, "", where, "source %s: %v", e.src.Location(), err))
		refs = repo.Refs{}
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
	return refs, head
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

// sinkRefs reads the refs the mirror holds now.
func (e *engine) sinkRefs(ctx context.Context) (repo.Refs, error) {
	refs, _, err := repo.ReadRefs(ctx, e.dst)
	if err != nil {
		return nil, fatalf("sink %s: reading refs: %w", e.dst.Location(), err)
	}
	return refs, nil
}

// pendingVersion is a version to mirror, found by walking the refs'
// versions and their ancestors.
type pendingVersion struct {
	id     string
	isRoot bool   // a ref names it (else it is an ancestor)
	raw    []byte // version.json as upstream has it
	sig    []byte // version.json.sig; nil when unsigned
	rec    *repo.Record
	err    error             // why it cannot be mirrored, found while walking
	wait   []*pendingVersion // parents being mirrored in this run
	done   chan struct{}     // closed when published or refused
}

// mirrorVersions mirrors every version the refs name and their ancestors
// that exist upstream, each once, several at a time. A version is
// published (its version.json written) only after every parent being
// mirrored in the same run is published or refused, so that a version
// complete in the sink always has its ancestors behind it, whatever
// moment a run is stopped at; that is what lets a later run treat a
// complete version as a leaf.
func (e *engine) mirrorVersions(ctx context.Context, roots []string) {
	nodes := e.walkVersions(ctx, roots)
	e.refuseCycles(nodes)
	var wg gosync.WaitGroup
	for _, n := range nodes {
		if n.done == nil {
			continue // refused as part of a cycle
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(n.done)
			err := n.err
			if err == nil {
				err = e.mirrorVersion(ctx, n)
			}
			if err == nil {
				return
			}
			var r *refusal
			if !errors.As(err, &r) {
				r = refuse(ReasonCopy, n.id, "", "version %s: %v", n.id, err)
			}
			e.mu.Lock()
			e.refused[n.id] = r
			e.mu.Unlock()
			if ctx.Err() == nil {
				e.addRefusal(r)
			}
		}()
	}
	wg.Wait()
}

// walkVersions reads the records of the versions the refs name and of
// their ancestors, level by level, stopping at versions complete in the
// sink. An ancestor absent upstream is logged and left out.
func (e *engine) walkVersions(ctx context.Context, roots []string) map[string]*pendingVersion {
	nodes := map[string]*pendingVersion{}
	level := []*pendingVersion{}
	add := func(id string, isRoot bool) {
		if _, seen := nodes[id]; seen || e.published[id] {
			return
		}
		n := &pendingVersion{id: id, isRoot: isRoot, done: make(chan struct{})}
		nodes[id] = n
		level = append(level, n)
	}
	for _, id := range roots {
		add(id, true)
	}
	for len(level) > 0 && ctx.Err() == nil {
		current := level
		level = nil
		var wg gosync.WaitGroup
		slots := make(chan struct{}, e.opts.Concurrency)
		for _, n := range current {
			wg.Add(1)
			slots <- struct{}{}
			go func() {
				defer func() { <-slots; wg.Done() }()
				e.readRecord(ctx, n)
			}()
		}
		wg.Wait()
		for _, n := range current {
			if n.rec == nil {
				continue
			}
			for _, p := range n.rec.Parents {
				add(p, false)
			}
		}
	}
	for id, n := range nodes {
		if n.rec == nil && n.err == nil {
			delete(nodes, id) // an ancestor absent upstream
			continue
		}
	}
	for _, n := range nodes {
		if n.rec == nil {
			continue
		}
		for _, p := range n.rec.Parents {
			if pn, ok := nodes[p]; ok && pn != n {
				n.wait = append(n.wait, pn)
			}
		}
	}
	return nodes
}

// readRecord fetches and parses a version's record into n.
func (e *engine) readRecord(ctx context.Context, n *pendingVersion) {
	name := repo.VersionFile(n.id, repo.RecordFile)
	raw, err := backend.ReadAll(ctx, e.src, name, repo.MaxRecordFile)
	switch {
	case backend.IsNotExist(err) && !n.isRoot:
		e.log.Info("ancestor version absent upstream; skipped", zap.String("version", n.id))
	case backend.IsNotExist(err):
		n.err = refuse(ReasonMissingFile, n.id, name, "version %s: %s is missing upstream", n.id, name)
	case err != nil:
		n.err = err
	default:
		n.raw = raw
		if n.rec, err = repo.ParseRecord(n.id, raw); err != nil {
			n.err = refuse(ReasonRecord, n.id, name, "%v", err)
		}
	}
}

// refuseCycles refuses the versions whose parents lead back to themselves
// (a hostile or broken upstream), and those that wait on them: they could
// never be published parents first. They are marked by a nil done.
func (e *engine) refuseCycles(nodes map[string]*pendingVersion) {
	waiting := map[*pendingVersion]int{}
	children := map[*pendingVersion][]*pendingVersion{}
	var ready []*pendingVersion
	for _, n := range nodes {
		waiting[n] = len(n.wait)
		for _, p := range n.wait {
			children[p] = append(children[p], n)
		}
		if len(n.wait) == 0 {
			ready = append(ready, n)
		}
	}
	for len(ready) > 0 {
		n := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		delete(waiting, n)
		for _, c := range children[n] {
			if waiting[c]--; waiting[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	for n := range waiting {
		n.done = nil
		r := refuse(ReasonRecord, n.id, repo.VersionFile(n.id, repo.RecordFile),
			"version %s: its parents lead back to itself (a cycle of versions); refused", n.id)
		e.refused[n.id] = r
		e.addRefusal(r)
	}
}

// mirrorVersion copies one version whose record walkVersions read:
// signature check, catalog (sha256), data files, the directory's other
// files; then, once its parents in this run are settled, the signature
// and version.json, last.
func (e *engine) mirrorVersion(ctx context.Context, n *pendingVersion) error {
	dataFiles, err := e.copyVersion(ctx, n)
	if err != nil {
		return err
	}
	id := n.id
	for _, p := range n.wait {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := e.publishVersion(ctx, id, n.raw, n.sig); err != nil {
		return err
	}
	e.mu.Lock()
	e.published[id] = true
	e.publishedNow[id] = true
	e.report.VersionsPublished = append(e.report.VersionsPublished, id)
	e.mu.Unlock()
	e.log.Info("version published", zap.String("version", id), zap.Int("data_files", dataFiles), zap.Bool("dry_run", e.opts.DryRun))
	return nil
}

// copyVersion is the heavy part of mirroring a version, a few versions at
// a time: each holds its catalog's list of files, which can be long.
func (e *engine) copyVersion(ctx context.Context, n *pendingVersion) (dataFiles int, err error) {
	select {
	case e.versionSlots <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-e.versionSlots }()
	id, raw, rec := n.id, n.raw, n.rec
	var sig []byte
	parents := rec.Parents
	files, err := e.versionFiles(ctx, id)
	if err != nil {
		return 0, err
	}
	if _, ok := files[repo.SignatureFile]; ok {
		if sig, err = backend.ReadAll(ctx, e.src, repo.VersionFile(id, repo.SignatureFile), repo.MaxSmallFile); err != nil {
			return 0, err
		}
	}
	n.sig = sig
	if e.opts.Trust != nil {
		if _, err := e.opts.Trust.CheckVersion(id, raw, sig); err != nil {
			return 0, refuse(ReasonSignature, id, repo.VersionFile(id, repo.SignatureFile), "%v", err)
		}
	}

	select {
	case e.catalogSlots <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	catalogName := repo.VersionFile(id, repo.CatalogFile)
	fetched, err := catalog.Fetch(ctx, e.src, catalogName, e.tmpDir)
	if err != nil {
		<-e.catalogSlots
		if backend.IsNotExist(err) {
			return 0, refuse(ReasonMissingFile, id, catalogName, "version %s: %s is missing upstream", id, catalogName)
		}
		return 0, err
	}
	defer fetched.Remove()
	if fetched.SHA256 != rec.SHA256 {
		<-e.catalogSlots
		return 0, refuse(ReasonSHA256, id, catalogName, "version %s: catalog sha256 mismatch: %s has %s, version.json records %s",
			id, catalogName, fetched.SHA256, rec.SHA256)
	}
	cat, err := catalog.Read(ctx, fetched.Path)
	<-e.catalogSlots
	e.mu.Lock()
	e.report.CatalogsRead++
	e.mu.Unlock()
	if err != nil {
		return 0, refuse(ReasonCatalog, id, catalogName, "version %s: %v", id, err)
	}

	if err := e.mirrorDataFiles(ctx, id, cat, e.knownFromParents(ctx, parents)); err != nil {
		return 0, err
	}
	if err := e.writeVersionFiles(ctx, id, files, fetched); err != nil {
		return 0, err
	}
	return len(cat.Files), nil
}

// versionFiles names the files of a version's directory upstream, with
// their sizes (-1 where unknown until read). A source that cannot list is
// asked for the names the layout knows.
func (e *engine) versionFiles(ctx context.Context, id string) (map[string]int64, error) {
	if e.srcVersions != nil {
		return e.srcVersions[id], nil
	}
	names := append(append([]string{}, repo.KnownVersionFiles...), e.settings.CatalogFiles()...)
	files := map[string]int64{}
	for _, n := range names {
		fi, err := e.src.Stat(ctx, repo.VersionFile(id, n))
		if backend.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		files[n] = fi.Size
	}
	return files, nil
}

// maxStatChecks is how many data files of a version are checked in the
// sink one by one (Stat) before one listing of data_dir is cheaper: about
// one list page of S3 or GCS.
const maxStatChecks = 1000

// knownFromParents returns the data files the sink certainly holds when
// every parent of a version is complete there: the files their catalogs
// list, read back from the sink (a version is published only once all its
// files are there; the engine already trusts that by never walking below
// a complete version). Checking a new version against them, and the few
// files they lack one by one, costs a request per parent, where a listing
// of data_dir costs a page per thousand files of the whole repository, and
// a stat of each on a disk. These sink catalogs are not upstream catalogs
// and are not counted in Report.CatalogsRead. nil when a parent is not
// complete in the sink or its catalog cannot be read: every file is then
// checked against the listing.
func (e *engine) knownFromParents(ctx context.Context, parents []string) map[string]int64 {
	if len(parents) == 0 {
		return nil
	}
	known := map[string]int64{}
	for _, p := range parents {
		e.mu.Lock()
		done, now := e.published[p], e.publishedNow[p]
		e.mu.Unlock()
		if !done {
			return nil
		}
		if now {
			// Published by this run: every file of it is settled in
			// dataCalls already, which dataFile asks first; reading its
			// catalog back from the sink would be the same work again.
			continue
		}
		select {
		case e.catalogSlots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		cat, err := e.readSinkCatalog(ctx, p)
		<-e.catalogSlots
		if err != nil {
			e.log.Info("parent's catalog unreadable in the sink; checking every data file against a listing",
				zap.String("version", p), zap.Error(err))
			return nil
		}
		for _, f := range cat.Files {
			known[e.settings.DataDir+f.Path] = f.Size
		}
	}
	return known
}

func (e *engine) readSinkCatalog(ctx context.Context, id string) (*catalog.Catalog, error) {
	fetched, err := catalog.Fetch(ctx, e.dst, repo.VersionFile(id, repo.CatalogFile), e.tmpDir)
	if err != nil {
		return nil, err
	}
	defer fetched.Remove()
	return catalog.Read(ctx, fetched.Path)
}

// mirrorDataFiles makes sure the sink has every file the catalog needs,
// with the recorded size. Files in known (see knownFromParents) with the
// recorded size are there already.
func (e *engine) mirrorDataFiles(ctx context.Context, id string, cat *catalog.Catalog, known map[string]int64) error {
	var todo []int // indexes into cat.Files of the files to check
	for i, f := range cat.Files {
		if size, ok := known[e.settings.DataDir+f.Path]; !ok || size != f.Size || f.Size < 0 {
			todo = append(todo, i)
		}
	}
	byStat := known != nil && len(todo) <= maxStatChecks
	// A fixed pool of workers rather than one goroutine per file: a
	// catalog may list tens of thousands of files, and their stacks alone
	// would pass the memory budget.
	var wg gosync.WaitGroup
	errs := make([]error, len(cat.Files))
	var next atomic.Int64
	for range min(e.opts.Concurrency, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := int(next.Add(1)) - 1
				if j >= len(todo) {
					return
				}
				f := cat.Files[todo[j]]
				errs[todo[j]] = e.dataFile(ctx, e.settings.DataDir+f.Path, f.Size, byStat)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		name := e.settings.DataDir + cat.Files[i].Path
		var r *refusal
		if errors.As(err, &r) {
			c := *r
			c.Version = id
			return &c
		}
		if backend.IsNotExist(err) {
			return refuse(ReasonMissingFile, id, name, "version %s: data file %s is missing upstream", id, name)
		}
		return refuse(ReasonCopy, id, name, "version %s: data file %s: %v", id, name, err)
	}
	return nil
}

// dataFile copies one data file unless the sink has it; each name is
// handled once per run, whichever versions need it. byStat asks the sink
// about this file alone rather than listing data_dir.
func (e *engine) dataFile(ctx context.Context, name string, size int64, byStat bool) error {
	e.mu.Lock()
	call, ok := e.dataCalls[name]
	if !ok {
		call = &dataFileCall{done: make(chan struct{}), size: size}
		e.dataCalls[name] = call
	}
	e.mu.Unlock()
	if ok {
		<-call.done
		if call.err == nil && size >= 0 && call.size >= 0 && call.size != size {
			return refuse(ReasonSizeMismatch, "", name, "data file %s: catalogs record %d and %d bytes", name, call.size, size)
		}
		return call.err
	}
	defer close(call.done)
	call.err = e.ensureDataFile(ctx, name, size, byStat)
	return call.err
}

func (e *engine) ensureDataFile(ctx context.Context, name string, size int64, byStat bool) error {
	lookup := e.sinkDataFile
	if byStat && !e.dstData.loaded.Load() {
		lookup = e.statSinkFile
	}
	have, known, err := lookup(ctx, name)
	if err != nil {
		return err
	}
	if known {
		if size >= 0 && have != size {
			return refuse(ReasonSizeMismatch, "", name, "data file %s exists in the sink with %d bytes, the catalog records %d; immutable, left alone", name, have, size)
		}
		return nil
	}
	return e.copyFile(ctx, name, size)
}

// statSinkFile says whether the sink has a data file, asking for it alone.
func (e *engine) statSinkFile(ctx context.Context, name string) (int64, bool, error) {
	fi, err := e.dst.Stat(ctx, name)
	if backend.IsNotExist(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("sink %s: %w", e.dst.Location(), err)
	}
	return fi.Size, true, nil
}

// sinkDataFile says whether the sink has a data file, from one listing of
// its data_dir made the first time a version needs it.
func (e *engine) sinkDataFile(ctx context.Context, name string) (int64, bool, error) {
	l := &e.dstData
	l.once.Do(func() {
		l.files = map[string]int64{}
		l.err = e.dst.List(ctx, e.settings.DataDir, func(fi backend.FileInfo) error {
			l.files[fi.Name] = fi.Size
			return nil
		})
		l.loaded.Store(true)
	})
	if l.err != nil {
		return 0, false, fmt.Errorf("sink %s: listing %s: %w", e.dst.Location(), e.settings.DataDir, l.err)
	}
	size, ok := l.files[name]
	return size, ok, nil
}

// copyFile streams one immutable file from source to sink (or copies it
// server-side), refusing it when its size is not the recorded one. size -1
// means unknown: whatever the source has is taken. Transient failures are
// retried.
func (e *engine) copyFile(ctx context.Context, name string, size int64) error {
	select {
	case e.copySlots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-e.copySlots }()
	if e.opts.DryRun {
		e.plan(name)
		return nil
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var n int64
		n, err = e.copyOnce(ctx, name, size)
		if err == nil {
			e.copied(n)
			return nil
		}
		var r *refusal
		var se *sourceError
		if errors.As(err, &r) || errors.As(err, &se) || backend.IsNotExist(err) || ctx.Err() != nil || errors.Is(err, backend.ErrInvalidName) {
			return err
		}
		e.log.Warn("copy failed; retrying", zap.String("file", name), zap.Int("attempt", attempt), zap.Error(err))
		select {
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (e *engine) copyOnce(ctx context.Context, name string, size int64) (int64, error) {
	if c := backend.CopierOf(e.dst); c != nil && c.CanCopyFrom(e.src) {
		have, err := e.sourceSize(ctx, name)
		if err != nil {
			return 0, &sourceError{err}
		}
		if size >= 0 && have != size {
			return 0, sizeRefusal(name, have, size)
		}
		if ok, err := c.CopyFrom(ctx, backend.Innermost(e.src), name, name, have); ok || err != nil {
			return have, err
		}
	}
	rc, err := e.src.Open(ctx, name)
	if err != nil {
		return 0, &sourceError{err}
	}
	defer rc.Close()
	var body io.Reader = rc
	if st, ok := rc.(interface{ Stat() (fs.FileInfo, error) }); ok {
		// A local file: its size is known without reading it, and passing
		// the *os.File on lets the kernel copy it (copy_file_range).
		fi, err := st.Stat()
		if err != nil {
			return 0, err
		}
		if size >= 0 && fi.Size() != size {
			return 0, sizeRefusal(name, fi.Size(), size)
		}
		size = fi.Size()
	} else {
		if size < 0 {
			fi, err := e.src.Stat(ctx, name)
			if err != nil {
				return 0, &sourceError{err}
			}
			size = fi.Size
		}
		body = &exactReader{r: rc, left: size, name: name, want: size}
	}
	if err := e.dst.Put(ctx, name, body, size); err != nil {
		var r *refusal
		if errors.As(err, &r) {
			return 0, r
		}
		if x, ok := body.(*exactReader); ok && x.mismatch != nil {
			return 0, x.mismatch
		}
		return 0, err
	}
	return size, nil
}

// sourceError is a request to the source that failed after the backend's
// own retries: the engine does not retry it again. What it retries are
// streams cut after they started.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// sourceSize is a source file's size, checked before a server-side copy
// (no byte passes through the mirror to count). A run copying many files
// (it listed the sink's data_dir rather than asking file by file) takes
// the sizes from one listing of the source's data_dir: a page per thousand
// files instead of a request per file.
func (e *engine) sourceSize(ctx context.Context, name string) (int64, error) {
	if e.dstData.loaded.Load() && e.src.Properties().CanList && strings.HasPrefix(name, e.settings.DataDir) {
		l := &e.srcData
		l.once.Do(func() {
			l.files = map[string]int64{}
			l.err = e.src.List(ctx, e.settings.DataDir, func(fi backend.FileInfo) error {
				l.files[fi.Name] = fi.Size
				return nil
			})
			l.loaded.Store(true)
		})
		if size, ok := l.files[name]; ok && l.err == nil {
			return size, nil
		}
		// Not listed (or the listing failed): ask for it alone.
	}
	fi, err := e.src.Stat(ctx, name)
	return fi.Size, err
}

func sizeRefusal(name string, got, want int64) *refusal {
	return refuse(ReasonSizeMismatch, "", name, "data file %s has %d bytes upstream, the catalog records %d", name, got, want)
}

// exactReader passes on exactly want bytes and fails the stream when the
// source has more or fewer, so that a Put never publishes a file of the
// wrong size.
type exactReader struct {
	r        io.Reader
	left     int64
	name     string
	want     int64
	mismatch *refusal
}

func (x *exactReader) Read(p []byte) (int, error) {
	if x.left <= 0 {
		var one [1]byte
		n, err := io.ReadFull(x.r, one[:])
		if n > 0 {
			x.mismatch = refuse(ReasonSizeMismatch, "", x.name, "data file %s is larger upstream than the %d bytes the catalog records", x.name, x.want)
			return 0, x.mismatch
		}
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > x.left {
		p = p[:x.left]
	}
	n, err := x.r.Read(p)
	x.left -= int64(n)
	if err == io.EOF && x.left > 0 {
		x.mismatch = sizeRefusal(x.name, x.want-x.left, x.want)
		return n, x.mismatch
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

// writeVersionFiles copies the version's own directory but for its
// record and signature: the opaque files, then the catalog from its
// verified local copy.
func (e *engine) writeVersionFiles(ctx context.Context, id string, files map[string]int64, cat *catalog.Fetched) error {
	have := e.dstVersions[id]
	var opaque []string
	for f := range files {
		if f != repo.RecordFile && f != repo.SignatureFile && f != repo.CatalogFile {
			opaque = append(opaque, f)
		}
	}
	sort.Strings(opaque)
	var wg gosync.WaitGroup
	errs := make([]error, len(opaque))
	for i, f := range opaque {
		name := repo.VersionFile(id, f)
		if err := backend.CheckName(name); err != nil {
			return refuse(ReasonBadRef, id, name, "version %s: file name %q is not allowed", id, f)
		}
		if size, ok := have[f]; ok {
			if files[f] >= 0 && size != files[f] {
				return refuse(ReasonSizeMismatch, id, name, "version %s: %s exists in the sink with %d bytes, upstream has %d; immutable, left alone", id, name, size, files[f])
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.copyFile(ctx, name, files[f])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return refuse(ReasonCopy, id, repo.VersionFile(id, opaque[i]), "version %s: %s: %v", id, opaque[i], err)
		}
	}
	if size, ok := have[repo.CatalogFile]; ok && size == cat.Size {
		// Written by an interrupted run from a verified copy.
	} else if err := e.putLocalFile(ctx, repo.VersionFile(id, repo.CatalogFile), cat.Path, cat.Size); err != nil {
		return refuse(ReasonCopy, id, repo.VersionFile(id, repo.CatalogFile), "version %s: writing catalog: %v", id, err)
	}
	return nil
}

// publishVersion writes version.json.sig, then version.json: from this
// moment the version is complete.
func (e *engine) publishVersion(ctx context.Context, id string, record, sig []byte) error {
	if sig != nil {
		if err := e.putBytes(ctx, repo.VersionFile(id, repo.SignatureFile), sig); err != nil {
			return refuse(ReasonCopy, id, repo.VersionFile(id, repo.SignatureFile), "version %s: %v", id, err)
		}
	}
	if err := e.putBytes(ctx, repo.VersionFile(id, repo.RecordFile), record); err != nil {
		return refuse(ReasonCopy, id, repo.VersionFile(id, repo.RecordFile), "version %s: %v", id, err)
	}
	return nil
}

// completeVersionDirs copies files that appeared upstream in versions the
// sink already had (expired.json is added when a version passes its
// retention period). The two listings already taken say which: it costs
// no request beyond the copies, and nothing where the source cannot list.
func (e *engine) completeVersionDirs(ctx context.Context) {
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
			name := repo.VersionFile(id, f)
			if err := e.copyFile(ctx, name, size); err != nil && ctx.Err() == nil {
				e.addRefusal(refuse(ReasonCopy, id, name, "version %s: new file %s: %v", id, name, err))
			}
		}
	}
}

func (e *engine) putLocalFile(ctx context.Context, name, local string, size int64) error {
	if e.opts.DryRun {
		e.plan(name)
		return nil
	}
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := e.dst.Put(ctx, name, f, size); err != nil {
		return err
	}
	e.copied(size)
	return nil
}

func (e *engine) putBytes(ctx context.Context, name string, b []byte) error {
	if e.opts.DryRun {
		e.plan(name)
		return nil
	}
	if err := e.dst.Put(ctx, name, strings.NewReader(string(b)), int64(len(b))); err != nil {
		return err
	}
	e.copied(int64(len(b)))
	return nil
}

func (e *engine) copied(n int64) {
	e.mu.Lock()
	e.report.FilesCopied++
	e.report.BytesCopied += n
	files, bytes := e.report.FilesCopied, e.report.BytesCopied
	e.mu.Unlock()
	if e.opts.Progress != nil {
		e.opts.Progress(files, bytes)
	}
}

func (e *engine) plan(name string) {
	e.mu.Lock()
	e.report.Planned = append(e.report.Planned, name)
	e.mu.Unlock()
}

// publishRefs is stage two: each ref whose version is complete in the sink
// is written (tags only when new), then refs.json, then HEAD.
func (e *engine) publishRefs(ctx context.Context, upstream repo.Refs, head string, inv *inventory) error {
	sinkRefs := inv.refs
	for _, name := range upstream.Names() {
		if err := ctx.Err(); err != nil {
			return err
		}
		id := upstream[name]
		kind, _ := repo.CheckRefName(name)
		cur, exists := sinkRefs[name]
		if exists && cur == id {
			continue
		}
		if kind == repo.Tag && exists {
			r := refuse(ReasonTagMoved, id, name, "tag %s is %s in the mirror and %s upstream; tags never move", name, cur, id)
			r.Ref = name
			e.addRefusal(r)
			continue
		}
		e.mu.Lock()
		complete, why := e.published[id], e.refused[id]
		e.mu.Unlock()
		if !complete {
			msg := fmt.Sprintf("ref %s not moved to %s: version not complete", name, id)
			if why != nil {
				msg = fmt.Sprintf("ref %s not moved to %s: version refused (%s)", name, id, why.Reason)
			}
			r := refuse(ReasonVersion, id, name, "%s", msg)
			r.Ref = name
			e.addRefusal(r)
			continue
		}
		if err := e.putBytes(ctx, name, repo.RefFileContent(id)); err != nil {
			r := refuse(ReasonCopy, id, name, "ref %s: %v", name, err)
			r.Ref = name
			e.addRefusal(r)
			continue
		}
		e.mu.Lock()
		e.report.RefsMoved = append(e.report.RefsMoved, RefMove{Ref: name, From: cur, To: id})
		e.mu.Unlock()
		e.log.Info("ref moved", zap.String("ref", name), zap.String("from", cur), zap.String("to", id), zap.Bool("dry_run", e.opts.DryRun))
		sinkRefs[name] = id
	}
	for _, name := range sinkRefs.Names() {
		if _, ok := upstream[name]; !ok {
			e.log.Info("ref in the mirror is not upstream; kept", zap.String("ref", name))
		}
	}
	for _, name := range upstream.Names() {
		if sinkRefs[name] != upstream[name] {
			e.report.Lag++
		}
	}

	want := repo.RefsJSON(sinkRefs)
	if string(inv.refsJSON) != string(want) {
		if err := e.putBytes(ctx, repo.RefsFile, want); err != nil {
			e.addRefusal(refuse(ReasonCopy, "", repo.RefsFile, "writing %s: %v", repo.RefsFile, err))
		}
	}
	if head != "" {
		if _, ok := sinkRefs[head]; !ok {
			e.log.Warn("HEAD names a ref the mirror does not have yet; HEAD not written", zap.String("head", head))
			return nil
		}
		content := []byte("ref: " + head + "\n")
		if string(inv.head) != string(content) {
			if err := e.putBytes(ctx, repo.HeadFile, content); err != nil {
				e.addRefusal(refuse(ReasonCopy, "", repo.HeadFile, "writing %s: %v", repo.HeadFile, err))
			}
		}
	}
	return nil
}
