package sync_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// holdOpen is a source whose Open of one object waits until the run's
// context ends, as a download cut by a SIGTERM would, and whose Open of
// another is slow and then succeeds whatever the context, as a request
// already answered would.
type holdOpen struct {
	backend.Backend
	name, slow string
	once       sync.Once
	reached    chan struct{}
}

func (h *holdOpen) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	switch name {
	case h.name:
		h.once.Do(func() { close(h.reached) })
		<-ctx.Done()
		return nil, ctx.Err()
	case h.slow:
		time.Sleep(500 * time.Millisecond)
		return h.Backend.Open(context.WithoutCancel(ctx), name)
	}
	return h.Backend.Open(ctx, name)
}

func (h *holdOpen) Unwrap() backend.Reader { return h.Backend }

// A run stopped while a parent is still being copied never publishes its
// child, even one whose own copies were done by then: the parent gave up
// because the run was stopped, not because it was refused, and no later
// run looks below a complete child for it (seen as a SIGTERM test's
// mirror lacking an ancestor).
func TestStoppedRunPublishesNoChildOfAnUnfinishedParent(t *testing.T) {
	for attempt := range 6 {
		up := filepath.Join(t.TempDir(), "up")
		// Every attempt stops a run over the same upstream: a copy of
		// one generated once.
		g := fdltest.GenerateCopy(t, up, generate.Options{Versions: 2, FilesPerVersion: 40, ExtraFiles: true, FastParquet: true})
		parent, child := g.Versions[0], g.Versions[1]
		src := &holdOpen{Backend: mustOpen(t, up).(backend.Backend), name: repo.VersionFile(parent, "files.json"),
			slow: repo.VersionFile(child, "files.json"), reached: make(chan struct{})}
		sink := filepath.Join(t.TempDir(), "mirror")
		dst, err := local.Create(sink)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-src.reached
			time.Sleep(100 * time.Millisecond) // stopped while the child still copies
			cancel()
		}()
		_, runErr := syncStores(ctx, src, dst, fdlsync.Options{})
		cancel()
		select {
		case <-src.reached:
		default:
			t.Fatalf("attempt %d: the run never opened %s (err %v)", attempt, src.name, runErr)
		}
		dst.Close()
		_, childErr := os.Stat(filepath.Join(sink, "versions", child, repo.RecordFile))
		_, parentErr := os.Stat(filepath.Join(sink, "versions", parent, repo.RecordFile))
		if childErr == nil && parentErr != nil {
			t.Fatalf("attempt %d: the stopped run published %s without its parent %s", attempt, child, parent)
		}
	}
}
