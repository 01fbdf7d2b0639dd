package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// The mirror's state files, under .fdl-mirror/ (readers never look
// there), written only by a run that holds the lock (lock.WriteState).

// State is the mirror's state files: the versions pending a retry, the
// source's address, when upstream's refs last changed.
type State struct{ s *Sink }

// State is the mirror's state files.
func (s *Sink) State() State { return State{s} }

// PendingFile is the mirror's list of versions it could not mirror yet.
const PendingFile = "pending.json"

// maxPendingFile bounds the state file read back: MaxPendingVersions
// entries of messages bounded by repo.BoundText, with room to spare.
const maxPendingFile = 4 << 20

// MaxPendingVersions caps the versions the list keeps; the rest are
// counted (pendingFile.More). An upstream can make any number of
// ancestors fail; the list is for a person to read, and a version left
// out is found again while a ref still leads to it.
const MaxPendingVersions = 1000

// pendingFile is PendingFile's content. An earlier release wrote the
// bare list.
type pendingFile struct {
	Versions []PendingVersion `json:"versions"`
	More     int              `json:"more,omitempty"` // versions left out
}

// parsePending reads PendingFile, bounded: at most MaxPendingVersions
// versions (the rest counted in more), each message bounded.
func parsePending(raw []byte) (list []PendingVersion, more int, err error) {
	var f pendingFile
	if len(bytes.TrimSpace(raw)) > 0 && bytes.TrimSpace(raw)[0] == '[' {
		err = json.Unmarshal(raw, &f.Versions)
	} else {
		err = json.Unmarshal(raw, &f)
	}
	if err != nil {
		return nil, 0, err
	}
	for _, p := range f.Versions {
		if repo.CheckVersionID(p.Version) != nil {
			continue
		}
		if len(list) == MaxPendingVersions {
			more++
			continue
		}
		p.Reason, p.Message = repo.BoundText(p.Reason, 64), repo.BoundText(p.Message, repo.MaxMessage)
		list = append(list, p)
	}
	return list, more + f.More, nil
}

// PendingVersion is an ancestor a run refused: a later run finds nothing
// to walk below the complete child, so the mirror remembers it and every
// run tries it again until it is mirrored or upstream no longer has it.
type PendingVersion struct {
	Version string    `json:"version"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"` // first refused
}

// ReadPending reads the versions a mirror has kept to retry (see
// PendingVersion), at most MaxPendingVersions, and how many more it
// counts; none when there are none. An unusable file is logged and read
// as none (the next sync sets it aside).
func (st State) ReadPending(ctx context.Context) ([]PendingVersion, int, error) {
	s := st.s
	raw, err := lock.ReadStateOrSetAside(ctx, s.b, PendingFile, maxPendingFile, false, s.log)
	if err != nil || raw == nil {
		return nil, 0, err
	}
	list, more, err := parsePending(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("mirror %s: %s%s: %w", s.b.Location(), backend.ReservedPrefix, PendingFile, err)
	}
	return list, more, nil
}

// readPending is the inventory's reading of PendingFile: a damaged one is
// the mirror's own file, started again rather than stopping every run
// (what was pending is found again only where a ref still leads to it
// through an incomplete version); an unusable one is set aside by a run
// that writes.
func (st State) readPending(ctx context.Context) (map[string]PendingVersion, error) {
	s := st.s
	pending := map[string]PendingVersion{}
	raw, err := lock.ReadStateOrSetAside(ctx, s.b, PendingFile, maxPendingFile, !s.opts.DryRun, s.log)
	if err != nil {
		return nil, s.errorf("%s%s: %w", backend.ReservedPrefix, PendingFile, err)
	}
	if raw == nil {
		return pending, nil
	}
	list, _, err := parsePending(raw)
	if err != nil {
		s.log.Warn("the mirror's list of pending versions is unreadable; starting a new one",
			zapFile(PendingFile), zapErr(err))
		return pending, nil
	}
	for _, p := range list {
		pending[p.Version] = p
	}
	return pending, nil
}

