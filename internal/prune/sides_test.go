package prune

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// runStores prunes the store dst against the store src, its sides made
// as mirror.Prune makes them.
func runStores(ctx context.Context, src backend.Reader, dst backend.Backend, opts Options) (*Report, error) {
	return Run(ctx, source.New(src, nil, opts.Logger), sink.New(dst, sink.Options{Logger: opts.Logger}), opts)
}
