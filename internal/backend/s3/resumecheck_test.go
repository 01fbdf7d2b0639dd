package s3_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

// A body cut off and resumed with a Range request is checked as a whole
// against the store's own checksum of the object: through a proxy that
// cuts the first answer and damages one byte of the resumption, the read
// fails naming the checksum instead of returning the damaged bytes.
func TestAResumedReadIsCheckedAgainstTheObjectsChecksum(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	direct := open(t, srv.URL(bucket, "p"), s3.Options{})
	ctx := context.Background()
	content := bytes.Repeat([]byte("parquet "), 8192)
	if err := direct.Put(ctx, "data", bytes.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
	proxy := testserver.NewFaultProxy(t, srv.Endpoint)
	proxy.CutAfter = int64(len(content) / 3)
	addr := strings.Replace(srv.URL(bucket, "p"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
	st := open(t, addr, s3.Options{MaxAttempts: 3})

	read := func() ([]byte, error) {
		rc, err := st.Open(ctx, "data")
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	// Cut the first GET; the resumption (a Range GET) passes untouched.
	var gets int
	proxy.SetSchedule(func(n int64, r *http.Request) testserver.Fault {
		if r.Method != http.MethodGet {
			return testserver.Pass
		}
		if gets++; gets == 1 {
			return testserver.CutBody
		}
		return testserver.Pass
	})
	if got, err := read(); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("a resumed read of undamaged bytes: %d bytes (equal: %v), error %v", len(got), bytes.Equal(got, content), err)
	}

	// Cut the first GET, damage a byte of the resumption.
	gets = 0
	proxy.SetSchedule(func(n int64, r *http.Request) testserver.Fault {
		if r.Method != http.MethodGet {
			return testserver.Pass
		}
		if gets++; gets == 1 {
			return testserver.CutBody
		}
		return testserver.FlipByte
	})
	got, err := read()
	if err == nil {
		t.Fatalf("a resumed read with a damaged byte returned %d bytes without error (equal to what was written: %v)", len(got), bytes.Equal(got, content))
	}
	if !strings.Contains(err.Error(), "checksum") || !strings.Contains(err.Error(), "data") {
		t.Errorf("error %q does not name the object and its checksum", err)
	}
	if proxy.Faults() < 2 {
		t.Errorf("%d faults injected, want the cut and the damage", proxy.Faults())
	}
}
