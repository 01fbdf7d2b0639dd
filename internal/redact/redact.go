// Package redact is the one place that decides what of an address, an
// error or a log line may be shown: every command's text and JSON output,
// every log line, the daemon's status page, /status.json and config errors
// pass through it, so that no credential given to fdl-mirror in any form
// comes back out.
//
// An address keeps its scheme, host, path and the store's own address
// options (endpoint, region, use_path_style, anonymous); a password in it,
// a user name standing alone (a token used as one, https://TOKEN@host/),
// the value of every other query parameter and the fragment become
// REDACTED. The query rule covers the credential parameters of signed and
// token URLs, whatever their case (token, sig, signature, X-Amz-Signature,
// X-Amz-Credential, X-Amz-Security-Token, X-Goog-Signature,
// X-Goog-Credential, access_token, key, ...) and any other an operator's
// upstream uses: none is shown unless it is known to be harmless.
//
// It is a package of its own, below every backend, so that the backends,
// location, config and the daemon can all use it without import cycles.
package redact

import (
	"errors"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Mask replaces what is not shown.
const Mask = "REDACTED"

// safeParams are the query parameters shown as they are: they say where the
// data is, not who may read it (the s3:// address options).
var safeParams = map[string]bool{"endpoint": true, "region": true, "use_path_style": true, "anonymous": true, "awssdk": true}

// CredentialParams are query parameters known to carry credentials. Every
// query value but the address options is redacted anyway; this list
// documents the rule and is what tests check against.
var CredentialParams = []string{
	"token", "sig", "signature", "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
	"X-Goog-Signature", "X-Goog-Credential", "access_token", "key", "api_key", "apikey",
	"password", "secret", "auth", "se", "sv", "sp", "Expires", "Policy", "Key-Pair-Id",
}

// URL returns addr fit to be shown: see the package comment. A local path
// (no "://") is returned as it is. It never parses the address strictly, so
// an address url.Parse refuses (a bad escape) is redacted all the same.
func URL(addr string) string {
	scheme, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return addr
	}
	var b strings.Builder
	b.Grow(len(addr))
	b.WriteString(scheme)
	b.WriteString("://")
	end := authorityEnd(addr, rest)
	authority, rest := rest[:end], rest[end:]
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		user, _, hasPassword := strings.Cut(authority[:at], ":")
		if hasPassword {
			b.WriteString(user)
			b.WriteString(":" + Mask + "@")
		} else {
			b.WriteString(Mask + "@")
		}
		authority = authority[at+1:]
	}
	b.WriteString(authority)
	rest, _, _ = strings.Cut(rest, "#") // a fragment can carry a token (#access_token=)
	path, query, hasQuery := strings.Cut(rest, "?")
	b.WriteString(path)
	if hasQuery {
		b.WriteByte('?')
		b.WriteString(redactQuery(query))
	}
	return b.String()
}

// authorityEnd is where the authority of addr ends in rest, addr past its
// "://": at the first / ? or #, as url.Parse reads it. An address that
// does not parse may hold a password with a / in it (user:pa/ss@host):
// then the authority runs to the last @ before any ? or #, so that all of
// such a password is masked, at the cost of a path that holds an @.
func authorityEnd(addr, rest string) int {
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if _, err := url.Parse(addr); err != nil {
		q := strings.IndexAny(rest, "?#")
		if q < 0 {
			q = len(rest)
		}
		if at := strings.LastIndexByte(rest[:q], '@'); at >= end {
			end = at + 1 + strings.IndexAny(rest[at+1:q]+"/", "/")
		}
	}
	return end
}

// redactQuery keeps the order and spelling of a query, masking values.
func redactQuery(query string) string {
	parts := strings.Split(query, "&")
	for i, p := range parts {
		k, v, hasValue := strings.Cut(p, "=")
		if !hasValue {
			continue // a bare key says nothing secret... unless it is one
		}
		key, err := url.QueryUnescape(k)
		if err != nil {
			key = k
		}
		if !safeParams[strings.ToLower(key)] {
			parts[i] = k + "=" + Mask
			continue
		}
		// An endpoint is an address of its own.
		if val, err := url.QueryUnescape(v); err == nil && strings.Contains(val, "://") {
			if r := URL(val); r != val {
				parts[i] = k + "=" + url.QueryEscape(r)
			}
		}
	}
	return strings.Join(parts, "&")
}

