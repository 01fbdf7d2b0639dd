// Package powercut simulates a power cut under a local mirror, for tests:
// a wrapper around the sink records every write made under
// backend.WithoutSync that no Barrier has covered yet, cuts the power at a
// chosen write (every later write fails, the run is cancelled), and then
// does to those files what a file system may do to data it had not yet
// written back: keep the name and the size with zeroed bytes, keep the
// name with no bytes, or lose the name.
package powercut

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// ErrPowerCut is every write's error once the power is cut.
var ErrPowerCut = errors.New("power cut")

// Sink is a local sink whose power can be cut.
type Sink struct {
	backend.Backend
	dir string

	mu       sync.Mutex
	unsynced map[string]bool // written under WithoutSync since the last Barrier
	deferred int             // writes under WithoutSync so far
	cutAt    int             // cut the power after this many (0: never)
	cut      bool
	cancel   context.CancelFunc
}

// New wraps sink, the store of folder dir. The power goes after the
// cutAt-th write under backend.WithoutSync returns; cancel is then called
// (the run's context).
func New(sink backend.Backend, dir string, cutAt int, cancel context.CancelFunc) *Sink {
	return &Sink{Backend: sink, dir: dir, unsynced: map[string]bool{}, cutAt: cutAt, cancel: cancel}
}

func (s *Sink) Unwrap() backend.Reader { return s.Backend }

func (s *Sink) isCut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut
}

func (s *Sink) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if s.isCut() {
		return ErrPowerCut
	}
	if err := s.Backend.Put(ctx, name, r, size); err != nil {
		return err
	}
	if !backend.SyncDeferred(ctx) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsynced[name] = true
	s.deferred++
	if s.deferred == s.cutAt {
		s.cut = true
		s.cancel()
	}
	return nil
}

func (s *Sink) Create(ctx context.Context, name string, r io.Reader, size int64) error {
	if s.isCut() {
		return ErrPowerCut
	}
	return s.Backend.Create(ctx, name, r, size)
}

func (s *Sink) Remove(ctx context.Context, name string) error {
	if s.isCut() {
		return ErrPowerCut
	}
	return s.Backend.Remove(ctx, name)
}

// Barrier covers the writes recorded when it starts: a write that returns
// while it runs is taken as not covered, the worse case.
func (s *Sink) Barrier(ctx context.Context) error {
	s.mu.Lock()
	if s.cut {
		s.mu.Unlock()
		return ErrPowerCut
	}
	covered := make([]string, 0, len(s.unsynced))
	for n := range s.unsynced {
		covered = append(covered, n)
	}
	s.mu.Unlock()
	b, _ := backend.As[backend.Barrier](s.Backend)
	if b == nil {
		return fmt.Errorf("powercut: %s has no barrier", s.dir)
	}
	if err := b.Barrier(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range covered {
		delete(s.unsynced, n)
	}
	return nil
}

// Damage is what the power cut did to the files no barrier covered, by
// name: Zeroed, Empty or Gone.
type Damage map[string]string

// What a power cut can do to a file written since the last barrier.
const (
	Zeroed = "zeroed" // its name and size, every byte zero
	Empty  = "empty"  // its name, no bytes
	Gone   = "gone"   // no name
)

// Cut cuts the power now (if the chosen write did not) and damages the
// files written since the last barrier, each in one of ways (all three
// when none is given), in turn over the names in order.
func (s *Sink) Cut(ways ...string) (Damage, error) {
	if len(ways) == 0 {
		ways = []string{Zeroed, Empty, Gone}
	}
	s.mu.Lock()
	s.cut = true
	names := make([]string, 0, len(s.unsynced))
	for n := range s.unsynced {
		names = append(names, n)
	}
	s.mu.Unlock()
	sort.Strings(names)
	damage := Damage{}
	for i, name := range names {
		p := filepath.Join(s.dir, filepath.FromSlash(name))
		var err error
		way := ways[i%len(ways)]
		switch way {
		case Zeroed:
			var st os.FileInfo
			if st, err = os.Stat(p); err == nil {
				err = os.WriteFile(p, make([]byte, st.Size()), 0o644)
			}
		case Empty:
			err = os.Truncate(p, 0)
		case Gone:
			err = os.Remove(p)
		default:
			err = fmt.Errorf("no such damage %q", way)
		}
		damage[name] = way
		if err != nil {
			return nil, fmt.Errorf("powercut: %s: %w", name, err)
		}
	}
	return damage, nil
}
