// Package location turns an address (a local path, file://, s3://, gs://,
// http:// or https://) into the store that serves it, as restic's
// location does: the one place that knows every protocol, so that the
// engine depends on the store interface only.
package location

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/gcs"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/httpstore"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
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
	// CAFile is a PEM bundle of certificates trusted besides the system's
	// roots, for HTTPS sources and S3/GCS endpoints alike (--ca-file).
	CAFile string
	// HTTPAllowInsecureAuth lets a header or a password go to an http://
	// address other than loopback (httpstore.Options.AllowInsecureAuth).
	HTTPAllowInsecureAuth bool
	Logger                *zap.Logger
}

// Open returns a store to read the repository at addr: a local folder
// that exists, file://, s3://, gs://, http:// or https://. The returned
// close function releases it.
func Open(ctx context.Context, addr string, opts Options) (backend.Reader, func() error, error) {
	r, closeR, err := open(ctx, addr, opts, false)
	return r, closeR, redact.Error(err)
}

// OpenWritable returns a store to write a mirror at addr: a local folder
// (made if absent), file://, s3:// or gs://. HTTP(S) is read-only and
// refused.
func OpenWritable(ctx context.Context, addr string, opts Options) (backend.Backend, func() error, error) {
	st, closeSt, err := open(ctx, addr, opts, true)
	if err != nil {
		return nil, nil, redact.Error(err)
	}
	return st.(backend.Backend), closeSt, nil
}

// open is Open and OpenWritable: the one switch over the protocols. A
// writable store is a Backend, and its local folder is made if absent.
func open(ctx context.Context, addr string, opts Options, writable bool) (backend.Reader, func() error, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	knownSecrets(addr, opts)
	scheme, rest := Scheme(addr)
	switch scheme {
	case "file":
		openLocal := local.Open
		if writable {
			openLocal = local.Create
		}
		l, err := openLocal(rest)
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	case "s3", "gs":
		return openObjectStore(ctx, addr, opts)
	case "http", "https":
		if writable {
			return nil, nil, fmt.Errorf("%s: HTTP(S) can only be a source", redact.URL(addr))
		}
		return openHTTP(ctx, scheme, addr, opts)
	}
	return nil, nil, fmt.Errorf("%s: unsupported address scheme %q", redact.URL(addr), scheme)
}

// openHTTP opens an http:// or https:// source.
func openHTTP(ctx context.Context, scheme, addr string, opts Options) (backend.Reader, func() error, error) {
	u, err := parseURL(addr)
	if err != nil {
		return nil, nil, err
	}
	roots, err := CertPool(opts.CAFile)
	if err != nil {
		return nil, nil, err
	}
	st, err := httpstore.Open(ctx, u, httpstore.Options{Headers: opts.HTTPHeaders, AllowRedirects: opts.HTTPAllowRedirects,
		Logger: opts.Logger, RetryMax: opts.Retries, RootCAs: roots, AllowInsecureAuth: opts.HTTPAllowInsecureAuth})
	if err != nil {
		return nil, nil, err
	}
	return st, st.Close, nil
}

// OpenReadOnly returns the mirror at addr for a run that must write
// nothing at all (a dry run): the store behind backend.ReadOnly, so that a
// write is an error, and a local folder that does not exist yet as an
// empty store, left unmade. Nothing is created on opening either: no
// folder, no .fdl-mirror/tmp.
func OpenReadOnly(ctx context.Context, addr string, opts Options) (backend.Backend, func() error, error) {
	scheme, rest := Scheme(addr)
	switch scheme {
	case "http", "https":
		return nil, nil, fmt.Errorf("%s: HTTP(S) can only be a source", redact.URL(addr))
	case "file":
		l, err := local.Open(rest)
		if errors.Is(err, fs.ErrNotExist) {
			return backend.ReadOnly(backend.Empty(rest)), func() error { return nil }, nil
		}
		if err != nil {
			return nil, nil, err
		}
		return backend.ReadOnly(l), l.Close, nil
	}
	r, closeR, err := Open(ctx, addr, opts)
	if err != nil {
		return nil, nil, err
	}
	return backend.ReadOnly(r), closeR, nil
}

// openObjectStore opens an s3:// or gs:// address, for reading or writing.
func openObjectStore(ctx context.Context, addr string, opts Options) (backend.Backend, func() error, error) {
	u, err := parseURL(addr)
	if err != nil {
		return nil, nil, err
	}
	roots, err := CertPool(opts.CAFile)
	if err != nil {
		return nil, nil, err
	}
	switch u.Scheme {
	case "s3":
		st, err := s3.Open(ctx, u, s3.Options{Logger: opts.Logger, MaxAttempts: attempts(opts.Retries), RootCAs: roots})
		if err != nil {
			return nil, nil, err
		}
		return st, func() error { return nil }, nil
	case "gs":
		st, err := gcs.Open(ctx, u, gcs.Options{Logger: opts.Logger, MaxAttempts: attempts(opts.Retries), RootCAs: roots})
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	}
	return nil, nil, fmt.Errorf("%s: not an object store address", redact.URL(addr))
}

// parseURL parses an address, with an error that shows none of it but
// what redact.URL shows: url.Error quotes the whole address, and the
// parser's own message can quote a piece of a password (a / in one makes
// the rest a port: invalid port ":s3cr").
func parseURL(addr string) (*url.URL, error) {
	u, err := url.Parse(addr)
	if err == nil {
		return u, nil
	}
	why := "a / ? # @ or : in a user name or password must be percent-encoded"
	var uerr *url.Error
	if errors.As(err, &uerr) {
		var eerr url.EscapeError
		if errors.As(uerr.Err, &eerr) {
			why = "a % must start an escape such as %2F"
		}
	}
	return nil, fmt.Errorf("%s: not a valid URL (%s)", redact.URL(addr), why)
}

// knownSecrets registers the credentials of an address and its headers
// with redact, so that no output shows them, even where an upstream echoes
// one back in a message.
func knownSecrets(addr string, opts Options) {
	redact.AddressSecrets(addr)
	redact.HeaderSecrets(opts.HTTPHeaders)
}

// CertPool is the system's roots plus the certificates of file; nil (the
// system's roots) when there is no file.
func CertPool(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// attempts turns a retry count into the tries a backend makes (0: its default).
func attempts(retries int) int {
	if retries <= 0 {
		return 0
	}
	return retries + 1
}

// Clean is addr in the form two runs compare to tell whether they read
// the same source: a local path made absolute and cleaned (file:// and a
// plain path alike); a URL without its credentials, query and fragment,
// its scheme and host lower-cased, its path without a trailing slash. It
// never holds a credential, so it may be written into a mirror.
func Clean(addr string) string {
	scheme, rest := Scheme(addr)
	if scheme == "file" {
		if abs, err := filepath.Abs(rest); err == nil {
			return abs
		}
		return filepath.Clean(rest)
	}
	u, err := url.Parse(addr)
	if err != nil {
		// Unparseable: keep only what cannot be a credential.
		return scheme + "://"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	u.Path, u.RawPath = strings.TrimRight(u.Path, "/"), ""
	return u.String()
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
