package sync_test

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// syncStores runs the engine from the store src to the store dst, its
// sides made as mirror.Run makes them; no signature is checked.
func syncStores(ctx context.Context, src backend.Reader, dst backend.Backend, opts fdlsync.Options) (*fdlsync.Report, error) {
	return syncTrusting(ctx, src, dst, nil, opts)
}

// syncTrusting is syncStores with the upstream judged by trust.
func syncTrusting(ctx context.Context, src backend.Reader, dst backend.Backend, trust source.Trust, opts fdlsync.Options) (*fdlsync.Report, error) {
	return fdlsync.Run(ctx, source.New(src, trust, opts.Logger), sink.New(dst, sink.Options{Logger: opts.Logger}), opts)
}
