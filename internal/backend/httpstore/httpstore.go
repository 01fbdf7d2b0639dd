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
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
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
	// AllowRedirects names the hosts, besides the source's own origin,
	// that a redirect may lead to (--http-allow-redirect): "cdn.example.com"
	// on any port, or "cdn.example.com:8443" on that port only. A redirect
	// anywhere else, or from https to http, is refused.
	AllowRedirects []string
	// RootCAs are the certificates an https:// server's chain must end
	// in; nil means the system's roots.
	RootCAs *x509.CertPool
	// AllowInsecureAuth lets Headers and a password in the address go to
	// an http:// host other than loopback, in clear text
	// (--http-allow-insecure-auth). Without it such an address is refused.
	AllowInsecureAuth bool
}

// MaxRedirects bounds the redirects followed for one request.
const MaxRedirects = 10

// allowedHost is one entry of Options.AllowRedirects.
type allowedHost struct {
	host string // lower case, without brackets
	port string // "" for any port
}

// CheckAllowRedirect checks an entry of Options.AllowRedirects.
func CheckAllowRedirect(entry string) error {
	_, err := parseAllowedHost(entry)
	return err
}

func parseAllowedHost(entry string) (allowedHost, error) {
	bad := fmt.Errorf("redirect host %q: not a HOST or HOST:PORT", entry)
	e := asciiLower(strings.TrimSpace(entry))
	if e == "" || strings.ContainsAny(e, "/?#@ \t") {
		return allowedHost{}, bad
	}
	if strings.Count(e, ":") > 1 && !strings.HasPrefix(e, "[") {
		return allowedHost{host: e}, nil // a bare IPv6 address
	}
	if !strings.Contains(strings.TrimSuffix(e, "]"), "]:") && !(strings.Count(e, ":") == 1 && !strings.HasPrefix(e, "[")) {
		return allowedHost{host: strings.Trim(e, "[]")}, nil
	}
	h, p, err := net.SplitHostPort(e)
	if err != nil || h == "" {
		return allowedHost{}, bad
	}
	if _, err := strconv.ParseUint(p, 10, 16); err != nil {
		return allowedHost{}, bad
	}
	return allowedHost{host: h, port: p}, nil
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
	allowed  []allowedHost
	requests atomic.Int64
	retries  atomic.Int64
}

