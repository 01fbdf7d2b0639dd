package sync

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// versionJob is a version to mirror, found by walking the refs'
// versions and their ancestors.
type versionJob struct {
	id     string
	isRoot bool   // a ref names it (else it is an ancestor)
	raw    []byte // version.json as upstream has it
	sig    []byte // version.json.sig; nil when unsigned
	rec    *repo.Record
	err    error         // why it cannot be mirrored, found while walking
	wait   []*versionJob // parents being mirrored in this run
	done   chan struct{} // closed when published or refused
	// list is its main catalog's file list, to be written as it is
	// published (difference.go); nil where none is kept.
	list *sink.FileListWriter
}

// mirrorVersions mirrors every version the refs name and their ancestors
// that exist upstream, each once, several at a time. A version is
// published (its version.json written) only after every parent being
// mirrored in the same run is published or refused, so that a version
// complete in the sink always has its ancestors behind it, whatever
// moment a run is stopped at; that is what lets a later run treat a
// complete version as a leaf.
func (e *engine) mirrorVersions(ctx context.Context, roots []string) {
	g := e.walkVersions(ctx, roots)
	e.refuseCycles(g)
	var wg sync.WaitGroup
	for _, n := range g.nodes {
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
			e.versions.refused[n.id] = r
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
// sink (versionGraph). An ancestor absent upstream is left out.
func (e *engine) walkVersions(ctx context.Context, roots []string) *versionGraph {
	g := newVersionGraph(e.versions.published)
	for _, id := range roots {
		g.add(id, true)
	}
	for id := range e.versions.pending {
		g.add(id, false) // retried: see PendingVersion
	}
	for level := g.take(); len(level) > 0 && ctx.Err() == nil; level = g.take() {
		var wg sync.WaitGroup
		slots := make(chan struct{}, e.opts.Concurrency)
		for _, n := range level {
			wg.Add(1)
			slots <- struct{}{}
			go func() {
				defer func() { <-slots; wg.Done() }()
				e.readRecord(ctx, n)
			}()
		}
		wg.Wait()
		g.addParents(level)
	}
	for _, id := range g.finish() {
		e.versions.absent[id] = true
	}
	return g
}

// readRecord fetches and parses a version's record into n (see
// source.ReadRecord: an ancestor upstream lacks is left with neither).
func (e *engine) readRecord(ctx context.Context, n *versionJob) {
	if !n.isRoot && e.src.Versions().IsExpired(ctx, n.id) {
		// Past its retention upstream, and no selected ref points at
		// it: prune removes it from the mirror, so copying it back as an
		// ancestor would only start that again at every run. Left out
		// like an ancestor upstream no longer has.
		e.log.Info("ancestor version expired upstream; not copied", zap.String("version", n.id))
		return
	}
	// Its parents count for ancestry only once it passed the policy
	// (see ancestry), noted as it is published.
	n.raw, n.rec, n.err = e.src.Versions().ReadRecord(ctx, n.id, n.isRoot)
}

// refuseCycles refuses the versions in a cycle, and those that wait on
// them (versionGraph.cycles). They are marked by a nil done.
func (e *engine) refuseCycles(g *versionGraph) {
	for _, n := range g.cycles() {
		n.done = nil
		r := cycleRefusal(n.id)
		e.versions.refused[n.id] = r
		e.addRefusal(r)
	}
}

// mirrorVersion copies one version whose record walkVersions read:
// signature check, catalog (sha256), data files, the directory's other
// files; then, once its parents in this run are settled, the signature
// and version.json, last.
func (e *engine) mirrorVersion(ctx context.Context, n *versionJob) error {
	dataFiles, err := e.copyVersion(ctx, n)
	if err != nil {
		return err
	}
	defer n.list.Discard()
	id := n.id
	for _, p := range n.wait {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// A parent that gave up because the run was stopped is settled too,
	// and select picks either of two ready cases: without this, a child
	// whose copies ended after the stop could be published above a parent
	// no later run would look for.
	if err := ctx.Err(); err != nil {
		return err
	}
	if n.list != nil {
		// Before version.json: a child that finds the version published
		// finds its list. One not written costs the child a whole read.
		if err := e.sink.State().WriteFileList(ctx, n.list); err != nil {
			e.log.Warn("version's file list not written; its child's catalog will be read whole", zap.String("version", id), zap.Error(err))
			if err := e.sink.State().RemoveFileList(ctx, id); err != nil {
				e.log.Warn("an earlier file list of the version not removed", zap.String("version", id), zap.Error(err))
			}
		}
	}
	if err := e.publish.publishVersion(ctx, id, n.raw, n.sig); err != nil {
		return err
	}
	e.ancestry.note(id, n.rec.Parents)
	e.mu.Lock()
	e.versions.published[id] = true
	e.versions.publishedNow[id] = true
	e.report.VersionsPublished = append(e.report.VersionsPublished, id)
	e.mu.Unlock()
	e.log.Info("version published", zap.String("version", id), zap.Int("data_files", dataFiles), zap.Bool("dry_run", e.opts.DryRun))
	return nil
}
