package sync

import (
	"context"
	"encoding/json"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/lock"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// UpstreamStateFile (under .fdl-mirror/) is when the mirror saw each
// selected upstream ref change: an upstream that stops changing (a freeze,
// TUF's name for it) shows as an old last change, for status and an alert.
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

type upstreamState struct {
	loaded UpstreamState
	raw    []byte    // as read; nil when absent
	now    time.Time // when this run read upstream: one time for the report and the record
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

// ReadUpstreamState reads a mirror's UpstreamStateFile; the zero value when
// it has none or it is unreadable (the mirror's own file: a damaged one is
// replaced by the next run that writes).
func ReadUpstreamState(ctx context.Context, dst backend.Reader) (UpstreamState, []byte, error) {
	raw, err := lock.ReadStateOrSetAside(ctx, dst, UpstreamStateFile, maxUpstreamState, false, nil)
	if err != nil || raw == nil {
		return UpstreamState{}, nil, err
	}
	var s UpstreamState
	if json.Unmarshal(raw, &s) != nil {
		return UpstreamState{}, raw, nil
	}
	return s, raw, nil
}

// loadUpstreamState reads the state; a run whose state does not match the
// selected upstream refs has something to write (see hasWork).
func (e *engine) loadUpstreamState(ctx context.Context) {
	s, raw, err := ReadUpstreamState(ctx, e.dst)
	if err != nil {
		e.log.Warn("reading the mirror's upstream state; starting a new one",
			zap.String("file", backend.ReservedPrefix+UpstreamStateFile), zap.Error(err))
	}
	e.upstreamState = &upstreamState{loaded: s, raw: raw, now: time.Now().UTC()}
	e.report.UpstreamLastChange = s.LastChange()
}

// nextUpstreamState is the state after seeing upstream refs now: a ref
// keeps its change time while its value is the same.
func (e *engine) nextUpstreamState(upstream repo.Refs, now time.Time) UpstreamState {
	next := UpstreamState{LastRead: now, Refs: map[string]RefSeen{}}
	for name, id := range upstream {
		seen, ok := e.upstreamState.loaded.Refs[name]
		if !ok || seen.Version != id {
			seen = RefSeen{Version: id, Changed: now}
		}
		next.Refs[name] = seen
	}
	return next
}

// upstreamStateStale says whether the state on record differs from
// upstream's refs now (a ref changed, appeared or went).
func (e *engine) upstreamStateStale(upstream repo.Refs) bool {
	if e.upstreamState == nil {
		return false
	}
	have := e.upstreamState.loaded.Refs
	if e.upstreamState.raw == nil || len(have) != len(upstream) {
		return true
	}
	for name, id := range upstream {
		if have[name].Version != id {
			return true
		}
	}
	return false
}

// saveUpstreamState records when upstream refs changed; only a run that
// writes (and so holds the lock) saves it, and only a run that read
// upstream's refs without error.
func (e *engine) saveUpstreamState(ctx context.Context, upstream repo.Refs, readOK bool) {
	if e.opts.DryRun || !readOK || !e.upstreamStateStale(upstream) {
		return
	}
	next := e.nextUpstreamState(upstream, e.upstreamState.now)
	raw, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return
	}
	if err := lock.WriteState(ctx, e.dst, UpstreamStateFile, append(raw, '\n')); err != nil {
		e.log.Warn("writing the mirror's upstream state", zap.Error(err))
		return
	}
	e.report.UpstreamLastChange = next.LastChange()
}
