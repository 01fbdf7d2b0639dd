package httpstore

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// echoServer answers every request with the headers it received, as JSON.
func echoServer(t testing.TB) (*httptest.Server, *http.Client) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As bytes: JSON strings would turn a value's non-UTF-8 bytes
		// (obs-text, which HTTP allows) into U+FFFD.
		raw := map[string][][]byte{}
		for k, vs := range r.Header {
			for _, v := range vs {
				raw[k] = append(raw[k], []byte(v))
			}
		}
		json.NewEncoder(w).Encode(raw)
	}))
	t.Cleanup(srv.Close)
	return srv, srv.Client()
}

var headerErrorRe = regexp.MustCompile(`^HTTP header #[12](: [A-Za-z-]+ is the store's own| is not "Name: value")`)

// What ParseHeaders accepts arrives at a real server as it was given, with
// no header it did not give (no CR/LF smuggling); what it refuses is named
// by position only, never by content (a value may be a token).
func FuzzParseHeaders(f *testing.F) {
	srv, client := echoServer(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		h, err := ParseHeaders([]string{a, b})
		if err != nil {
			if !headerErrorRe.MatchString(err.Error()) {
				t.Fatalf("error %q is not the fixed message", err)
			}
			return
		}
		want := http.Header{}
		for _, line := range []string{a, b} {
			name, value, ok := strings.Cut(line, ":")
			if !ok {
				t.Fatalf("%q accepted without a colon", line)
			}
			want.Add(strings.TrimSpace(name), strings.Trim(value, " \t"))
		}
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("accepted headers %q, %q cannot be sent: %v", a, b, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var raw map[string][][]byte
		if err := json.Unmarshal(body, &raw); err != nil {
			t.Fatalf("server answered %d %q", resp.StatusCode, body)
		}
		got := http.Header{}
		for k, vs := range raw {
			for _, v := range vs {
				got[k] = append(got[k], string(v))
			}
		}
		for k, v := range want {
			if fmt.Sprint(got[k]) != fmt.Sprint(v) {
				t.Fatalf("header %s arrived as %q, sent %q", k, got[k], v)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok && k != "User-Agent" && k != "Accept-Encoding" {
				t.Fatalf("header %s arrived, which %q, %q did not give", k, a, b)
			}
		}
	})
}

// A Retry-After never makes a wait longer than the cap, nor negative.
func FuzzRetryAfter(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string, capMillis int64) {
		max := time.Duration(capMillis%3_600_000) * time.Millisecond
		if max <= 0 {
			max = DefaultRetryWaitMax
		}
		d, ok := retryAfter(v, max)
		if !ok {
			if d != 0 {
				t.Fatalf("refused %q with a wait %v", v, d)
			}
			return
		}
		if d < 0 || d > max {
			t.Fatalf("Retry-After %q: wait %v outside [0, %v]", v, d, max)
		}
	})
}

// A resumed body is accepted only as a 206 whose Content-Range is the rest
// of the object from the offset asked for.
func FuzzCheckResumed(f *testing.F) {
	f.Fuzz(func(t *testing.T, status int, contentRange string, off, size int64) {
		if checkResumed(status, contentRange, off, size) != nil {
			return
		}
		var first, last, total int64
		n, err := fmt.Sscanf(contentRange, "bytes %d-%d/%d", &first, &last, &total)
		if status != http.StatusPartialContent || err != nil || n != 3 ||
			first != off || last != size-1 || total != size ||
			contentRange != fmt.Sprintf("bytes %d-%d/%d", first, last, total) {
			t.Fatalf("accepted %d %q for the rest from %d of %d bytes", status, contentRange, off, size)
		}
	})
}

// The validator a resumption is pinned to is a strong ETag or
// Last-Modified, never a weak ETag (which If-Range may not carry).
func FuzzValidator(f *testing.F) {
	f.Fuzz(func(t *testing.T, etag, lastModified string) {
		v := validatorOf(etag, lastModified)
		if strings.HasPrefix(v, "W/") && v != lastModified {
			t.Fatalf("weak ETag %q chosen", v)
		}
		if v != etag && v != lastModified {
			t.Fatalf("validator %q is neither header", v)
		}
		if etag != "" && !strings.HasPrefix(etag, "W/") && v != etag {
			t.Fatalf("strong ETag %q passed over for %q", etag, v)
		}
	})
}
