package sink

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
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
// its size: so before writing data files the run records their names and
// the sizes their catalogs give, fsynced, in UnsyncedFile; a barrier
// settles the names written before it. A run that finds the record copies
// those files again (an atomic replace) at the recorded size before
// anything else, and treats the ones it could not copy as absent. The
// record is the mirror's own file, but a damaged (or hand-made) one must
// not become a way to copy anything upstream holds: only data files of
// the mirror's data_dir are taken from it, each only at the size recorded
// for it; a name without a size is treated as absent for the run and
// not copied; ref files, refs.json, HEAD and version folders never are.
// Object stores have no barrier: every write is durable when it returns,
// and nothing is recorded.

// UnsyncedFile (under .fdl-mirror/) names the data files a run was
// writing without a barrier behind them yet.
const UnsyncedFile = "unsynced.json"

// maxUnsyncedFile bounds the record read back.
const maxUnsyncedFile = 64 << 20

type unsyncedRecord struct {
	Files []unsyncedEntry `json:"files"`
}

// unsyncedEntry is one file of the record: its name and the size its
// catalog records. A record of an earlier release names files without a
// size (a bare string): Size is then -1.
type unsyncedEntry struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

func (u *unsyncedEntry) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		u.Size = -1
		return json.Unmarshal(b, &u.Name)
	}
	type plain unsyncedEntry
	p := plain{Size: -1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*u = unsyncedEntry(p)
	return nil
}

// Durability is the mirror's durability as one run keeps it: writes
// deferred to a barrier, the record of files written without one, and the
// files an earlier run's record distrusts.
type Durability struct{ s *Sink }

// Durability is the run's barriers and its record of unsynced files.
func (s *Sink) Durability() Durability { return Durability{s} }

// durability is a run's part of the above.
type durability struct {
	barrier backend.Barrier // nil: every write is durable when it returns

	mu       sync.Mutex       // held while the record is written
	recorded map[string]int64 // name → size its catalog records
	written  map[string]bool  // recorded names whose write returned
	onDisk   bool             // the record file exists (or may)

	barrierMu sync.Mutex // one barrier at a time

	distrusted map[string]int64 // found in the record, not copied again yet: name → recorded size, -1 if none
}

// deferSync says whether writes are made durable by barriers. Not in a
// dry run: the barrier is the store's own, found past the planned
// wrapper, and would fsync a mirror the run writes nothing to.
func (d Durability) deferSync() bool { return d.s.dur.barrier != nil && !d.s.opts.DryRun }

// WithoutSync is ctx for a write the next barrier makes durable.
func (d Durability) WithoutSync(ctx context.Context) context.Context {
	if !d.deferSync() {
		return ctx
	}
	return backend.WithoutSync(ctx)
}

// loadUnsynced reads the record an earlier run left: those files were
// written without a barrier behind them and may hold wrong bytes. It
// returns their names, sorted; only data files below dataDir count.
func (d Durability) loadUnsynced(ctx context.Context, dataDir string) ([]string, error) {
	s := d.s
	s.dur.distrusted = map[string]int64{}
	if s.dur.barrier == nil {
		return nil, nil
	}
	raw, err := lock.ReadStateOrSetAside(ctx, s.b, UnsyncedFile, maxUnsyncedFile, !s.opts.DryRun, s.log)
	if err != nil {
		return nil, s.errorf("%s%s: %w", backend.ReservedPrefix, UnsyncedFile, err)
	}
	if raw == nil {
		return nil, nil
	}
	s.dur.onDisk = true
	var rec unsyncedRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		// Torn it cannot be (it is written to a temporary file, fsynced
		// and renamed); unreadable, it names nothing we can check.
		s.log.Error("the record of files written without a barrier is unreadable; files written before a power cut may be damaged (verify --deep, then sync --repair)",
			zap.String("file", backend.ReservedPrefix+UnsyncedFile), zap.Error(err))
		return nil, nil
	}
	for _, f := range rec.Files {
		if !isDataFileName(f.Name, dataDir) {
			s.log.Warn("the record of files written without a barrier names a file that is not a data file; ignored",
				zap.String("file", backend.ReservedPrefix+UnsyncedFile), zap.String("name", quoteName(f.Name)))
			continue
		}
		s.dur.distrusted[f.Name] = f.Size
	}
	var distrusted []string
	for name := range s.dur.distrusted {
		distrusted = append(distrusted, name)
	}
	sort.Strings(distrusted)
	if len(distrusted) > 0 {
		s.log.Warn("files written before an interrupted run (a power cut?) had no barrier behind them; copying them again",
			zap.Int("files", len(distrusted)), zap.Strings("first", distrusted[:min(10, len(distrusted))]))
	}
	return distrusted, nil
}

