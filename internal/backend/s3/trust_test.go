package s3_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

// TestEndpointBehindAPrivateCA: the gateway behind a TLS proxy whose
// certificate a test CA signed, reached with the CA added to the system's
// roots, while AWS_CA_BUNDLE names another bundle (as on this machine):
// the SDK adds that bundle to the roots given, and replaces none.
func TestEndpointBehindAPrivateCA(t *testing.T) {
	srv := startS3(t) // sets AWS_CA_BUNDLE to an unrelated CA
	backendURL, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ca := testserver.NewCA(t)
	endpoint := ca.ServeTLS(t, httputil.NewSingleHostReverseProxy(backendURL))
	bucket := srv.Bucket(t)
	addr := strings.Replace(srv.URL(bucket, "m"), url.QueryEscape(srv.Endpoint), url.QueryEscape(endpoint), 1)
	if !strings.Contains(addr, url.QueryEscape(endpoint)) {
		t.Fatalf("address %s does not name the proxy", addr)
	}
	ctx := context.Background()

	roots, err := x509.SystemCertPool()
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(ca.PEM)
	st := open(t, addr, s3.Options{RootCAs: roots, MaxAttempts: 1})
	if err := st.Put(ctx, "refs.json", strings.NewReader("{}"), 2); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	if fi, err := st.Stat(ctx, "refs.json"); err != nil || fi.Size != 2 {
		t.Fatalf("with the CA: %+v, %v", fi, err)
	}

	without := open(t, addr, s3.Options{MaxAttempts: 1})
	_, err = without.Stat(ctx, "refs.json")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("without the CA: err = %v, want an unknown authority", err)
	}
}
