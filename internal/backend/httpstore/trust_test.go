package httpstore_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/httpstore"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

func TestHTTPSBehindAPrivateCAIsReadOnlyWithItsRoots(t *testing.T) {
	ca := testserver.NewCA(t)
	srv := testserver.HTTPS(t, writeFiles(t, map[string][]byte{"refs.json": []byte(`{}`)}), ca)

	// Without the CA: the system's roots do not know it.
	plain := open(t, srv.URL, fast(httpstore.Options{RetryMax: 1}))
	_, err := plain.Stat(context.Background(), "refs.json")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("without the CA: err = %v, want an unknown authority", err)
	}

	roots, err := x509.SystemCertPool()
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(ca.PEM)
	trusting := open(t, srv.URL, fast(httpstore.Options{RootCAs: roots}))
	fi, err := trusting.Stat(context.Background(), "refs.json")
	if err != nil || fi.Size != 2 {
		t.Fatalf("with the CA: %+v, %v", fi, err)
	}
}

func TestCredentialsOverPlainHTTPGoToLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		opts    httpstore.Options
		refused bool
	}{
		{"http://203.0.113.7/repo/", httpstore.Options{Headers: []string{"Authorization: Bearer t0ken-abc"}}, true},
		{"http://alice:pw-secret@mirror.example/repo/", httpstore.Options{}, true},
		{"http://alice:pw-secret@mirror.example/repo/", httpstore.Options{AllowInsecureAuth: true}, false},
		{"http://mirror.example/repo/?token=abc", httpstore.Options{}, false}, // a signed URL's token goes anyway
		{"https://alice:pw-secret@mirror.example/repo/", httpstore.Options{Headers: []string{"X-Key: k"}}, false},
		{"http://127.0.0.1:8080/repo/", httpstore.Options{Headers: []string{"X-Key: k"}}, false},
		{"http://[::1]:8080/repo/", httpstore.Options{Headers: []string{"X-Key: k"}}, false},
		{"http://LocalHost/repo/", httpstore.Options{Headers: []string{"X-Key: k"}}, false},
	} {
		u, _ := url.Parse(tc.addr)
		_, err := httpstore.Open(context.Background(), u, tc.opts)
		if (err != nil) != tc.refused {
			t.Errorf("%s %+v: err = %v, want refused %v", tc.addr, tc.opts, err, tc.refused)
		}
		if err != nil && (strings.Contains(err.Error(), "pw-secret") || strings.Contains(err.Error(), "t0ken-abc") ||
			!strings.Contains(err.Error(), "--http-allow-insecure-auth")) {
			t.Errorf("%s: %v", tc.addr, err)
		}
	}
}

// TestErrorsDoNotQuoteTheQuery: net/http's url.Error quotes the whole URL,
// the token of a signed URL included; the store's errors must not.
func TestErrorsDoNotQuoteTheQuery(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	s := open(t, "http://"+addr+"/repo/?token=SECRET-in-query&X-Amz-Signature=SIG-secret", fast(httpstore.Options{RetryMax: 1}))
	_, err = s.Stat(context.Background(), "refs.json")
	if err == nil {
		t.Fatal("Stat succeeded")
	}
	if strings.Contains(err.Error(), "SECRET-in-query") || strings.Contains(err.Error(), "SIG-secret") || !strings.Contains(err.Error(), "token=REDACTED") {
		t.Errorf("err = %v", err)
	}
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		t.Errorf("the url.Error is not found in %v", err)
	}
}
