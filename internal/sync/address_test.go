package sync_test

import (
	"context"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

// Runs between stores named by address (a folder, s3://, gs://, http://),
// opened as the command opens them.

// syncAddrWith runs the engine from the store at address src into the
// store at address dst, opened with the given location options.
func syncAddrWith(t *testing.T, src, dst string, lopts location.Options, opts fdlsync.Options) (*fdlsync.Report, error) {
	t.Helper()
	ctx := context.Background()
	from, closeFrom, err := location.Open(ctx, src, lopts)
	if err != nil {
		t.Fatalf("opening %s: %v", src, err)
	}
	defer closeFrom()
	to, closeTo, err := location.OpenWritable(ctx, dst, lopts)
	if err != nil {
		t.Fatalf("opening %s: %v", dst, err)
	}
	defer closeTo()
	if opts.Concurrency == 0 {
		opts.Concurrency = 4
	}
	return syncStores(ctx, from, to, opts)
}

// syncAddr runs the engine between two addresses with the stores'
// default retries.
func syncAddr(t *testing.T, src, dst string, opts fdlsync.Options) (*fdlsync.Report, error) {
	t.Helper()
	return syncAddrWith(t, src, dst, location.Options{}, opts)
}

// problemsAt returns what verify finds in the repository at address addr.
func problemsAt(t *testing.T, addr string) []string {
	t.Helper()
	ctx := context.Background()
	r, closeR, err := location.Open(ctx, addr, location.Options{})
	if err != nil {
		t.Fatalf("opening %s: %v", addr, err)
	}
	defer closeR()
	problems, err := verify.CheckRepository(ctx, source.New(r, nil, nil), verify.CheckOptions{})
	if err != nil {
		t.Fatalf("verify %s: %v", addr, err)
	}
	var out []string
	for _, p := range problems {
		out = append(out, p.Message)
	}
	return out
}
