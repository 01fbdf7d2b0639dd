package lock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// pauses records the settle pauses Lock takes, without waiting for them.
type pauses struct {
	mu  sync.Mutex
	got []time.Duration
}

func (p *pauses) install(t *testing.T) {
	t.Helper()
	restore := lock.SetSettlePause(func(_ context.Context, d time.Duration) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.got = append(p.got, d)
		return nil
	})
	t.Cleanup(restore)
}

func (p *pauses) taken() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.got...)
}

// A lock created where none was needs no settle pause: the pause guards
// the takeover of an expired lock (issue 14: 1 s of every small run).
func TestObjectLockFreshCreateTakesNoSettlePause(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		var p pauses
		p.install(t)
		h := mustLock(t, st, lock.Options{Owner: "fresh"})
		if got := p.taken(); len(got) != 0 {
			t.Errorf("fresh lock took settle pauses %v, want none", got)
		}
		if rec := readRecord(t, st); rec.Owner != "fresh" {
			t.Fatalf("lock names %q", rec.Owner)
		}
		if err := h.Check(context.Background()); err != nil {
			t.Fatalf("Check after a fresh lock: %v", err)
		}
		if err := h.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// Taking over an expired lock still pauses before reading ours back.
func TestObjectLockTakeoverTakesTheSettlePause(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		var p pauses
		p.install(t)
		writeRecord(t, st, record{Owner: "killed", Expires: time.Now().Add(-time.Second), Token: "dead"})
		h := mustLock(t, st, lock.Options{Owner: "taker", TTL: 10 * time.Second})
		defer h.Release(context.Background())
		// TTL/20, between 100 ms and 1 s.
		if got := p.taken(); len(got) != 1 || got[0] != 500*time.Millisecond {
			t.Fatalf("takeover took settle pauses %v, want one of 500ms", got)
		}
		if rec := readRecord(t, st); rec.Owner != "taker" {
			t.Fatalf("lock names %q", rec.Owner)
		}
	})
}
