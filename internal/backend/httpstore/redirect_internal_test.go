package httpstore

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A downgrade from https to http is refused even to the source's own host
// or a host the operator allowed; an upgrade to https of an allowed host
// is followed.
func TestRedirectDowngradeRefused(t *testing.T) {
	base, _ := url.Parse("https://repo.example.com/fdl/")
	s, err := Open(context.Background(), base, Options{AllowRedirects: []string{"cdn.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	req := func(u string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := req("https://repo.example.com/fdl/refs.json")
	for target, ok := range map[string]bool{
		"https://repo.example.com/other/refs.json":   true,
		"https://repo.example.com:443/refs.json":     true,
		"https://cdn.example.com/refs.json":          true,
		"https://cdn.example.com:8443/refs.json":     true,
		"http://repo.example.com/fdl/refs.json":      false,
		"http://cdn.example.com/refs.json":           false,
		"https://repo.example.com:8443/refs.json":    false,
		"https://169.254.169.254/latest/meta-data/":  false,
		"https://cdn.example.com.evil.org/refs.json": false,
		"ftp://cdn.example.com/refs.json":            false,
	} {
		err := s.checkRedirect(req(target), []*http.Request{first})
		if (err == nil) != ok {
			t.Errorf("redirect to %s: %v, want allowed=%v", target, err, ok)
		}
		if err != nil && (!strings.Contains(err.Error(), target) || !strings.Contains(err.Error(), "refused")) {
			t.Errorf("redirect to %s: error %q does not name it", target, err)
		}
	}
	// A chain that passed through https may not step down either.
	plain, _ := url.Parse("http://repo.example.com/")
	s2, _ := Open(context.Background(), plain, Options{AllowRedirects: []string{"cdn.example.com"}})
	via := []*http.Request{req("http://repo.example.com/refs.json"), req("https://cdn.example.com/refs.json")}
	if err := s2.checkRedirect(req("http://repo.example.com/refs.json"), via); err == nil {
		t.Error("a chain http -> https -> http was followed")
	}
}
