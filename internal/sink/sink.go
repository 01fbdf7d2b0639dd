// Package sink is the mirror: what it holds, read before anything is
// written (the inventory, returned whole as a value), its state files
// under .fdl-mirror/, the write guard of a run that locks lazily,
// durability (barriers and the record of files written without one),
// data files written from the source's streams or copied server-side,
// publishing a version folder (version.json last, behind a barrier),
// writing refs in the mirror's order (the refs-moving marker, the ref
// files, refs.json, HEAD), and a prune's removals. Every write of a file
// another run may change is fenced in one place (fence.go). It judges
// nothing of the upstream: its errors are plain, and internal/sync, which
// plans a run, classifies them.
//
// A Sink is reached by concern, each a small value holding it (as
// internal/source's Data and Whole are), so that every concern writes
// through the same guarded store and the same fence: Runs (the lock, the
// write guard, the scratch folder), Data (data files), Durability
// (barriers, the unsynced record), Versions (version folders, published
// and read back), Refs (read, written in order, mended), State (the
// state files), Holdings (the mirror as a prune reads and removes it,
// its candidates) and Claims (a sync's claims on those candidates). The
// Sink itself takes the inventory and creates fdl.json.
//
// In a run (see internal/sync): TakeInventory while the source's refs
// are read; Runs().Locked once the run holds the lock; then, version by
// version, data files (Data().Put, Data().Copy; each recorded with
// Durability().RecordUnsynced where a barrier will cover it), the
// folder's files, Versions().Publish; Durability().SettleUnsynced at the
// end of stage one; Refs().Write for stage two; the state files last. A
// prune: its reads, each object with its version token (Holdings), then
// Holdings().Replace (refs.json) and Holdings().Remove, each step made
// durable by Durability().Barrier. A reader that only reads (status,
// notifications) opens the mirror with NewReader.
//
// Files: sink.go (Sink, small files, fdl.json), inventory.go (the
// inventory; Data's questions, DataCursor), guard.go (the write guard),
// datafiles.go (Data; data files from the source), fence.go (writes and
// removals conditional on what the run read), durability.go
// (Durability), versions.go (Versions; writing and publishing a version
// folder), records.go and reads.go (a version's files read back), refs.go
// (Refs, the marker), holdings.go (Holdings), state.go (State:
// pending.json, source.json, upstream.json), candidates.go (the prune's
// candidates for removal, prune-candidates.json), claims.go (Claims),
// same.go (whether the mirror holds the upstream's repository), runs.go
// (Runs), lock/ (the lock, and the state files' reading and writing).
package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Options tune a Sink.
type Options struct {
	// DryRun writes nothing: every write is planned instead (see
	// dryrun.go).
	DryRun bool
	// Guarded makes every write fail until Runs().Locked is called: the
	// sink of a run that takes the mirror's lock only once it has work.
	Guarded bool
	Logger  *zap.Logger
	// Copied is told of every file written, with its size.
	Copied func(bytes int64)
	// Planned is told of every file a dry run would write.
	Planned func(name string)
	// NoUnsyncedRecord turns the record of unsynced files off, for the
	// test that shows what a power cut does without it.
	NoUnsyncedRecord bool
	// Lease, when set, is asked before every write and removal, and its
	// error stops it: the mirror's lock judged by this process's own
	// clocks (lock.Held.CheckLease), so that a run paused past its lease
	// sends no write it had decided on before the pause.
	Lease func() error
}

// Sink is a mirror being written by one run.
type Sink struct {
	base   backend.Backend // the store as New was given it
	b      backend.Backend // base behind the write guard when Options.Guarded
	copier backend.Copier  // b's server-side copies; nil where it has none
	opts   Options
	log    *zap.Logger
	locked atomic.Bool // the run holds the mirror's lock (see guard.go)
	dur    durability
	data   backend.LazyListing // data_dir, listed only when a version needs it
	// held: the mirror held a complete version when its inventory was
	// taken, so its data_dir may hold many files (see Data.File).
	held bool
	// fits: data_dir's names fitted one page of its listing when a pass
	// first asked (see Data.Cursor); fitsOnce asks once.
	fitsOnce sync.Once
	fits     bool
	// tokens: the store gives version tokens (backend.Conditional), and
	// a prune there holds removals for a grace: the run reads the
	// prune's list and claims what it relies on (claims.go).
	tokens bool
	claims claims
}

