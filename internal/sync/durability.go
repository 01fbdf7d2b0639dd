package sync

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/lock"
)

// Durability on a sink with a backend.Barrier (a local disk).
//
// A version's data files and the files of its folder are written without
// an fsync each; before its version.json, one barrier makes everything
// written so far durable, and version.json is then written with its own
// fsync. A power cut before the barrier can leave files written since the
// last barrier empty, missing, or of the right size with wrong bytes. A
// version folder without version.json is rewritten by the next run
// anyway (its catalog checked by sha256), but a data file is trusted by
// its size: so before writing data files the run records their names,
// fsynced, in UnsyncedFile; a barrier settles the names written before
// it. A run that finds the record copies those files again (an atomic
// replace) before anything else, and treats the ones it could not copy
// as absent. Object stores have no barrier: every write is durable when
// it returns, and nothing is recorded.

// UnsyncedFile (under .fdl-mirror/) names the data files a run was
// writing without a barrier behind them yet.
const UnsyncedFile = "unsynced.json"

// maxUnsyncedFile bounds the record read back.
const maxUnsyncedFile = 64 << 20

type unsyncedRecord struct {
	Files []string `json:"files"`
}

// durability is a run's part of the above.
type durability struct {
	barrier backend.Barrier // nil: every write is durable when it returns

	mu       sync.Mutex // held while the record is written
	recorded map[string]bool
	written  map[string]bool // recorded names whose write returned
	onDisk   bool            // the record file exists (or may)

	barrierMu sync.Mutex // one barrier at a time

	distrusted map[string]bool // found in the record, not copied again yet
}

// noUnsyncedRecord turns the record off, for the test that shows what a
// power cut does without it.
var noUnsyncedRecord = false

func (e *engine) deferSync() bool { return e.dur.barrier != nil && !e.opts.DryRun }

// withoutSync is ctx for a write the next barrier makes durable.
func (e *engine) withoutSync(ctx context.Context) context.Context {
	if !e.deferSync() {
		return ctx
	}
	return backend.WithoutSync(ctx)
}

// loadUnsynced reads the record an earlier run left: those files were
// written without a barrier behind them and may hold wrong bytes.
func (e *engine) loadUnsynced(ctx context.Context) error {
	e.dur.distrusted = map[string]bool{}
	e.report.Distrusted = nil
	if e.dur.barrier == nil {
		return nil
	}
	raw, err := lock.ReadState(ctx, e.dst, UnsyncedFile, maxUnsyncedFile)
	if err != nil {
		return fatalf("sink %s: %s%s: %w", e.dst.Location(), backend.ReservedPrefix, UnsyncedFile, err)
	}
	if raw == nil {
		return nil
	}
	e.dur.onDisk = true
	var rec unsyncedRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		// Torn it cannot be (it is written to a temporary file, fsynced
		// and renamed); unreadable, it names nothing we can check.
		e.log.Error("the record of files written without a barrier is unreadable; files written before a power cut may be damaged (verify --deep, then sync --repair)",
			zap.String("file", backend.ReservedPrefix+UnsyncedFile), zap.Error(err))
		return nil
	}
	for _, name := range rec.Files {
		if backend.CheckName(name) == nil && !strings.HasPrefix(name, backend.ReservedPrefix) {
			e.dur.distrusted[name] = true
		}
	}
	for name := range e.dur.distrusted {
		e.report.Distrusted = append(e.report.Distrusted, name)
	}
	sort.Strings(e.report.Distrusted)
	if len(e.report.Distrusted) > 0 {
		e.log.Warn("files written before an interrupted run (a power cut?) had no barrier behind them; copying them again",
			zap.Int("files", len(e.report.Distrusted)), zap.Strings("first", e.report.Distrusted[:min(10, len(e.report.Distrusted))]))
	}
	return nil
}

