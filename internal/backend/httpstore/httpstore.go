// Package httpstore is the read-only backend for a repository served over
// http:// or https://, through go-retryablehttp.
//
// HTTP cannot list: the engine reads refs.json and the version files by
// their known names, and data files by the names their catalogs give. Every
// request is retried with jittered exponential backoff on connection errors,
// timeouts, 429 and 5xx, a bounded number of times, and each retry is
// logged. A body cut off mid-stream is resumed with a Range request pinned
// to the same object (If-Range), and a body that still ends short of its
// Content-Length is an error from Read, never a silently short file.
package httpstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	retryablehttp "github.com/hashicorp/go-retryablehttp"
	"go.uber.org/zap"
)

// Defaults for the zero values of Options.
const (
	DefaultRetryMax        = 8
	DefaultRetryWaitMin    = 250 * time.Millisecond
	DefaultRetryWaitMax    = 15 * time.Second
	DefaultHeaderTimeout   = 30 * time.Second
	DefaultReadIdleTimeout = 60 * time.Second
)

// Options carry what the address does not.
type Options struct {
	// Headers are sent with every request, each "Name: value" (from
	// --http-header): a token for a private host. Their values never
	// appear in errors or logs.
	Headers []string
	// Logger receives one warning per retry. Nil logs nothing.
	Logger *zap.Logger

	// RetryMax is the number of retries after the first try of a request,
	// and of resumptions of one body.
	RetryMax int
	// RetryWaitMin and RetryWaitMax bound the wait between tries; the wait
	// doubles from the minimum and is jittered.
	RetryWaitMin, RetryWaitMax time.Duration
	// HeaderTimeout bounds the wait for a response's headers. There is no
	// timeout on a whole request: a large body may take as long as it
	// takes, as long as it keeps moving.
	HeaderTimeout time.Duration
	// ReadIdleTimeout aborts (and then resumes) a body that delivers no
	// byte for this long.
	ReadIdleTimeout time.Duration
}

// Store is a base URL read as a store.
type Store struct {
	base     *url.URL // path ends in "/"
	header   http.Header
	client   *retryablehttp.Client
	log      *zap.Logger
	idle     time.Duration
	retryMax int
	waitMin  time.Duration
	waitMax  time.Duration
	requests atomic.Int64
	retries  atomic.Int64
}

// Open returns the store under base (http:// or https://). It does not
// touch the network.
func Open(ctx context.Context, base *url.URL, opts Options) (*Store, error) {
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("%s: not an http:// or https:// address", base.Redacted())
	}
	b := *base
	b.Fragment, b.RawFragment = "", ""
	if !strings.HasSuffix(b.Path, "/") {
		b.Path += "/"
		if b.RawPath != "" {
			b.RawPath += "/"
		}
	}
	header := http.Header{}
	for i, h := range opts.Headers {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") || strings.ContainsAny(value, "\r\n") {
			// A malformed header may be all secret ("Bearer xyz" without
			// a name): say which one, not what it holds.
			return nil, fmt.Errorf("%s: HTTP header #%d is not \"Name: value\"", b.Redacted(), i+1)
		}
		header.Add(name, strings.TrimSpace(value))
	}
	s := &Store{
		base:     &b,
		header:   header,
		log:      opts.Logger,
		idle:     opts.ReadIdleTimeout,
		retryMax: opts.RetryMax,
		waitMin:  opts.RetryWaitMin,
		waitMax:  opts.RetryWaitMax,
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.With(zap.String("store", b.Redacted()))
	if s.idle <= 0 {
		s.idle = DefaultReadIdleTimeout
	}
	if s.retryMax <= 0 {
		s.retryMax = DefaultRetryMax
	}
	if s.waitMin <= 0 {
		s.waitMin = DefaultRetryWaitMin
	}
	if s.waitMax <= 0 {
		s.waitMax = DefaultRetryWaitMax
	}
	headerTimeout := opts.HeaderTimeout
	if headerTimeout <= 0 {
		headerTimeout = DefaultHeaderTimeout
	}
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		ExpectContinueTimeout: time.Second,
		// Files are mirrored byte for byte: no transparent gunzip, and
		// Content-Length stays the length of what is stored.
		DisableCompression: true,
	}
	s.client = &retryablehttp.Client{
		HTTPClient:     &http.Client{Transport: transport, CheckRedirect: s.checkRedirect},
		RetryMax:       s.retryMax,
		RetryWaitMin:   s.waitMin,
		RetryWaitMax:   s.waitMax,
		CheckRetry:     checkRetry,
		Backoff:        s.backoff,
		RequestLogHook: s.logRetry,
		ErrorHandler:   giveUp,
		// Logger stays nil: its messages are per request, and the URL it
		// prints could carry user:password. logRetry logs what matters.
	}
	return s, nil
}

// checkRedirect keeps the operator's --http-header values (an API key, a
// bearer token) from following a redirect to another host: net/http drops
// only Authorization and Cookie by itself.
func (s *Store) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Host != s.base.Host || req.URL.Scheme != s.base.Scheme {
		for k := range s.header {
			req.Header.Del(k)
		}
	}
	return nil
}

