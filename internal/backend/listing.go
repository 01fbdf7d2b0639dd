package backend

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// LazyListing is one folder of a store, listed the first time a run
// needs it and then shared by every goroutine that asks (a sink's and a
// source's data_dir). The names are kept packed in one string, the folder
// left out, beside their sizes, and found by binary search rather than in
// a map: at 100,000 names of 70 bytes a map[string]int64 held 115 bytes a
// name (and allocated twice that on the way), every key a pointer for the
// collector to scan at each cycle; packed they hold 85, and no pointer.
type LazyListing struct {
	once   sync.Once
	dir    string   // what every name listed starts with, left out of names
	names  string   // the names after dir, one after another, as listed
	ends   []uint32 // where each name ends in names
	sizes  []int64  // each name's size
	sorted []int32  // indexes of the names, in name order
	err    error
	loaded atomic.Bool // once has run
}

// Load lists dir in r on the first call, and returns that listing's
// error on every call.
func (l *LazyListing) Load(ctx context.Context, r Reader, dir string) error {
	l.once.Do(func() {
		l.dir = dir
		var names strings.Builder
		l.err = r.List(ctx, dir, func(fi FileInfo) error {
			if !strings.HasPrefix(fi.Name, dir) {
				return fmt.Errorf("listing %s gave %s", dir, fi.Name)
			}
			if names.Len()+len(fi.Name) > math.MaxUint32 || len(l.ends) == math.MaxInt32 {
				return fmt.Errorf("listing %s: more names than one listing holds", dir)
			}
			names.WriteString(fi.Name[len(dir):])
			l.ends = append(l.ends, uint32(names.Len()))
			l.sizes = append(l.sizes, fi.Size)
			return nil
		})
		l.names = names.String()
		l.sorted = make([]int32, len(l.ends))
		for i := range l.sorted {
			l.sorted[i] = int32(i)
		}
		slices.SortFunc(l.sorted, func(a, b int32) int { return strings.Compare(l.name(a), l.name(b)) })
		l.loaded.Store(true)
	})
	return l.err
}

// name is the i-th name as listed.
func (l *LazyListing) name(i int32) string {
	start := uint32(0)
	if i > 0 {
		start = l.ends[i-1]
	}
	return l.names[start:l.ends[i]]
}

// Size is the size the listing gave name; ok is false where it did not
// list it. Call it only once Load has returned.
func (l *LazyListing) Size(name string) (size int64, ok bool) {
	name, ok = strings.CutPrefix(name, l.dir)
	if !ok {
		return 0, false
	}
	k, ok := slices.BinarySearchFunc(l.sorted, name, func(i int32, name string) int { return strings.Compare(l.name(i), name) })
	if !ok {
		return 0, false
	}
	return l.sizes[l.sorted[k]], true
}

// Loaded says whether the folder was listed.
func (l *LazyListing) Loaded() bool { return l.loaded.Load() }

// Len is how many files the listing holds; call it only once Loaded.
func (l *LazyListing) Len() int { return len(l.ends) }
