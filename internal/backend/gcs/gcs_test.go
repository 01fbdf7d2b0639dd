package gcs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/backendtest"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/gcs"
	"github.com/fdl-mirror/fdl-mirror/internal/testserver"
)

func open(t *testing.T, srv *testserver.GCSServer, bucket, prefix string, opts gcs.Options) *gcs.Store {
	t.Helper()
	u, err := url.Parse(srv.URL(bucket, prefix))
	if err != nil {
		t.Fatal(err)
	}
	s, err := gcs.Open(context.Background(), u, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func read(t *testing.T, r backend.Reader, name string) []byte {
	t.Helper()
	rc, err := r.Open(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBasics(t *testing.T) {
	srv := testserver.GCS(t)
	s := open(t, srv, srv.Bucket(t), "mirror/x", gcs.Options{})
	ctx := context.Background()
	if err := s.Put(ctx, "a/b.txt", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, "a/b.txt"); string(got) != "hello" {
		t.Fatalf("read %q", got)
	}
	fi, err := s.Stat(ctx, "a/b.txt")
	if err != nil || fi.Size != 5 {
		t.Fatalf("stat %v %v", fi, err)
	}
	if _, err := s.Stat(ctx, "missing"); !backend.IsNotExist(err) {
		t.Fatalf("stat missing: %v", err)
	}
	if _, err := s.Open(ctx, "missing"); !backend.IsNotExist(err) {
		t.Fatalf("open missing: %v", err)
	}
	if err := s.Create(ctx, "a/b.txt", strings.NewReader("other"), 5); !errors.Is(err, backend.ErrExist) {
		t.Fatalf("create existing: %v", err)
	}
	if err := s.Create(ctx, "c", strings.NewReader("new"), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, backend.ReservedPrefix+"lock", strings.NewReader("l"), 1); err != nil {
		t.Fatal(err)
	}
	var names []string
	if err := s.List(ctx, "", func(fi backend.FileInfo) error { names = append(names, fi.Name); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "a/b.txt,c" {
		t.Fatalf("list %v", names)
	}
	if err := s.Remove(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if s.Pages() != 1 {
		t.Fatalf("pages %d", s.Pages())
	}
}

func TestPutLargeChunked(t *testing.T) {
	srv := testserver.GCS(t)
	s := open(t, srv, srv.Bucket(t), "", gcs.Options{ChunkSize: 256 << 10})
	data := bytes.Repeat([]byte("0123456789abcdef"), 100000) // 1.6 MB, 7 chunks
	if err := s.Put(context.Background(), "big", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, "big"); !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, want %d", len(got), len(data))
	}
}

func TestConformance(t *testing.T) {
	srv := testserver.GCS(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		// A small chunk size makes the suite's large objects take the
		// resumable, several-request path.
		return open(t, srv, srv.Bucket(t), "some/prefix", gcs.Options{ChunkSize: 1 << 20})
	})
}

func TestConformanceBucketRoot(t *testing.T) {
	srv := testserver.GCS(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return open(t, srv, srv.Bucket(t), "", gcs.Options{})
	})
}