// Location is the base URL, without a password.
func (s *Store) Location() string { return s.base.Redacted() }

// Properties: HTTP can neither list nor write.
func (s *Store) Properties() backend.Properties { return backend.Properties{} }

// Requests is the number of HTTP requests sent, retries included.
func (s *Store) Requests() int64 { return s.requests.Load() }

// Retries is the number of requests that were retries of a failed one,
// including the Range requests that resume a cut-off body.
func (s *Store) Retries() int64 { return s.retries.Load() }

// Close releases idle connections.
func (s *Store) Close() error {
	s.client.HTTPClient.CloseIdleConnections()
	return nil
}

// URL is the address of name under the base, each segment path-escaped.
func (s *Store) URL(name string) (*url.URL, error) {
	if err := backend.CheckName(name); err != nil {
		return nil, err
	}
	segs := strings.Split(name, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	u := *s.base
	u.Path = s.base.Path + name
	u.RawPath = s.base.EscapedPath() + strings.Join(segs, "/")
	return &u, nil
}

// failure carries, from checkRetry to logRetry, why the last try failed.
type failure struct{ reason string }

type failureKey struct{}

func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	retry, cerr := retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	if f, ok := ctx.Value(failureKey{}).(*failure); ok && retry {
		if err != nil {
			f.reason = err.Error()
		} else {
			f.reason = resp.Status
		}
	}
	return retry, cerr
}

func (s *Store) logRetry(_ retryablehttp.Logger, req *http.Request, attempt int) {
	s.requests.Add(1)
	if attempt == 0 {
		return
	}
	s.retries.Add(1)
	reason := ""
	if f, ok := req.Context().Value(failureKey{}).(*failure); ok {
		reason = f.reason
	}
	s.log.Warn("http: retrying request", zap.String("method", req.Method), zap.String("url", req.URL.Redacted()),
		zap.Int("retry", attempt), zap.Int("max", s.retryMax), zap.String("after", reason))
}

// backoff doubles from min up to max, honouring a server's Retry-After
// (within max), with "equal jitter": a random wait in [d/2, d], so that
// many clients that failed together do not retry together.
func (s *Store) backoff(lo, hi time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
			return min(time.Duration(secs)*time.Second, hi)
		}
	}
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}

// giveUp hands back the last response after the retries ran out, so that
// the caller reports its status; or the last error.
func giveUp(resp *http.Response, err error, tries int) (*http.Response, error) {
	if err == nil && resp != nil {
		return resp, nil
	}
	if resp != nil {
		resp.Body.Close()
	}
	return nil, fmt.Errorf("giving up after %d tries: %w", tries, err)
}

// do sends one request, with retries, and checks its status: absent is
// ErrNotExist, anything but 2xx an error naming the URL and status.
func (s *Store) do(ctx context.Context, method string, u *url.URL, extra http.Header) (*http.Response, error) {
	ctx = context.WithValue(ctx, failureKey{}, &failure{})
	req, err := retryablehttp.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	for k, v := range s.header {
		req.Header[k] = v
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %s: %w", method, u.Redacted(), resp.Status, backend.ErrNotExist)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		resp.Body.Close()
		return nil, &StatusError{Method: method, URL: u.Redacted(), Status: resp.Status, Code: resp.StatusCode}
	}
	return resp, nil
}

// StatusError is an unexpected HTTP status.
type StatusError struct {
	Method, URL, Status string
	Code                int
}

func (e *StatusError) Error() string { return e.Method + " " + e.URL + ": " + e.Status }

// Stat asks HEAD for the size, or GET when HEAD is refused or says no
// length.
func (s *Store) Stat(ctx context.Context, name string) (backend.FileInfo, error) {
	u, err := s.URL(name)
	if err != nil {
		return backend.FileInfo{}, err
	}
	resp, err := s.do(ctx, http.MethodHead, u, nil)
	var serr *StatusError
	if errors.As(err, &serr) && (serr.Code == http.StatusMethodNotAllowed || serr.Code == http.StatusNotImplemented) {
		resp, err = nil, nil
	}
	if err != nil {
		return backend.FileInfo{}, err
	}
	if resp != nil {
		resp.Body.Close()
		if resp.ContentLength >= 0 {
			return backend.FileInfo{Name: name, Size: resp.ContentLength}, nil
		}
	}
	resp, err = s.do(ctx, http.MethodGet, u, nil)
	if err != nil {
		return backend.FileInfo{}, err
	}
	// Closing early costs the connection, not the transfer.
	resp.Body.Close()
	if resp.ContentLength < 0 {
		return backend.FileInfo{}, fmt.Errorf("GET %s: the server does not say the size", u.Redacted())
	}
	return backend.FileInfo{Name: name, Size: resp.ContentLength}, nil
}

// List is not possible over HTTP.
func (s *Store) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	return fmt.Errorf("%s: list: %w", s.Location(), backend.ErrNotSupported)
}