// Open returns the store under base (http:// or https://). It does not
// touch the network.
func Open(ctx context.Context, base *url.URL, opts Options) (*Store, error) {
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("%s: not an http:// or https:// address", shown(base))
	}
	b := *base
	b.Fragment, b.RawFragment = "", ""
	if !strings.HasSuffix(b.Path, "/") {
		b.Path += "/"
		if b.RawPath != "" {
			b.RawPath += "/"
		}
	}
	header, err := ParseHeaders(opts.Headers)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", shown(&b), err)
	}
	if b.Scheme == "http" && (len(header) > 0 || b.User != nil) && !isLoopback(b.Hostname()) && !opts.AllowInsecureAuth {
		return nil, fmt.Errorf("%s: credentials (an HTTP header or a password) would cross the network in clear text over http://; use https://, or --http-allow-insecure-auth (config: http_allow_insecure_auth) to send them anyway", shown(&b))
	}
	var allowed []allowedHost
	for _, entry := range opts.AllowRedirects {
		a, err := parseAllowedHost(entry)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", shown(&b), err)
		}
		allowed = append(allowed, a)
	}
	s := &Store{
		allowed:  allowed,
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
	s.log = s.log.With(zap.String("store", shown(&b)))
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
	if opts.RootCAs != nil {
		transport.TLSClientConfig = &tls.Config{RootCAs: opts.RootCAs}
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

// checkRedirect follows a redirect only within the source's origin
// (scheme, host and port), or to a host the operator allowed, and never
// from https to http: an upstream must not aim the mirror at other servers
// (cloud metadata, localhost services, private ranges). It runs before the
// redirected request is sent, so a refused target gets no request at all.
// It also keeps the operator's --http-header values (an API key, a bearer
// token) from following a redirect to another origin: net/http drops only
// Authorization and Cookie by itself.
func (s *Store) checkRedirect(req *http.Request, via []*http.Request) error {
	from := via[len(via)-1].URL
	refuse := func(reason string) error {
		return &RedirectError{From: shown(from), To: shown(req.URL), Reason: reason, first: len(via) == 1}
	}
	if len(via) >= MaxRedirects {
		return refuse(fmt.Sprintf("more than %d redirects", MaxRedirects))
	}
	for _, hop := range append(via, req) {
		if hop.URL.Scheme == "https" && req.URL.Scheme != "https" {
			return refuse("a downgrade from https to " + req.URL.Scheme)
		}
	}
	if sameOrigin(req.URL, s.base) {
		return nil
	}
	if !s.allowedTarget(req.URL) {
		return refuse(fmt.Sprintf("%s is not the source's origin; allow its host with --http-allow-redirect %s", origin(req.URL), req.URL.Hostname()))
	}
	for k := range s.header {
		req.Header.Del(k)
	}
	return nil
}

// RedirectError is a redirect refused by the store's policy. It is
// permanent (backend.IsPermanent): the upstream said where the file is,
// and that place is not allowed.
type RedirectError struct {
	From, To, Reason string // addresses without passwords
	first            bool   // From is the address first asked for
}

func (e *RedirectError) Error() string {
	if e.first {
		return "redirect to " + e.To + " refused: " + e.Reason
	}
	return "redirect from " + e.From + " to " + e.To + " refused: " + e.Reason
}

// Permanent marks the error for backend.IsPermanent.
func (e *RedirectError) Permanent() bool { return true }

func (s *Store) allowedTarget(u *url.URL) bool {
	if u.Scheme != "http" && u.Scheme != "https" {
		return false
	}
	host := asciiLower(u.Hostname())
	for _, a := range s.allowed {
		if a.host == host && (a.port == "" || a.port == port(u)) {
			return true
		}
	}
	return false
}

// sameOrigin compares scheme, host and port, the port defaulting by scheme.
// Case is folded for ASCII letters only: Unicode folding would take the
// Kelvin sign for a k and a long s for an s (found by FuzzCheckRedirect).
func sameOrigin(a, b *url.URL) bool {
	return asciiLower(a.Scheme) == asciiLower(b.Scheme) && asciiLower(a.Hostname()) == asciiLower(b.Hostname()) && port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// shown is u as messages and logs may show it (redact.URL): no password,
// no token in the query.
func shown(u *url.URL) string { return redact.URL(u.String()) }

func origin(u *url.URL) string { return u.Scheme + "://" + u.Host }

// isLoopback: a credential sent to this host never leaves the machine.
func isLoopback(host string) bool {
	if asciiLower(host) == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Location is the base URL, without a password.
func (s *Store) Location() string { return shown(s.base) }

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
	if rerr := (*RedirectError)(nil); errors.As(err, &rerr) {
		return false, nil // the same answer would come again
	}
	retry, cerr := retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	if f, ok := ctx.Value(failureKey{}).(*failure); ok && retry {
		if err != nil {
			f.reason = redact.Text(err.Error())
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
	s.log.Warn("http: retrying request", zap.String("method", req.Method), zap.String("url", shown(req.URL)),
		zap.Int("retry", attempt), zap.Int("max", s.retryMax), zap.String("after", reason))
}

// backoff doubles from min up to max, honouring a server's Retry-After
// (within max), with "equal jitter": a random wait in [d/2, d], so that
// many clients that failed together do not retry together.
func (s *Store) backoff(lo, hi time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), hi); ok {
			return d
		}
	}
	return backend.Backoff(lo, hi, attempt)
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
		return nil, redact.Error(fmt.Errorf("%s %s: %w", method, shown(u), err))
	}
	for k, v := range s.header {
		req.Header[k] = v
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	resp, err := s.client.Do(req)
	if rerr := (*RedirectError)(nil); errors.As(err, &rerr) {
		// Said plainly: the wrapping by net/http and the retrier
		// repeats the address and counts one try.
		return nil, fmt.Errorf("%s %s: %w", method, shown(u), rerr)
	}
	if err != nil {
		// net/http's url.Error quotes the URL, query and all.
		return nil, redact.Error(fmt.Errorf("%s %s: %w", method, shown(u), err))
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %s: %w", method, shown(u), resp.Status, backend.ErrNotExist)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		resp.Body.Close()
		return nil, &StatusError{Method: method, URL: shown(u), Status: resp.Status, Code: resp.StatusCode}
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
// length; the size is -1 when neither says it.
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
	// A server that streams without Content-Length (chunked) gives no
	// size: -1 says so, and the object is read to its end.
	return backend.FileInfo{Name: name, Size: max(resp.ContentLength, -1)}, nil
}

// List is not possible over HTTP.
func (s *Store) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	return fmt.Errorf("%s: list: %w", s.Location(), backend.ErrNotSupported)
}

// Open starts a GET and streams its body through a
// backend.ResumingReader: a body cut off mid-stream is resumed with a
// Range request pinned to the same object (If-Range a strong ETag or
// Last-Modified), and a body without a Content-Length (chunked) is read
// to its end, not resumed.
func (s *Store) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	u, err := s.URL(name)
	if err != nil {
		return nil, err
	}
	var validator string
	var size int64
	open := func(ctx context.Context, off int64) (backend.Response, error) {
		if off == 0 {
			resp, err := s.do(ctx, http.MethodGet, u, nil)
			if err != nil {
				return backend.Response{}, err
			}
			if resp.StatusCode == http.StatusPartialContent {
				resp.Body.Close()
				return backend.Response{}, fmt.Errorf("GET %s: unasked-for partial content", shown(u))
			}
			// A strong validator lets a cut-off body be resumed from the
			// same object: If-Range makes the server send all of a
			// changed one instead, which is refused below.
			validator = validatorOf(resp.Header.Get("ETag"), resp.Header.Get("Last-Modified"))
			size = resp.ContentLength
			return backend.Response{Body: resp.Body, Size: size, Pinned: validator != ""}, nil
		}
		s.retries.Add(1)
		h := http.Header{}
		h.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-")
		h.Set("If-Range", validator)
		resp, err := s.do(ctx, http.MethodGet, u, h)
		if err != nil {
			return backend.Response{}, err
		}
		if err := checkResumed(resp.StatusCode, resp.Header.Get("Content-Range"), off, size); err != nil {
			resp.Body.Close()
			return backend.Response{}, err
		}
		return backend.Response{Body: resp.Body}, nil
	}
	rr, err := backend.OpenResuming(ctx, "GET "+shown(u), open, backend.ResumeOptions{
		MaxResumes: s.retryMax, WaitMin: s.waitMin, WaitMax: s.waitMax, IdleTimeout: s.idle,
		OnResume: func(off int64, resume int, cause error) {
			s.log.Warn("http: resuming cut-off body", zap.String("url", shown(u)), zap.Int64("offset", off),
				zap.Int64("size", size), zap.Int("retry", resume), zap.Error(cause))
		},
	})
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return rr, nil
}

var _ backend.Reader = (*Store)(nil)
