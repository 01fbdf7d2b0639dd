package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Defaults of ResumeOptions.
const (
	// DefaultMaxResumes bounds the resumptions of one body.
	DefaultMaxResumes = 8
	// DefaultResumeWaitMin is the first wait before a resumption; it
	// doubles with each one.
	DefaultResumeWaitMin = 100 * time.Millisecond
	// DefaultResumeWaitMax caps the wait before a resumption.
	DefaultResumeWaitMax = 15 * time.Second
)

// Response is one answer to a download: the first, or a resumption.
type Response struct {
	Body io.ReadCloser
	// Size is the whole object's size, -1 when the first answer did not
	// say (a chunked HTTP body): such a body ends at its EOF and is not
	// resumed. Only the first answer's is read.
	Size int64
	// Pinned says that a resumption reads the same object as the first
	// answer (the store asks for it If-Match or If-Range a validator).
	// Without it a cut-off body is an error. Only the first answer's is
	// read.
	Pinned bool
	// Digest is the store's own checksum of the whole object, when the
	// first answer gives one: a read that needed a resumption is checked
	// against it at its end (a store's client checks only what one
	// answer carried, and a Range answer carries no checksum of the
	// object). Only the first answer's is read.
	Digest *ObjectDigest
}

// ObjectDigest is a store's checksum of a whole object and a fresh hash
// that computes it.
type ObjectDigest struct {
	Name string // for messages: "CRC32C", "MD5 (ETag)"
	Hash hash.Hash
	Want []byte
}

// OpenFunc asks for an object from byte off on: off is 0 for the first
// request, then where a cut-off body stopped. ctx is the body's own: it
// is canceled when the body stalls or is closed. A resumption that does
// not start exactly at off, or reads another object, is an error.
type OpenFunc func(ctx context.Context, off int64) (Response, error)

// ResumeOptions bound the resumptions of one body; zero values are the
// defaults.
type ResumeOptions struct {
	MaxResumes       int
	WaitMin, WaitMax time.Duration
	// IdleTimeout aborts (and then resumes) a body that delivers no byte
	// for this long while a Read waits on it; 0 leaves it to the client.
	IdleTimeout time.Duration
	// OnResume is told of each resumption before it is sent (to log and
	// count it): the object's address, the offset, the resumption's number
	// from 1, and why the body stopped.
	OnResume func(off int64, resume int, cause error)
}

// ResumingReader is a download that resumes where it was cut off (a
// reset, a stall), with backoff, and never ends short: a body that stops
// before the object's size, and cannot be resumed, is an error from Read.
// It replaces a hand-written resuming body in each store (S3, HTTP).
type ResumingReader struct {
	what    string // the object's address, for messages
	ctx     context.Context
	open    OpenFunc
	opts    ResumeOptions
	body    io.ReadCloser
	cancel  context.CancelFunc
	idle    *time.Timer
	stalled atomic.Bool
	size    int64
	pinned  bool
	digest  *ObjectDigest
	off     int64
	resumes int
	pending error // met after bytes that were returned first
	err     error // sticky
}

// OpenResuming sends the first request, through open with off 0, and
// returns its body as a ResumingReader. what names the object in errors.
func OpenResuming(ctx context.Context, what string, open OpenFunc, opts ResumeOptions) (*ResumingReader, error) {
	if opts.MaxResumes <= 0 {
		opts.MaxResumes = DefaultMaxResumes
	}
	if opts.WaitMin <= 0 {
		opts.WaitMin = DefaultResumeWaitMin
	}
	if opts.WaitMax <= 0 {
		opts.WaitMax = DefaultResumeWaitMax
	}
	r := &ResumingReader{what: what, ctx: ctx, open: open, opts: opts}
	resp, err := r.start(0)
	if err != nil {
		return nil, err
	}
	r.size, r.pinned, r.digest = resp.Size, resp.Pinned, resp.Digest
	return r, nil
}

// Size is the object's size from the first answer, -1 if unknown.
func (r *ResumingReader) Size() int64 { return r.size }

// start sends one request under the body's own context, so that the
// idle timer and Close can abort it.
func (r *ResumingReader) start(off int64) (Response, error) {
	ctx, cancel := context.WithCancel(r.ctx)
	resp, err := r.open(ctx, off)
	if err != nil {
		cancel()
		return Response{}, err
	}
	r.body, r.cancel = resp.Body, cancel
	r.stalled.Store(false)
	if r.opts.IdleTimeout > 0 {
		// The timer runs only while a Read waits on the network, so a
		// slow consumer is not mistaken for a stalled server.
		r.idle = time.AfterFunc(time.Hour, func() { r.stalled.Store(true); cancel() })
		r.idle.Stop()
	}
	return resp, nil
}

