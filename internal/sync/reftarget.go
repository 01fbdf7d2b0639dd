package sync

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// checkRefTarget applies the run's policy to a version complete in the
// sink before a ref moves to it: it may have been mirrored under another
// policy (signatures optional, a key since removed). Its record and
// signature are read from the sink, once per version and run.
func (e *engine) checkRefTarget(ctx context.Context, id string) *refusal {
	e.mu.Lock()
	now := e.versions.publishedNow[id]
	r, seen := e.versions.targetChecks[id]
	e.mu.Unlock()
	if now || seen {
		return r // published by this run: checked as it was copied
	}
	r = e.judgeSinkVersion(ctx, id)
	e.mu.Lock()
	e.versions.targetChecks[id] = r
	e.mu.Unlock()
	return r
}

func (e *engine) judgeSinkVersion(ctx context.Context, id string) *refusal {
	recordName := repo.VersionFile(id, repo.RecordFile)
	raw, err := backend.ReadAll(ctx, e.sink.Backend(), recordName, repo.MaxRecordFile)
	if err != nil {
		return refuse(ReasonRecord, id, recordName, "version %s: reading the mirror's %s: %v", id, recordName, err)
	}
	if _, err := repo.ParseRecord(id, raw); err != nil {
		return source.RecordRefusal(id, err)
	}
	if e.opts.Trust == nil {
		return nil
	}
	sigName := repo.VersionFile(id, repo.SignatureFile)
	sig, err := backend.ReadAll(ctx, e.sink.Backend(), sigName, repo.MaxSmallFile)
	if backend.IsNotExist(err) {
		sig, err = nil, nil
	}
	if err != nil {
		return refuse(ReasonSignature, id, sigName, "version %s: reading the mirror's %s: %v", id, sigName, err)
	}
	if err := e.opts.Trust.CheckVersion(id, raw, sig); err != nil {
		return refuse(ReasonSignature, id, sigName, "%v", err)
	}
	return nil
}
