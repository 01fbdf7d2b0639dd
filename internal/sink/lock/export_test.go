package lock

import (
	"context"
	"time"
)

// SetSettlePause replaces the pause before a taken-over lock is read back,
// until the returned function restores it.
func SetSettlePause(f func(context.Context, time.Duration) error) (restore func()) {
	old := settlePause
	settlePause = f
	return func() { settlePause = old }
}

// FreezeRenewal stops h's renewal goroutine, as a process paused past its
// lease would find it: the lock object still carries h's token, and
// nothing renews it.
func FreezeRenewal(h *Held) {
	h.stop()
	<-h.done
}
