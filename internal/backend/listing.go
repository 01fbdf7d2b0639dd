package backend

import (
	"context"
	"sync"
	"sync/atomic"
)

// LazyListing is one folder of a store, listed the first time a run
// needs it and then shared by every goroutine that asks (a sink's and a
// source's data_dir).
type LazyListing struct {
	once   sync.Once
	files  map[string]int64 // name → size
	err    error
	loaded atomic.Bool // once has run
}

// Load lists dir in r on the first call; every call returns that listing.
func (l *LazyListing) Load(ctx context.Context, r Reader, dir string) (map[string]int64, error) {
	l.once.Do(func() {
		l.files = map[string]int64{}
		l.err = r.List(ctx, dir, func(fi FileInfo) error {
			l.files[fi.Name] = fi.Size
			return nil
		})
		l.loaded.Store(true)
	})
	return l.files, l.err
}

// Loaded says whether the folder was listed.
func (l *LazyListing) Loaded() bool { return l.loaded.Load() }

// Len is how many files the listing holds; call it only once Loaded.
func (l *LazyListing) Len() int { return len(l.files) }