// WritePending replaces the list of pending versions (sorted), with the
// count of those left out.
func (st State) WritePending(ctx context.Context, list []PendingVersion, more int) error {
	s := st.s
	raw, _ := json.MarshalIndent(pendingFile{Versions: list, More: more}, "", "  ")
	return lock.WriteState(ctx, s.b, PendingFile, append(raw, '\n'))
}

// SourceFile records the address a mirror of a repository without an id
// was made from. fdl.json's id is what tells two repositories apart;
// where neither side has one, the address is all there is, and without it
// two repositories would be merged into one sink (their versions side by
// side, main overwritten by the other's).
const SourceFile = "source.json"

// SourceRecord is the content of SourceFile.
type SourceRecord struct {
	// Address is the source's address as location.Clean gives it: no
	// credentials, no query.
	Address  string    `json:"address"`
	Recorded time.Time `json:"recorded"`
}

// maxSourceRecord bounds the record read back: an address and a time.
const maxSourceRecord = 64 << 10

// readSourceRecord reads a mirror's SourceFile; nil when it has none.
func readSourceRecord(ctx context.Context, dst backend.Reader) (*SourceRecord, error) {
	raw, err := lock.ReadStateOrSetAside(ctx, dst, SourceFile, maxSourceRecord, false, nil)
	if err != nil || raw == nil {
		return nil, err
	}
	var r SourceRecord
	if err := json.Unmarshal(raw, &r); err != nil || r.Address == "" {
		return nil, fmt.Errorf("%s%s: not a source record: %v", backend.ReservedPrefix, SourceFile, err)
	}
	return &r, nil
}

// WriteSourceRecord records the source's address for the next runs.
func (st State) WriteSourceRecord(ctx context.Context, address string) error {
	s := st.s
	raw, err := json.MarshalIndent(SourceRecord{Address: address, Recorded: time.Now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	if err := lock.WriteState(ctx, s.b, SourceFile, append(raw, '\n')); err != nil {
		return s.errorf("recording the source in %s%s: %w", backend.ReservedPrefix, SourceFile, err)
	}
	return nil
}

// UpstreamStateFile is when the mirror saw each selected upstream ref
// change: an upstream that stops changing (a freeze, TUF's name for it)
// shows as an old last change, for status and an alert.
const UpstreamStateFile = "upstream.json"

// maxUpstreamState bounds the state file read back: a record a ref, as
// refs.json is bounded by the refs the mirror holds.
const maxUpstreamState = 64 << 20

// UpstreamState is the content of UpstreamStateFile.
type UpstreamState struct {
	// LastRead is when a run that wrote the state last read upstream's
	// refs; runs with nothing to write leave the file as it is.
	LastRead time.Time          `json:"last_read"`
	Refs     map[string]RefSeen `json:"refs"`
}

// RefSeen is an upstream ref's value and when the mirror first saw it.
type RefSeen struct {
	Version string    `json:"version"`
	Changed time.Time `json:"changed"`
}

// LastChange is the latest change of any ref in the state (zero if none).
func (s UpstreamState) LastChange() time.Time {
	var t time.Time
	for _, r := range s.Refs {
		if r.Changed.After(t) {
			t = r.Changed
		}
	}
	return t
}

// readUpstreamState reads a mirror's UpstreamStateFile; the zero value when
// it has none or it is unreadable (the mirror's own file: a damaged one is
// replaced by the next run that writes). raw is nil when it has none.
func readUpstreamState(ctx context.Context, dst backend.Reader) (state UpstreamState, raw []byte, err error) {
	raw, err = lock.ReadStateOrSetAside(ctx, dst, UpstreamStateFile, maxUpstreamState, false, nil)
	if err != nil || raw == nil {
		return UpstreamState{}, nil, err
	}
	var s UpstreamState
	if json.Unmarshal(raw, &s) != nil {
		return UpstreamState{}, raw, nil
	}
	return s, raw, nil
}

// WriteUpstreamState replaces the mirror's UpstreamStateFile.
func (st State) WriteUpstreamState(ctx context.Context, state UpstreamState) error {
	s := st.s
	raw, err := json.MarshalIndent(state, "", "  ")
	if err != nil {
		return err
	}
	return lock.WriteState(ctx, s.b, UpstreamStateFile, append(raw, '\n'))
}