// Open starts a GET and streams its body.
func (s *Store) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	u, err := s.URL(name)
	if err != nil {
		return nil, err
	}
	b := &body{s: s, ctx: ctx, u: u, size: -1}
	if err := b.get(nil); err != nil {
		return nil, err
	}
	b.size = b.resp.ContentLength
	if b.resp.StatusCode == http.StatusPartialContent {
		b.close()
		return nil, fmt.Errorf("GET %s: unasked-for partial content", u.Redacted())
	}
	// A strong validator lets a cut-off body be resumed from the same
	// object: If-Range makes the server send all of a changed one instead.
	if et := b.resp.Header.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
		b.validator = et
	} else {
		b.validator = b.resp.Header.Get("Last-Modified")
	}
	return b, nil
}

// body is a GET's body that resumes where it was cut off, and fails
// rather than end short.
type body struct {
	s         *Store
	ctx       context.Context
	u         *url.URL
	resp      *http.Response
	cancel    context.CancelFunc
	idle      *time.Timer
	size      int64 // -1: unknown
	off       int64
	validator string
	resumes   int
	pending   error // met after bytes that were returned first
	stalled   atomic.Bool
	err       error // sticky
}

// get sends the GET for this body (with extra headers when resuming),
// under its own context so that the idle timer can abort it.
func (b *body) get(extra http.Header) error {
	ctx, cancel := context.WithCancel(b.ctx)
	resp, err := b.s.do(ctx, http.MethodGet, b.u, extra)
	if err != nil {
		cancel()
		return err
	}
	b.resp, b.cancel = resp, cancel
	// The timer runs only while a Read waits on the network, so a slow
	// consumer is not mistaken for a stalled server.
	b.stalled.Store(false)
	b.idle = time.AfterFunc(time.Hour, func() { b.stalled.Store(true); cancel() })
	b.idle.Stop()
	return nil
}

func (b *body) close() {
	if b.resp != nil {
		b.idle.Stop()
		b.resp.Body.Close()
		b.cancel()
		b.resp = nil
	}
}

func (b *body) Close() error {
	b.close()
	if b.err == nil {
		b.err = errors.New("read after close")
	}
	return nil
}

func (b *body) Read(p []byte) (int, error) {
	for {
		if b.err != nil {
			return 0, b.err
		}
		err := b.pending
		b.pending = nil
		if err == nil {
			var n int
			b.idle.Reset(b.s.idle)
			n, err = b.resp.Body.Read(p)
			b.idle.Stop()
			b.off += int64(n)
			if err != nil && b.stalled.Load() {
				err = fmt.Errorf("no data for %v: %w", b.s.idle, err)
			}
			if b.size >= 0 && b.off > b.size {
				b.err = fmt.Errorf("GET %s: more than the %d bytes announced", b.u.Redacted(), b.size)
				return 0, b.err
			}
			if err == io.EOF && (b.size < 0 || b.off == b.size) {
				b.err = io.EOF
				return n, io.EOF
			}
			if err == nil {
				return n, nil
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			if n > 0 {
				b.pending = err
				return n, nil
			}
		}
		if rerr := b.resume(err); rerr != nil {
			b.close()
			b.err = rerr
			return 0, rerr
		}
	}
}

// resume asks for the rest of the object after the read error cause.
func (b *body) resume(cause error) error {
	failed := fmt.Errorf("GET %s: body cut off after %d of %d bytes: %w", b.u.Redacted(), b.off, b.size, cause)
	if b.ctx.Err() != nil {
		return fmt.Errorf("GET %s: %w", b.u.Redacted(), b.ctx.Err())
	}
	if b.size < 0 || b.validator == "" || b.resumes >= b.s.retryMax {
		return failed
	}
	b.close()
	b.resumes++
	wait := b.s.backoff(b.s.waitMin, b.s.waitMax, b.resumes-1, nil)
	b.s.log.Warn("http: resuming cut-off body", zap.String("url", b.u.Redacted()), zap.Int64("offset", b.off),
		zap.Int64("size", b.size), zap.Int("retry", b.resumes), zap.Error(cause))
	select {
	case <-b.ctx.Done():
		return fmt.Errorf("GET %s: %w", b.u.Redacted(), b.ctx.Err())
	case <-time.After(wait):
	}
	b.s.retries.Add(1)
	h := http.Header{}
	h.Set("Range", "bytes="+strconv.FormatInt(b.off, 10)+"-")
	h.Set("If-Range", b.validator)
	if err := b.get(h); err != nil {
		return fmt.Errorf("%w; resuming: %w", failed, err)
	}
	want := fmt.Sprintf("bytes %d-%d/%d", b.off, b.size-1, b.size)
	if b.resp.StatusCode != http.StatusPartialContent || b.resp.Header.Get("Content-Range") != want {
		// The object changed under us, or the server ignores ranges.
		return fmt.Errorf("%w; resuming: got %s, Content-Range %q", failed, b.resp.Status, b.resp.Header.Get("Content-Range"))
	}
	return nil
}

var _ backend.Reader = (*Store)(nil)