func (r *ResumingReader) stop() {
	if r.body != nil {
		if r.idle != nil {
			r.idle.Stop()
		}
		r.body.Close()
		r.cancel()
		r.body = nil
	}
}

// Close ends the download; a later Read fails.
func (r *ResumingReader) Close() error {
	r.stop()
	if r.err == nil {
		r.err = errors.New(r.what + ": read after close")
	}
	return nil
}

func (r *ResumingReader) Read(p []byte) (int, error) {
	for {
		if r.err != nil {
			return 0, r.err
		}
		err := r.pending
		r.pending = nil
		if err == nil {
			var n int
			if r.idle != nil {
				r.idle.Reset(r.opts.IdleTimeout)
			}
			n, err = r.body.Read(p)
			if r.idle != nil {
				r.idle.Stop()
			}
			if r.digest != nil {
				r.digest.Hash.Write(p[:n])
			}
			r.off += int64(n)
			if err != nil && r.stalled.Load() {
				err = fmt.Errorf("no data for %v: %w", r.opts.IdleTimeout, err)
			}
			if r.size >= 0 && r.off > r.size {
				r.stop()
				r.err = fmt.Errorf("%s: more than the %d bytes announced", r.what, r.size)
				return 0, r.err
			}
			if r.size >= 0 && r.off == r.size && err != nil {
				// Every byte arrived. An idle timer that fired after
				// the last one does not matter; any other error does:
				// the S3 SDK and the GCS client check their checksum
				// of the transfer as the body ends, and say so here.
				if err == io.EOF || r.stalled.Load() {
					if derr := r.checkDigest(); derr != nil {
						r.stop()
						r.err = derr
						return n, derr
					}
					r.err = io.EOF
					return n, io.EOF
				}
				r.stop()
				r.err = fmt.Errorf("%s: %w", r.what, err)
				return n, r.err
			}
			if err == io.EOF && r.size < 0 {
				r.err = io.EOF
				return n, io.EOF
			}
			if err == nil {
				return n, nil
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			if n > 0 {
				r.pending = err
				return n, nil
			}
		}
		if rerr := r.resume(err); rerr != nil {
			r.stop()
			r.err = rerr
			return 0, rerr
		}
	}
}

// checkDigest compares a resumed read's bytes with the store's checksum
// of the object. A read in one answer is left to the store's client,
// which checks the answer's own checksum where it carries one.
func (r *ResumingReader) checkDigest() error {
	if r.digest == nil || r.resumes == 0 {
		return nil
	}
	if got := r.digest.Hash.Sum(nil); !bytes.Equal(got, r.digest.Want) {
		return fmt.Errorf("%s: read in %d answers, the bytes have %s %x where the store's checksum of the object is %x: damaged in transfer",
			r.what, r.resumes+1, r.digest.Name, got, r.digest.Want)
	}
	return nil
}

// resume asks for the rest of the object after the read error cause.
func (r *ResumingReader) resume(cause error) error {
	failed := fmt.Errorf("%s: body cut off after %d of %d bytes: %w", r.what, r.off, r.size, cause)
	if r.ctx.Err() != nil {
		return fmt.Errorf("%s: %w", r.what, r.ctx.Err())
	}
	if r.size < 0 || !r.pinned || r.resumes >= r.opts.MaxResumes {
		return failed
	}
	r.stop()
	r.resumes++
	if r.opts.OnResume != nil {
		r.opts.OnResume(r.off, r.resumes, cause)
	}
	t := time.NewTimer(Backoff(r.opts.WaitMin, r.opts.WaitMax, r.resumes-1))
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return fmt.Errorf("%s: %w", r.what, r.ctx.Err())
	case <-t.C:
	}
	if _, err := r.start(r.off); err != nil {
		return fmt.Errorf("%w; resuming: %w", failed, err)
	}
	return nil
}

// Backoff is the wait before retry number attempt (from 0): lo doubled
// attempt times, at most hi, with "equal jitter" (a random wait in [d/2,
// d]) so that many clients that failed together do not retry together.
func Backoff(lo, hi time.Duration, attempt int) time.Duration {
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}
