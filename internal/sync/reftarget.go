package sync

import (
	"context"
	"fmt"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// checkRefTarget applies the run's policy to a version complete in the
// sink before a ref moves to it: it may have been mirrored under another
// policy (signatures optional, a key since removed). Its record and
// signature are read from the sink, once per version and run.
func (p *publisher) checkRefTarget(ctx context.Context, id string) *refusal {
	p.mu.Lock()
	now := p.versions.publishedNow[id]
	r, seen := p.versions.targetChecks[id]
	p.mu.Unlock()
	if now || seen {
		return r // published by this run: checked as it was copied
	}
	r = p.judgeSinkVersion(ctx, id)
	p.mu.Lock()
	p.versions.targetChecks[id] = r
	p.mu.Unlock()
	return r
}

// confirmFiles returns the data files that a version complete in the sink
// from before this run names and the sink lacks now: a folder with
// version.json is not proof that its files are all there (a prune that
// ran while the run publishing it was paused, a hand's removal). A
// version this run published was confirmed as it was, and costs nothing
// here; another is confirmed once per run, from its catalogs in the sink
// and the sink's answer for each file they name (see missingDataFiles).
func (p *publisher) confirmFiles(ctx context.Context, id string) ([]string, error) {
	p.mu.Lock()
	now := p.versions.publishedNow[id]
	missing, seen := p.versions.confirmed[id]
	p.mu.Unlock()
	// A dry run confirms nothing: the copies back it only planned (a
	// repair's, the distrusted files') are not in the sink, and it
	// would refuse targets a real run, having made them, moves to.
	if now || p.opts.DryRun {
		return nil, nil
	}
	if seen {
		return missing, nil
	}
	missing, err := p.missingDataFiles(ctx, id)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.versions.confirmed[id] = missing
	p.mu.Unlock()
	return missing, nil
}

// missingDataFiles returns the data files the catalogs of version id in
// the sink name that the sink lacks, or holds at another size. Each
// catalog's files are gone through in path order, none held but those
// missing: a file two catalogs name is looked up twice, and named once.
// A catalog of few files has each asked for alone (a tag on an old
// version of three files costs three requests, not a listing of the
// mirror's whole data_dir); one of many, a pass merged with the listing
// of data_dir a page at a time (see sink.DataCursor).
func (p *publisher) missingDataFiles(ctx context.Context, id string) ([]string, error) {
	have := p.inv.Versions[id]
	dataDir := p.src.Settings().DataDir
	var missing []string
	listed := map[string]bool{} // of missing
	for _, file := range append([]string{repo.MainCatalog(have)}, repo.AlternateCatalogs(have)...) {
		files, err := p.catalogs.readSinkSorted(ctx, id, file)
		if err != nil {
			return nil, fmt.Errorf("catalog %s: %w", repo.VersionFile(id, file), err)
		}
		var pass *sink.DataCursor
		if files.Len() > int64(maxStatChecks) {
			pass = p.sink.Data().Cursor(ctx, dataDir)
		}
		err = files.Each(func(f catalog.File) error {
			name := dataDir + f.Path
			var size int64
			var ok bool
			var err error
			if pass == nil {
				size, ok, err = p.sink.Data().File(ctx, dataDir, name, false)
			} else {
				size, ok, err = pass.File(ctx, name)
			}
			if listed, _ := p.sink.Data().Listed(); (listed || pass != nil) && err == nil && (!ok || (f.Size >= 0 && size != f.Size)) {
				// A listing (a page, or the whole of data_dir from the
				// run's start) may predate a file this run copied since
				// (a repair): one it lacks is asked for alone.
				size, ok, err = p.sink.Data().Stat(ctx, name)
			}
			if err != nil {
				return err
			}
			if (!ok || (f.Size >= 0 && size != f.Size)) && !listed[name] {
				listed[name] = true
				missing = append(missing, name)
			}
			return nil
		})
		files.Close()
		if err != nil {
			return nil, err
		}
	}
	return missing, nil
}

// judgeSinkVersion judges the mirror's copy of a version's record and
// signature by the run's policy, as upstream's are judged (source).
func (p *publisher) judgeSinkVersion(ctx context.Context, id string) *refusal {
	recordName := repo.VersionFile(id, repo.RecordFile)
	raw, err := p.sink.Versions().ReadRecord(ctx, id)
	if err != nil {
		return refuse(ReasonRecord, id, recordName, "version %s: reading the mirror's %s: %v", id, recordName, err)
	}
	if _, bad := source.JudgeRecord(id, raw); bad != nil {
		return bad
	}
	if !p.src.Versions().ChecksSignatures() {
		return nil
	}
	sigName := repo.VersionFile(id, repo.SignatureFile)
	sig, err := p.sink.Versions().ReadSignature(ctx, id)
	if err != nil {
		return refuse(ReasonSignature, id, sigName, "version %s: reading the mirror's %s: %v", id, sigName, err)
	}
	return p.src.Versions().JudgeSignature(id, raw, sig)
}