// RewriteDistrusted copies the files of the record again with copyFile
// (from the source), each at its recorded size and replacing what the
// sink has, before any version is published. Those it cannot copy, and those recorded without a size,
// stay distrusted: treated as absent, and so copied at the size a
// catalog gives (or their versions refused) like any missing file.
func (d Durability) RewriteDistrusted(ctx context.Context, copyFile func(ctx context.Context, name string, size int64) error) {
	s := d.s
	// Not in a dry run: its copies would only be planned, and the files
	// then taken for copied again; left distrusted, they are planned
	// with the versions that need them.
	if len(s.dur.distrusted) == 0 || s.opts.DryRun {
		return
	}
	s.dur.mu.Lock()
	if s.dur.recorded == nil {
		s.dur.recorded, s.dur.written = map[string]int64{}, map[string]bool{}
	}
	var names []string
	var sizes []int64
	for name, size := range s.dur.distrusted {
		if size < 0 {
			// Nothing to confirm a copy by: absent for this run, and
			// not kept in the record (a file a barrier did not cover
			// belongs to a version not published yet, which copies it
			// again with its catalog's size).
			continue
		}
		s.dur.recorded[name] = size // the record on disk names them
		names = append(names, name)
		sizes = append(sizes, size)
	}
	s.dur.mu.Unlock()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, name := range names {
		size := sizes[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := copyFile(d.WithoutSync(ctx), name, size); err != nil {
				// Left in the record: its bytes are as untrusted as before.
				s.log.Warn("file written before a power cut could not be copied again; treated as absent",
					zap.String("file", name), zap.Error(err))
				return
			}
			d.WroteUnsynced(name)
			mu.Lock()
			delete(s.dur.distrusted, name)
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// IsDistrusted says whether a file of the sink may hold wrong bytes.
func (d Durability) IsDistrusted(name string) bool {
	s := d.s
	if len(s.dur.distrusted) == 0 {
		return false
	}
	_, ok := s.dur.distrusted[name]
	return ok
}

// isDataFileName says whether name is a data file of the mirror's layout:
// below data_dir (dir), a clean name outside the mirror's own folder, and
// none of the names a repository's readers start from.
func isDataFileName(name, dir string) bool {
	if backend.CheckName(name) != nil || strings.HasPrefix(name, backend.ReservedPrefix) {
		return false
	}
	if dir == "" || !strings.HasPrefix(name, dir) || len(name) == len(dir) {
		return false
	}
	switch {
	case name == repo.SettingsFile, name == repo.HeadFile, name == repo.RefsFile,
		strings.HasPrefix(name, "refs/"), strings.HasPrefix(name, repo.VersionsDir):
		return false // a data_dir of "" or "/" cannot reach them either way
	}
	return true
}

// quoteName is a name from a file the run did not write, fit for a log
// line: quoted, non-UTF-8 bytes escaped, at most 256 bytes.
func quoteName(name string) string {
	if len(name) > 256 {
		name = name[:256] + "…"
	}
	return strconv.Quote(name)
}

// RecordUnsynced adds names to the record, with the sizes their catalogs
// give (sizes[i] for names[i]), durably, before they are written without
// a barrier.
func (d Durability) RecordUnsynced(ctx context.Context, names []string, sizes []int64) error {
	s := d.s
	if !d.deferSync() || s.opts.NoUnsyncedRecord || len(names) == 0 {
		return nil
	}
	s.dur.mu.Lock()
	defer s.dur.mu.Unlock()
	if s.dur.recorded == nil {
		s.dur.recorded, s.dur.written = map[string]int64{}, map[string]bool{}
	}
	added := false
	for i, n := range names {
		if size, ok := s.dur.recorded[n]; !ok || size != sizes[i] {
			s.dur.recorded[n] = sizes[i]
			added = true
		}
	}
	if !added {
		return nil
	}
	return d.writeUnsyncedLocked(ctx)
}

func (d Durability) writeUnsyncedLocked(ctx context.Context) error {
	s := d.s
	rec := unsyncedRecord{Files: make([]unsyncedEntry, 0, len(s.dur.recorded))}
	for n, size := range s.dur.recorded {
		rec.Files = append(rec.Files, unsyncedEntry{n, size})
	}
	sort.Slice(rec.Files, func(i, j int) bool { return rec.Files[i].Name < rec.Files[j].Name })
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := lock.WriteState(ctx, s.b, UnsyncedFile, append(raw, '\n')); err != nil {
		return s.errorf("writing %s%s: %w", backend.ReservedPrefix, UnsyncedFile, err)
	}
	s.dur.onDisk = true
	return nil
}

// WroteUnsynced notes that a recorded file's write returned: the next
// barrier to start covers it.
func (d Durability) WroteUnsynced(name string) {
	s := d.s
	s.dur.mu.Lock()
	defer s.dur.mu.Unlock()
	if _, ok := s.dur.recorded[name]; ok {
		s.dur.written[name] = true
	}
}

// Barrier makes every write so far durable, and settles the recorded
// names written before it started. The record on disk keeps them until it
// is written again (or removed by SettleUnsynced): a power cut in between
// costs only copying them again.
func (d Durability) Barrier(ctx context.Context) error {
	s := d.s
	if !d.deferSync() {
		return nil
	}
	s.dur.barrierMu.Lock()
	defer s.dur.barrierMu.Unlock()
	s.dur.mu.Lock()
	covered := make([]string, 0, len(s.dur.written))
	for n := range s.dur.written {
		covered = append(covered, n)
	}
	s.dur.mu.Unlock()
	if err := s.dur.barrier.Barrier(ctx); err != nil {
		return err
	}
	s.dur.mu.Lock()
	for _, n := range covered {
		delete(s.dur.written, n)
		delete(s.dur.recorded, n)
	}
	s.dur.mu.Unlock()
	return nil
}

// SettleUnsynced ends stage one: a last barrier for what no version's
// barrier covered (files of refused versions, say), then the record goes.
func (d Durability) SettleUnsynced(ctx context.Context) {
	s := d.s
	if !d.deferSync() {
		return
	}
	if err := d.Barrier(ctx); err != nil {
		s.log.Warn("could not make the run's writes durable; the next run copies them again", zap.Error(err))
		return
	}
	s.dur.mu.Lock()
	defer s.dur.mu.Unlock()
	if len(s.dur.recorded) > 0 || !s.dur.onDisk {
		// Names not written by this run (a cancelled copy) stay recorded.
		if len(s.dur.recorded) > 0 {
			if err := d.writeUnsyncedLocked(ctx); err != nil {
				s.log.Warn("could not rewrite the record of unsynced files", zap.Error(err))
			}
		}
		return
	}
	if err := lock.RemoveState(ctx, s.b, UnsyncedFile); err != nil {
		s.log.Warn("could not remove the record of unsynced files; the next run copies them again", zap.Error(err))
		return
	}
	s.dur.onDisk = false
}