// urlInText finds the addresses a message quotes. A match stops at space,
// quotes and angle brackets. It runs over a backslash: in JSON an & is
// \u0026, and the rest of the query must stay in the match to be masked.
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// Text redacts every address a message quotes (see URL), and every secret
// registered with Secret, wherever it appears. The punctuation that ends
// a sentence or an error's prefix ("GET URL: 403") stays out of the
// address.
func Text(s string) string {
	if strings.Contains(s, "://") {
		s = urlInText.ReplaceAllStringFunc(s, func(u string) string {
			// A trailing backslash is JSON's or %q's escape of the quote after.
			trimmed := strings.TrimRight(u, ".,:;)]\\")
			return URL(trimmed) + u[len(trimmed):]
		})
	}
	return scrubSecrets(s)
}

// secrets are values known to be credentials (HTTP header values, URL
// passwords and tokens): Text masks them even outside an address, for
// an upstream that echoes a header back in its status line.
var secrets struct {
	sync.RWMutex
	list []string // longest first, so that no secret is masked half
}

// minSecretLen keeps a short value ("1", "yes") from masking half of
// every message: a credential is never that short.
const minSecretLen = 6

// Secret registers values that must never be shown, and their URL-escaped
// forms: Text masks them wherever they appear. Values shorter than 6
// bytes are not registered.
func Secret(values ...string) {
	secrets.Lock()
	defer secrets.Unlock()
	for _, v := range values {
		for _, form := range []string{v, url.QueryEscape(v), url.PathEscape(v)} {
			if len(form) >= minSecretLen && !slices.Contains(secrets.list, form) {
				secrets.list = append(secrets.list, form)
			}
		}
	}
	slices.SortFunc(secrets.list, func(a, b string) int { return len(b) - len(a) })
}

// AddressSecrets registers the credentials an address carries (see
// Credentials).
func AddressSecrets(addr string) {
	for _, c := range Credentials(addr) {
		Secret(c, unescape(c))
	}
}

// Credentials returns what URL would mask in addr, as written there: its
// password or lone user name, and the values of its query parameters but
// the address options. A fragment is not counted: it never leaves the
// process.
func Credentials(addr string) []string {
	_, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return nil
	}
	var out []string
	end := authorityEnd(addr, rest)
	if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
		user, password, hasPassword := strings.Cut(rest[:at], ":")
		if !hasPassword {
			password = user
		}
		out = append(out, password)
	}
	rest, _, _ = strings.Cut(rest, "#")
	if _, query, ok := strings.Cut(rest, "?"); ok {
		for p := range strings.SplitSeq(query, "&") {
			k, v, hasValue := strings.Cut(p, "=")
			if hasValue && v != "" && !safeParams[strings.ToLower(unescape(k))] {
				out = append(out, v)
			}
		}
	}
	return out
}

func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// HeaderSecrets registers the values of "Name: value" HTTP headers.
func HeaderSecrets(headers []string) {
	for _, h := range headers {
		if _, v, ok := strings.Cut(h, ":"); ok {
			Secret(strings.TrimSpace(v))
		}
	}
}

func scrubSecrets(s string) string {
	secrets.RLock()
	defer secrets.RUnlock()
	for _, v := range secrets.list {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Mask)
		}
	}
	return s
}

// Error returns err with a message fit to be shown (Text); errors.Is and
// errors.As still see everything it wraps. Nil stays nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	var r *redactedError
	if errors.As(err, &r) && r == err {
		return err
	}
	return &redactedError{err: err}
}

type redactedError struct{ err error }

func (e *redactedError) Error() string { return Text(e.err.Error()) }
func (e *redactedError) Unwrap() error { return e.err }

// Writer returns a writer that passes every write through Text: for the
// streams output goes to (stdout, stderr, the log), the last net under
// everything printed. Each write is redacted on its own, so a writer
// should get whole lines or documents, as fmt.Fprintf, json.Encoder and
// zap give it.
func Writer(w io.Writer) io.Writer { return &writer{w: w} }

type writer struct{ w io.Writer }

func (r *writer) Write(p []byte) (int, error) {
	s := Text(string(p))
	if _, err := io.WriteString(r.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
