// Package limiter caps the bandwidth of a run (--bwlimit), as a store
// wrapper in the way of restic's limiter: one token bucket
// (golang.org/x/time/rate) shared by every store wrapped with it, so that
// all the transfers of a run together stay under the limit.
//
// What is counted is the bytes read from a store: the bodies that Open
// returns. Every byte a mirror writes was first read from the source (the
// data files stream through, the catalog and records are read whole
// first), so wrapping the source counts each byte of a copy once, never
// twice. Server-side copies (S3 CopyObject, GCS rewrite) move no byte
// through the mirror and are not limited: Copier is found under the
// wrapper, through Unwrap.
package limiter

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/time/rate"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// MaxBurst caps the bytes one Read may take from the bucket at once: the
// bucket holds at most this much (or a tenth of a second at the rate, if
// less), so the rate holds over short spans too.
const MaxBurst = 256 << 10

// ParseRate reads a rate in bytes per second: a number with an optional
// suffix K, M or G (powers of 1024, as rclone's --bwlimit), and an
// optional trailing "B" or "/s": "10M", "512k", "1.5MiB/s", "1000". Zero
// or "off" means no limit.
func ParseRate(s string) (int64, error) {
	in := strings.TrimSpace(s)
	t := strings.ToUpper(in)
	if t == "" || t == "0" || t == "OFF" {
		return 0, nil
	}
	t = strings.TrimSuffix(t, "/S")
	t = strings.TrimSuffix(t, "B")
	t = strings.TrimSuffix(t, "I")
	mult := 1.0
	switch {
	case strings.HasSuffix(t, "K"):
		mult = 1 << 10
	case strings.HasSuffix(t, "M"):
		mult = 1 << 20
	case strings.HasSuffix(t, "G"):
		mult = 1 << 30
	}
	if mult != 1 {
		t = t[:len(t)-1]
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*mult > 1<<50 {
		return 0, fmt.Errorf("bandwidth limit %q: not a rate such as 10M (bytes per second; K, M, G are powers of 1024)", in)
	}
	n := int64(f * mult)
	if n == 0 && f > 0 {
		n = 1
	}
	return n, nil
}

// Limiter is the shared token bucket of a run.
type Limiter struct {
	l     *rate.Limiter
	burst int
}

// New returns a limiter of bytesPerSecond (> 0).
func New(bytesPerSecond int64) *Limiter {
	burst := int(min(MaxBurst, max(bytesPerSecond/10, 1)))
	return &Limiter{l: rate.NewLimiter(rate.Limit(bytesPerSecond), burst), burst: burst}
}

// Wrap returns r with the bodies it opens limited by l.
func (l *Limiter) Wrap(r backend.Reader) backend.Reader { return &Reader{r: r, l: l} }

// Reader limits the bodies a store's Open returns.
type Reader struct {
	r backend.Reader
	l *Limiter
}

// Unwrap returns the store underneath, where a Copier is looked for.
func (r *Reader) Unwrap() backend.Reader { return r.r }

func (r *Reader) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, err := r.r.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return &body{rc: rc, ctx: ctx, l: r.l}, nil
}

func (r *Reader) Stat(ctx context.Context, name string) (backend.FileInfo, error) {
	return r.r.Stat(ctx, name)
}

func (r *Reader) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	return r.r.List(ctx, prefix, fn)
}

func (r *Reader) Properties() backend.Properties { return r.r.Properties() }
func (r *Reader) Location() string               { return r.r.Location() }

// body takes a token per byte after each Read, at most a burst per Read.
type body struct {
	rc  io.ReadCloser
	ctx context.Context
	l   *Limiter
}

func (b *body) Read(p []byte) (int, error) {
	if len(p) > b.l.burst {
		p = p[:b.l.burst]
	}
	n, err := b.rc.Read(p)
	if n > 0 {
		if werr := b.l.l.WaitN(b.ctx, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}

func (b *body) Close() error { return b.rc.Close() }

var (
	_ backend.Reader    = (*Reader)(nil)
	_ backend.Unwrapper = (*Reader)(nil)
	_ io.ReadCloser     = (*body)(nil)
)
