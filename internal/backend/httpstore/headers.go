package httpstore

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The pure parts of the HTTP store: what it makes of the operator's
// --http-header values and of the headers a server answers with. They are
// fuzzed (headers_test.go): a server is an upstream like any other.

// ParseHeaders reads --http-header values, each "Name: value". The name
// must be an HTTP token and the value free of control characters (a tab
// aside), so that every request can carry them: net/http would otherwise
// refuse each request later, or a CR/LF would add headers of its own. An
// error says which value is wrong by its position, never what it holds,
// since a value may be all secret.
func ParseHeaders(lines []string) (http.Header, error) {
	header := http.Header{}
	for i, h := range lines {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		value = strings.Trim(value, " \t")
		if !ok || !isToken(name) || !isFieldValue(value) {
			return nil, fmt.Errorf("HTTP header #%d is not \"Name: value\" (a name of letters, digits and !#$%%&'*+-.^_`|~, a value without control characters)", i+1)
		}
		if reservedHeaders[http.CanonicalHeaderKey(name)] {
			return nil, fmt.Errorf("HTTP header #%d: %s is the store's own (framing, ranges, encoding), not one to set", i+1, http.CanonicalHeaderKey(name))
		}
		header.Add(name, value)
	}
	return header, nil
}

// reservedHeaders frame a request or shape its answer: set by hand they
// would break the request, the resumption of a cut-off body, or (with
// Accept-Encoding) have the server send other bytes than it stores.
var reservedHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true, "Upgrade": true,
	"Expect": true, "Range": true, "If-Range": true, "Accept-Encoding": true,
}

// isToken: RFC 9110 token, one or more tchar.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// isFieldValue: no control character but tab, as net/http requires of a
// value it sends.
func isFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// retryAfter reads a Retry-After of delay-seconds, capped at max; false
// when there is none or it is not a number of seconds (an HTTP date is
// left to the usual backoff).
func retryAfter(v string, max time.Duration) (time.Duration, bool) {
	secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || secs < 0 {
		return 0, false
	}
	// Compared in seconds: a huge value would overflow a Duration and
	// come out negative, a retry with no wait at all.
	if secs > int64(max/time.Second) {
		return max, true
	}
	return min(time.Duration(secs)*time.Second, max), true
}

// checkResumed accepts the answer to a ranged GET that resumes a body at
// off of size bytes only when it is exactly the rest of the same object.
func checkResumed(status int, contentRange string, off, size int64) error {
	want := fmt.Sprintf("bytes %d-%d/%d", off, size-1, size)
	if status != http.StatusPartialContent || contentRange != want {
		// The object changed under us, or the server ignores ranges.
		return fmt.Errorf("got %d %s, Content-Range %q where %q was due", status, http.StatusText(status), contentRange, want)
	}
	return nil
}

// validatorOf picks what pins a resumed GET to the object first read: a
// strong ETag, else Last-Modified; "" when there is neither.
func validatorOf(etag, lastModified string) string {
	if etag != "" && !strings.HasPrefix(etag, "W/") {
		return etag
	}
	return lastModified
}

// asciiLower folds A-Z only. Host names are compared with it: Unicode
// folding (strings.EqualFold, strings.ToLower) maps the Kelvin sign to k
// and a long s to s, so a host spelt with them would pass for another.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
