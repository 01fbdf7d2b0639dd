package gcs_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/gcs"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

// TestEndpointBehindAPrivateCA: the emulator behind a TLS proxy whose
// certificate a test CA signed is read with the CA added to the system's
// roots, and refused without it.
func TestEndpointBehindAPrivateCA(t *testing.T) {
	srv := testserver.GCS(t)
	bucket := srv.Bucket(t)
	ctx := context.Background()
	w := srv.Client(t).Bucket(bucket).Object("m/refs.json").NewWriter(ctx)
	io.WriteString(w, "{}")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	plain, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ca := testserver.NewCA(t)
	// The proxy sends the emulator its own host name: it takes any other
	// for a bucket's virtual host.
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(plain) }}
	t.Setenv("STORAGE_EMULATOR_HOST", ca.ServeTLS(t, proxy))

	roots, err := x509.SystemCertPool()
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(ca.PEM)
	st := open(t, srv, bucket, "m", gcs.Options{RootCAs: roots, MaxAttempts: 1})
	if fi, err := st.Stat(ctx, "refs.json"); err != nil || fi.Size != 2 {
		t.Fatalf("with the CA: %+v, %v", fi, err)
	}
	if got := read(t, st, "refs.json"); string(got) != "{}" {
		t.Errorf("read %q", got)
	}

	without := open(t, srv, bucket, "m", gcs.Options{MaxAttempts: 1})
	_, err = without.Stat(ctx, "refs.json")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) && !strings.Contains(fmtErr(err), "certificate signed by unknown authority") {
		t.Fatalf("without the CA: err = %v, want an unknown authority", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
