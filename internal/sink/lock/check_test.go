package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// Check reads the lock back at once, without waiting for the next
// renewal: a run about to move refs learns there that another run took
// its lock over (or someone removed it), and Lost is closed (issue 10).
func TestObjectLockCheckSeesATakeoverAtOnce(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		ctx := context.Background()
		h := mustLock(t, st, lock.Options{Owner: "holder", TTL: time.Hour}) // no renewal during the test
		defer h.Release(ctx)
		if err := h.Check(ctx); err != nil {
			t.Fatalf("Check of a lock we hold: %v", err)
		}
		writeRecord(t, st, record{Owner: "thief", Expires: time.Now().Add(time.Hour), Token: "stolen"})
		err := h.Check(ctx)
		if !errors.Is(err, lock.ErrLocked) || !strings.Contains(err.Error(), "thief") {
			t.Fatalf("Check after a takeover: %v, want ErrLocked naming the thief", err)
		}
		select {
		case <-h.Lost():
		default:
			t.Fatal("Lost not closed by a failed Check")
		}
	})
}
