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
