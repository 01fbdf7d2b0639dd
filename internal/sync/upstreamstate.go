package sync

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// upstreamState is when the mirror saw each selected upstream ref change
// (sink.UpstreamStateFile), as this run read it and will write it.
type upstreamState struct {
	loaded sink.UpstreamState
	raw    []byte    // as read; nil when absent
	now    time.Time // when this run read upstream: one time for the report and the record
}

// loadUpstreamState reads the state; a run whose state does not match the
// selected upstream refs has something to write (see hasWork).
func (e *engine) loadUpstreamState(ctx context.Context) {
	s, raw, err := e.sink.UpstreamState(ctx)
	if err != nil {
		e.log.Warn("reading the mirror's upstream state; starting a new one",
			zap.String("file", backend.ReservedPrefix+sink.UpstreamStateFile), zap.Error(err))
	}
	e.upstream.state = &upstreamState{loaded: s, raw: raw, now: time.Now().UTC()}
	e.report.UpstreamLastChange = s.LastChange()
}

// nextUpstreamState is the state after seeing upstream refs now: a ref
// keeps its change time while its value is the same.
func (e *engine) nextUpstreamState(upstream repo.Refs, now time.Time) sink.UpstreamState {
	next := sink.UpstreamState{LastRead: now, Refs: map[string]sink.RefSeen{}}
	for name, id := range upstream {
		seen, ok := e.upstream.state.loaded.Refs[name]
		if !ok || seen.Version != id {
			seen = sink.RefSeen{Version: id, Changed: now}
		}
		next.Refs[name] = seen
	}
	return next
}

// upstreamStateStale says whether the state on record differs from
// upstream's refs now (a ref changed, appeared or went).
func (e *engine) upstreamStateStale(upstream repo.Refs) bool {
	if e.upstream.state == nil {
		return false
	}
	have := e.upstream.state.loaded.Refs
	if e.upstream.state.raw == nil || len(have) != len(upstream) {
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
	next := e.nextUpstreamState(upstream, e.upstream.state.now)
	if err := e.sink.WriteUpstreamState(ctx, next); err != nil {
		e.log.Warn("writing the mirror's upstream state", zap.Error(err))
		return
	}
	e.report.UpstreamLastChange = next.LastChange()
}
