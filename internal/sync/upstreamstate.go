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
	s, raw, err := e.sink.State().UpstreamState(ctx)
	if err != nil {
		e.log.Warn("reading the mirror's upstream state; starting a new one",
			zap.String("file", backend.ReservedPrefix+sink.UpstreamStateFile), zap.Error(err))
	}
	e.upstream.state = &upstreamState{loaded: s, raw: raw, now: time.Now().UTC()}
	e.report.UpstreamLastChange = s.LastChange()
}

// upstreamStateStale says whether the state on record differs from
// upstream's refs now (see upstreamStateStale).
func (l *ledger) upstreamStateStale(upstream repo.Refs) bool {
	if l.upstream.state == nil {
		return false
	}
	return upstreamStateStale(l.upstream.state.loaded, l.upstream.state.raw == nil, upstream)
}

// saveUpstreamState records when upstream refs changed; only a run that
// writes (and so holds the lock) saves it, and only a run that read
// upstream's refs without error.
func (p *publisher) saveUpstreamState(ctx context.Context, upstream repo.Refs, readOK bool) {
	// A dry run's sink would write nothing, but its report would then
	// give a last change no state file records: a dry run says none.
	if p.opts.DryRun || !readOK || !p.upstreamStateStale(upstream) {
		return
	}
	next := nextUpstreamState(p.upstream.state.loaded, upstream, p.upstream.state.now)
	if err := p.sink.State().WriteUpstreamState(ctx, next); err != nil {
		p.log.Warn("writing the mirror's upstream state", zap.Error(err))
		return
	}
	p.report.UpstreamLastChange = next.LastChange()
}
