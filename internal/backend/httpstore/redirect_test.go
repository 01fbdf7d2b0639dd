package httpstore

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A Location header is the upstream's to write. Whatever it says, a
// redirect the store follows stays on the source's origin (scheme, host
// and port, byte for byte but for ASCII case) or goes to a host the
// operator named, never from https to http, and carries the operator's
// headers only on the source's origin.
func FuzzCheckRedirect(f *testing.F) {
	f.Fuzz(func(t *testing.T, base, location, allow string) {
		bu, err := url.Parse(base)
		if err != nil {
			return
		}
		var allowList []string
		if allow != "" {
			allowList = []string{allow}
		}
		s, err := Open(context.Background(), bu, Options{Headers: []string{"X-Token: s3cr3t"}, AllowRedirects: allowList})
		if err != nil {
			return
		}
		defer s.Close()
		from, err := s.URL("versions/v1/dataset.json")
		if err != nil {
			t.Fatal(err)
		}
		to, err := from.Parse(location) // as net/http resolves a Location
		if err != nil {
			return
		}
		req := &http.Request{Method: http.MethodGet, URL: to, Header: s.header.Clone()}
		if s.checkRedirect(req, []*http.Request{{Method: http.MethodGet, URL: from}}) != nil {
			return
		}
		if from.Scheme == "https" && to.Scheme != "https" {
			t.Fatalf("followed %s to %s: a downgrade", from, to)
		}
		if to.Scheme != "http" && to.Scheme != "https" {
			t.Fatalf("followed %s to %s", from, to)
		}
		same := to.Scheme == s.base.Scheme && asciiLower(to.Hostname()) == asciiLower(s.base.Hostname()) && port(to) == port(s.base)
		if same {
			return
		}
		host := asciiLower(to.Hostname())
		if host == "" || allow == "" || !strings.Contains(asciiLower(allow), host) {
			t.Fatalf("followed %s to %s, neither the source's origin nor allowed (%q)", s.base, to, allow)
		}
		if req.Header.Get("X-Token") != "" {
			t.Fatalf("the operator's header went along to %s", to)
		}
	})
}
