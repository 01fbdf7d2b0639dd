package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"cloud.google.com/go/storage"
)

// GCSServer is fake-gcs-server (v1.56.1) keeping its buckets in memory.
type GCSServer struct {
	Endpoint string // http://127.0.0.1:port
	Process  *Process
}

// GCS starts fake-gcs-server on 127.0.0.1 over plain HTTP and points
// STORAGE_EMULATOR_HOST at it with t.Setenv, so that any storage client
// made afterwards in this test talks to it (as the client does by itself);
// a test calling it cannot be t.Parallel.
func GCS(t testing.TB) *GCSServer {
	t.Helper()
	bin := Binary(t, "fake-gcs-server")
	s := &GCSServer{}
	s.Process = Start(t, bin, func(port int) []string {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		return []string{
			"-scheme", "http",
			"-host", "127.0.0.1",
			"-port", strconv.Itoa(port),
			// Resumable uploads are continued at the URL the server
			// returns in Location; it must be this address.
			"-external-url", "http://" + addr,
			"-public-host", addr,
			"-backend", "memory",
			"-log-level", "warn",
		}
	})
	s.Endpoint = "http://" + s.Process.Addr
	t.Setenv("STORAGE_EMULATOR_HOST", s.Process.Addr)
	return s
}

// Bucket creates a new empty bucket and returns its name.
func (s *GCSServer) Bucket(t testing.TB) string {
	t.Helper()
	name := "fdl-" + strconv.FormatInt(bucketSeq.Add(1), 10) + "-" + randomHex(4)
	body, _ := json.Marshal(map[string]string{"name": name})
	resp, err := http.Post(s.Endpoint+"/storage/v1/b?project=test", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("testserver: creating bucket %s: %v", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		t.Fatalf("testserver: creating bucket %s: %s: %s", name, resp.Status, msg)
	}
	return name
}

// URL is the fdl-mirror address of prefix in bucket: gs://bucket/prefix/.
// An empty prefix addresses the bucket's root.
func (s *GCSServer) URL(bucket, prefix string) string {
	u := url.URL{Scheme: "gs", Host: bucket, Path: "/"}
	if prefix != "" {
		u.Path = "/" + prefix + "/"
	}
	return u.String()
}

// Client returns a storage client for the emulator, for tests that look
// at or tamper with a bucket behind a backend's back.
func (s *GCSServer) Client(t testing.TB) *storage.Client {
	t.Helper()
	c, err := storage.NewClient(context.Background())
	if err != nil {
		t.Fatalf("testserver: storage client for %s: %v", s.Endpoint, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
