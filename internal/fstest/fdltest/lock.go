package fdltest

import (
	"context"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// HoldLock takes the lock of the mirror at addr as another run would, and
// holds it until the test releases it or ends.
func HoldLock(t testing.TB, addr string, opts lock.Options) *lock.Held {
	t.Helper()
	ctx := context.Background()
	dst, closeDst, err := location.OpenWritable(ctx, addr, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDst() })
	held, err := lock.Lock(ctx, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Release(ctx) })
	return held
}