// New is the mirror in b.
func New(b backend.Backend, opts Options) *Sink {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Copied == nil || opts.DryRun {
		opts.Copied = func(int64) {}
	}
	if opts.Planned == nil {
		opts.Planned = func(string) {}
	}
	s := &Sink{base: b, b: b, opts: opts, log: opts.Logger, tokens: b.Properties().ConditionalWrite}
	s.dur.barrier, _ = backend.As[backend.Barrier](b)
	switch {
	case opts.Guarded:
		s.b = guarded{b, &s.locked, opts.Lease}
	case opts.Lease != nil:
		s.b = guarded{b, nil, opts.Lease} // the caller holds the lock already
	}
	if opts.DryRun {
		// Outside the guard: a dry run's writes go nowhere, locked or not.
		s.b = planned{s.b, opts.Planned}
	}
	s.copier, _ = backend.As[backend.Copier](s.b)
	return s
}

// ForRun is the same mirror as one run writes it: under opts, with the
// sink's own logger where opts has none, and its dry run and lease
// kept.
func (s *Sink) ForRun(opts Options) *Sink {
	if opts.Logger == nil {
		opts.Logger = s.log
	}
	opts.DryRun = opts.DryRun || s.opts.DryRun
	if opts.Lease == nil {
		opts.Lease = s.opts.Lease
	}
	return New(s.base, opts)
}

// NewReader is the mirror in r as a reader of it sees it (status, the
// daemon's notifications): read through the same operations as a run's,
// every write refused (backend.ReadOnly); log nil logs nothing.
func NewReader(r backend.Reader, log *zap.Logger) *Sink {
	return New(backend.ReadOnly(r), Options{Logger: log})
}

// Location is the mirror's address, for messages.
func (s *Sink) Location() string { return s.b.Location() }

// DryRun says whether the sink writes nothing.
func (s *Sink) DryRun() bool { return s.opts.DryRun }

// PutBytes writes a small file (a ref, a record, refs.json).
func (s *Sink) PutBytes(ctx context.Context, name string, b []byte) error {
	ctx = s.claims.claim(ctx, name)
	if err := s.b.Put(ctx, name, strings.NewReader(string(b)), int64(len(b))); err != nil {
		return err
	}
	s.opts.Copied(int64(len(b)))
	return nil
}

// readOptional reads a small file of the mirror; nil when it is absent.
func (s *Sink) readOptional(ctx context.Context, name string, limit int64) ([]byte, error) {
	b, err := backend.ReadAll(ctx, s.b, name, limit)
	if backend.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, s.errorf("%s: %w", name, err)
	}
	return b, nil
}

// readVersioned is readOptional that records the version read in
// inv.Tokens, for a write of Refs.Write conditional on it.
func (s *Sink) readVersioned(ctx context.Context, inv *Inventory, name string, limit int64) ([]byte, error) {
	b, version, err := backend.ReadAllVersion(ctx, s.b, name, limit)
	if backend.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, s.errorf("%s: %w", name, err)
	}
	if version != "" {
		inv.Tokens[name] = version
	}
	return b, nil
}

// errorf is an error about the mirror, naming it.
func (s *Sink) errorf(format string, args ...any) error {
	return fmt.Errorf("sink %s: "+format, append([]any{s.b.Location()}, args...)...)
}

func zapFile(name string) zap.Field { return zap.String("file", backend.ReservedPrefix+name) }
func zapErr(err error) zap.Field    { return zap.Error(err) }

// CreateSettings creates the mirror's fdl.json with raw only where it has
// none (If-None-Match: *). When one is there all the same (made between
// the inventory and this create, or by our own create whose answer was
// lost and retried), it returns that one for the caller to judge.
func (s *Sink) CreateSettings(ctx context.Context, raw []byte) (existing []byte, err error) {
	err = s.b.Create(ctx, repo.SettingsFile, strings.NewReader(string(raw)), int64(len(raw)))
	if errors.Is(err, backend.ErrExist) {
		have, err := s.readOptional(ctx, repo.SettingsFile, repo.MaxSmallFile)
		if err != nil {
			return nil, err
		}
		if have == nil {
			return nil, s.errorf("%s exists and then does not", repo.SettingsFile)
		}
		return have, nil
	}
	if err != nil {
		return nil, s.errorf("creating %s: %w", repo.SettingsFile, err)
	}
	return nil, nil
}
