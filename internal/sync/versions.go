package sync

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
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
	var wg sync.WaitGroup
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
// sink. An ancestor absent upstream is logged and left out.
func (e *engine) walkVersions(ctx context.Context, roots []string) map[string]*versionJob {
	nodes := map[string]*versionJob{}
	level := []*versionJob{}
	add := func(id string, isRoot bool) {
		if _, seen := nodes[id]; seen || e.versions.published[id] {
			return
		}
		n := &versionJob{id: id, isRoot: isRoot, done: make(chan struct{})}
		nodes[id] = n
		level = append(level, n)
	}
	for _, id := range roots {
		add(id, true)
	}
	for id := range e.versions.pending {
		add(id, false) // retried: see PendingVersion
	}
	for len(level) > 0 && ctx.Err() == nil {
		current := level
		level = nil
		var wg sync.WaitGroup
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
			e.versions.absent[id] = true
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

// readRecord fetches and parses a version's record into n (see
// source.ReadRecord: an ancestor upstream lacks is left with neither).
func (e *engine) readRecord(ctx context.Context, n *versionJob) {
	if !n.isRoot && e.src.IsExpired(ctx, n.id) {
		// Past its retention upstream, and no selected ref points at
		// it: prune removes it from the mirror, so copying it back as an
		// ancestor would only start that again at every run. Left out
		// like an ancestor upstream no longer has.
		e.log.Info("ancestor version expired upstream; not copied", zap.String("version", n.id))
		return
	}
	// Its parents count for ancestry only once it passed the policy
	// (see ancestry), noted as it is published.
	n.raw, n.rec, n.err = e.src.ReadRecord(ctx, n.id, n.isRoot)
}

// refuseCycles refuses the versions whose parents lead back to themselves
// (a hostile or broken upstream), and those that wait on them: they could
// never be published parents first. They are marked by a nil done.
func (e *engine) refuseCycles(nodes map[string]*versionJob) {
	waiting := map[*versionJob]int{}
	children := map[*versionJob][]*versionJob{}
	var ready []*versionJob
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
	if err := e.publishVersion(ctx, id, n.raw, n.sig); err != nil {
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
