package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// A holder whose renewals stopped (a run paused past its lease) must not
// write on the strength of a lock object that still carries its token: a
// taker may take it over at any moment. CheckLease, reading nothing,
// refuses once the lease less its margin has passed by the holder's own
// clock, and the lock counts as lost.
func TestObjectLockCheckLeaseFailsOnceTheLeaseRanOut(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		ttl := 2 * time.Second
		h := mustLock(t, st, lock.Options{Owner: "holder", TTL: ttl})
		if err := h.CheckLease(); err != nil {
			t.Fatalf("CheckLease on a fresh lock: %v", err)
		}
		watched, stop := h.Watch(context.Background())
		defer stop()
		lock.FreezeRenewal(h)
		frozen := time.Now()
		// Within the lease less its margin (ttl/10), the lease holds.
		time.Sleep(ttl / 2)
		if err := h.CheckLease(); err != nil && time.Since(frozen) < ttl*8/10 {
			t.Fatalf("CheckLease %v into a %v lease: %v", time.Since(frozen), ttl, err)
		}
		time.Sleep(time.Until(frozen.Add(ttl * 9 / 10)))
		err := h.CheckLease()
		if !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrLeaseRanOut) {
			t.Fatalf("CheckLease %v after the last renewal of a %v lease: err = %v, want ErrLost and ErrLeaseRanOut", time.Since(frozen), ttl, err)
		}
		// The store still holds our token: only the clock said so.
		if rec := readRecord(t, st); rec.Owner != "holder" {
			t.Fatalf("the lock object changed: %+v", rec)
		}
		select {
		case <-h.Lost():
		case <-time.After(time.Second):
			t.Fatal("Lost not closed after CheckLease failed")
		}
		select {
		case <-watched.Done():
			if cause := context.Cause(watched); !errors.Is(cause, lock.ErrLost) {
				t.Fatalf("watched context's cause = %v, want ErrLost", cause)
			}
		case <-time.After(time.Second):
			t.Fatal("the run's context was not cancelled after CheckLease failed")
		}
	})
}

// Renewals keep the lease: a holder that renews passes CheckLease long
// past its first TTL.
func TestObjectLockCheckLeaseHoldsWhileRenewed(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		ttl := 1500 * time.Millisecond
		h := mustLock(t, st, lock.Options{Owner: "holder", TTL: ttl})
		defer h.Release(context.Background())
		end := time.Now().Add(2 * ttl)
		for time.Now().Before(end) {
			if err := h.CheckLease(); err != nil {
				t.Fatalf("CheckLease of a renewed lock: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// A local folder's flock has no lease: CheckLease never fails.
func TestLocalLockHasNoLease(t *testing.T) {
	dir := t.TempDir()
	h, err := lock.Lock(context.Background(), localStore(t, dir), lock.Options{TTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	time.Sleep(10 * time.Millisecond)
	if err := h.CheckLease(); err != nil {
		t.Fatalf("CheckLease of a local lock: %v", err)
	}
}
