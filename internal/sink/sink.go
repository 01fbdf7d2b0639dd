// Package sink opens a mirror by its address, for writing, and holds the
// lock that keeps two runs from writing one mirror at once.
package sink

import (
	"context"
	"fmt"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	"go.uber.org/zap"
)

// Options carry what some protocols need besides the address.
type Options struct {
	// Retries bounds the retries of one request after its first try; 0
	// keeps each backend's default.
	Retries int
	Logger  *zap.Logger
}

// Open returns a writable store for the mirror at addr: a local path,
// file://, s3:// or gs://. HTTP is read-only and refused here.
func Open(ctx context.Context, addr string, opts Options) (backend.Backend, func() error, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	scheme, rest := source.Scheme(addr)
	switch scheme {
	case "file":
		l, err := local.Create(rest)
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	case "s3", "gs":
		return source.OpenObjectStore(ctx, addr, opts.Retries, opts.Logger)
	case "http", "https":
		return nil, nil, fmt.Errorf("sink %s: HTTP(S) can only be a source", addr)
	}
	return nil, nil, fmt.Errorf("sink %s: unsupported address scheme %q", addr, scheme)
}
