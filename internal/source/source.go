// Package source opens an upstream repository by its address, read-only.
// The protocols are the backends in internal/backend/...; this package only
// turns an address into the right one.
package source

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/gcs"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/httpstore"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
	"go.uber.org/zap"
)

// Options carry what some protocols need besides the address.
type Options struct {
	// HTTPHeaders are sent with every HTTP(S) request ("Name: value").
	HTTPHeaders []string
	// HTTPAllowRedirects are the hosts an HTTP(S) source may redirect to
	// besides its own origin (httpstore.Options.AllowRedirects).
	HTTPAllowRedirects []string
	// Retries bounds the retries of one request after its first try, on
	// 5xx, 429, resets and timeouts; 0 keeps each backend's default.
	Retries int
	Logger  *zap.Logger
}

// Open returns a reader for the repository at addr: a local path, file://,
// s3://, gs://, http:// or https://. The returned close function releases it.
func Open(ctx context.Context, addr string, opts Options) (backend.Reader, func() error, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	scheme, rest := Scheme(addr)
	switch scheme {
	case "file":
		l, err := local.Open(rest)
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	case "s3", "gs":
		return OpenObjectStore(ctx, addr, opts.Retries, opts.Logger)
	case "http", "https":
		u, err := url.Parse(addr)
		if err != nil {
			// The address may hold user:password; url.Error would print it.
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err
			}
			return nil, nil, fmt.Errorf("source: invalid %s:// address: %w", scheme, err)
		}
		st, err := httpstore.Open(ctx, u, httpstore.Options{Headers: opts.HTTPHeaders, AllowRedirects: opts.HTTPAllowRedirects, Logger: opts.Logger, RetryMax: opts.Retries})
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	}
	return nil, nil, fmt.Errorf("source %s: unsupported address scheme %q", addr, scheme)
}

// OpenObjectStore opens an s3:// or gs:// address, a backend that both
// roles share: the sink package opens its mirrors with it too.
func OpenObjectStore(ctx context.Context, addr string, retries int, log *zap.Logger) (backend.Backend, func() error, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", addr, err)
	}
	switch u.Scheme {
	case "s3":
		st, err := s3.Open(ctx, u, s3.Options{Logger: log, MaxAttempts: attempts(retries)})
		if err != nil {
			return nil, nil, err
		}
		return st, func() error { return nil }, nil
	case "gs":
		st, err := gcs.Open(ctx, u, gcs.Options{Logger: log, MaxAttempts: attempts(retries)})
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	}
	return nil, nil, fmt.Errorf("%s: not an object store address", addr)
}

// attempts turns a retry count into the tries a backend makes (0: its default).
func attempts(retries int) int {
	if retries <= 0 {
		return 0
	}
	return retries + 1
}

// Scheme splits an address into its scheme and the rest; a plain path and
// file:// URLs are "file" with the path as the rest.
func Scheme(addr string) (scheme, rest string) {
	if strings.HasPrefix(addr, "file://") {
		u, err := url.Parse(addr)
		if err == nil {
			return "file", u.Path
		}
		return "file", strings.TrimPrefix(addr, "file://")
	}
	if i := strings.Index(addr, "://"); i > 0 && !strings.ContainsAny(addr[:i], "/.") {
		return strings.ToLower(addr[:i]), addr
	}
	return "file", addr
}
