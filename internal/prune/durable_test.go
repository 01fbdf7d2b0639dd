package prune

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// journal is a sink that notes every removal, whether it was made durable
// when it returned (no backend.WithoutSync), and every barrier.
type journal struct {
	backend.Backend
	mu     sync.Mutex
	events []string // "remove NAME", "remove-unsynced NAME", "barrier"
}

func (j *journal) Remove(ctx context.Context, name string) error {
	j.mu.Lock()
	op := "remove "
	if backend.SyncDeferred(ctx) {
		op = "remove-unsynced "
	}
	j.events = append(j.events, op+name)
	j.mu.Unlock()
	return j.Backend.Remove(ctx, name)
}

func (j *journal) Barrier(ctx context.Context) error {
	j.mu.Lock()
	j.events = append(j.events, "barrier")
	j.mu.Unlock()
	b, _ := backend.As[backend.Barrier](j.Backend)
	return b.Barrier(ctx)
}

func (j *journal) Unwrap() backend.Reader { return j.Backend }

// A prune's removals are durable in its order: whatever moment the power
// goes, no version.json is gone for good while a ref to it may come back,
// and no data file while a version.json naming it may.
func TestPruneRemovalsAreDurableStepByStep(t *testing.T) {
	up, mirror, id := withdrawnBranch(t)
	j := &journal{Backend: mirror}
	if _, err := runStores(context.Background(), up, j, Options{}); err != nil {
		t.Fatal(err)
	}
	// durable[i]: event i's removal is durable before event i+1 starts
	// or at a later barrier; a removal is "settled" once durable.
	settledAt := make([]int, len(j.events)) // index at which it is durable
	pending := []int{}
	for i, ev := range j.events {
		switch {
		case ev == "barrier":
			for _, p := range pending {
				settledAt[p] = i
			}
			pending = nil
		case strings.HasPrefix(ev, "remove-unsynced "):
			pending = append(pending, i)
			settledAt[i] = len(j.events) // never, unless a barrier follows
		default:
			settledAt[i] = i
		}
	}
	if len(pending) > 0 {
		t.Fatalf("removals left without a barrier at the end: %v", j.events)
	}
	kind := func(ev string) string {
		name := ev[strings.Index(ev, " ")+1:]
		switch {
		case strings.HasPrefix(name, "refs/") || name == "HEAD":
			return "ref"
		case strings.HasSuffix(name, "/version.json"):
			return "record"
		case strings.HasPrefix(name, "data/"):
			return "data"
		}
		return "other"
	}
	before := map[string]string{"record": "ref", "data": "record"}
	for i, ev := range j.events {
		if ev == "barrier" {
			continue
		}
		must, ok := before[kind(ev)]
		if !ok {
			continue
		}
		for k, earlier := range j.events[:i] {
			if earlier != "barrier" && kind(earlier) == must && settledAt[k] > i {
				t.Fatalf("%s (event %d) starts before %s (event %d) is durable: %v", ev, i, earlier, k, j.events)
			}
		}
	}
	if !strings.Contains(strings.Join(j.events, "\n"), "versions/"+id+"/version.json") {
		t.Fatalf("the prune did not remove version %s: %v", id, j.events)
	}
}