// rewriteDistrusted copies the files of the record again, each replacing
// what the sink has, before any version is published. Those it cannot
// copy stay distrusted: treated as absent, and so copied (or their
// versions refused) like any missing file.
func (e *engine) rewriteDistrusted(ctx context.Context) {
	if len(e.dur.distrusted) == 0 || e.opts.DryRun {
		return
	}
	e.dur.mu.Lock()
	if e.dur.recorded == nil {
		e.dur.recorded, e.dur.written = map[string]bool{}, map[string]bool{}
	}
	for name := range e.dur.distrusted {
		e.dur.recorded[name] = true // the record on disk names them
	}
	e.dur.mu.Unlock()
	var names []string
	for name := range e.dur.distrusted {
		names = append(names, name)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.copyFile(e.withoutSync(ctx), name, -1); err != nil {
				// Left in the record: its bytes are as untrusted as before.
				e.log.Warn("file written before a power cut could not be copied again; treated as absent",
					zap.String("file", name), zap.Error(err))
				return
			}
			e.wroteUnsynced(name)
			mu.Lock()
			delete(e.dur.distrusted, name)
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// isDistrusted says whether a file of the sink may hold wrong bytes.
func (e *engine) isDistrusted(name string) bool {
	return len(e.dur.distrusted) > 0 && e.dur.distrusted[name]
}

// recordUnsynced adds names to the record, durably, before they are
// written without a barrier.
func (e *engine) recordUnsynced(ctx context.Context, names []string) error {
	if !e.deferSync() || noUnsyncedRecord || len(names) == 0 {
		return nil
	}
	e.dur.mu.Lock()
	defer e.dur.mu.Unlock()
	if e.dur.recorded == nil {
		e.dur.recorded, e.dur.written = map[string]bool{}, map[string]bool{}
	}
	added := false
	for _, n := range names {
		if !e.dur.recorded[n] {
			e.dur.recorded[n] = true
			added = true
		}
	}
	if !added {
		return nil
	}
	return e.writeUnsyncedLocked(ctx)
}

func (e *engine) writeUnsyncedLocked(ctx context.Context) error {
	rec := unsyncedRecord{Files: make([]string, 0, len(e.dur.recorded))}
	for n := range e.dur.recorded {
		rec.Files = append(rec.Files, n)
	}
	sort.Strings(rec.Files)
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := lock.WriteState(ctx, e.dst, UnsyncedFile, append(raw, '\n')); err != nil {
		return fatalf("sink %s: writing %s%s: %w", e.dst.Location(), backend.ReservedPrefix, UnsyncedFile, err)
	}
	e.dur.onDisk = true
	return nil
}

// wroteUnsynced notes that a recorded file's write returned: the next
// barrier to start covers it.
func (e *engine) wroteUnsynced(name string) {
	e.dur.mu.Lock()
	defer e.dur.mu.Unlock()
	if e.dur.recorded[name] {
		e.dur.written[name] = true
	}
}

// barrier makes every write so far durable, and settles the recorded
// names written before it started. The record on disk keeps them until it
// is written again (or removed by settleUnsynced): a power cut in between
// costs only copying them again.
func (e *engine) barrier(ctx context.Context) error {
	if !e.deferSync() {
		return nil
	}
	e.dur.barrierMu.Lock()
	defer e.dur.barrierMu.Unlock()
	e.dur.mu.Lock()
	covered := make([]string, 0, len(e.dur.written))
	for n := range e.dur.written {
		covered = append(covered, n)
	}
	e.dur.mu.Unlock()
	if err := e.dur.barrier.Barrier(ctx); err != nil {
		return err
	}
	e.dur.mu.Lock()
	for _, n := range covered {
		delete(e.dur.written, n)
		delete(e.dur.recorded, n)
	}
	e.dur.mu.Unlock()
	return nil
}

// settleUnsynced ends stage one: a last barrier for what no version's
// barrier covered (files of refused versions, say), then the record goes.
func (e *engine) settleUnsynced(ctx context.Context) {
	if !e.deferSync() {
		return
	}
	if err := e.barrier(ctx); err != nil {
		e.log.Warn("could not make the run's writes durable; the next run copies them again", zap.Error(err))
		return
	}
	e.dur.mu.Lock()
	defer e.dur.mu.Unlock()
	if len(e.dur.recorded) > 0 || !e.dur.onDisk {
		// Names not written by this run (a cancelled copy) stay recorded.
		if len(e.dur.recorded) > 0 {
			if err := e.writeUnsyncedLocked(ctx); err != nil {
				e.log.Warn("could not rewrite the record of unsynced files", zap.Error(err))
			}
		}
		return
	}
	if err := lock.RemoveState(ctx, e.dst, UnsyncedFile); err != nil {
		e.log.Warn("could not remove the record of unsynced files; the next run copies them again", zap.Error(err))
		return
	}
	e.dur.onDisk = false
}
