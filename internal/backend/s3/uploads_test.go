package s3_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

// Incomplete multipart uploads (a run killed mid-upload) are aborted under
// the store's prefix once older than the given age; younger ones, and
// those of another prefix, are left alone (issue 10); so are those
// outside the mirror's layout and those of a mirror nested in it (issue 27).
func TestAbortStaleUploadsUnderThePrefixOnly(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	ctx := context.Background()
	cl := srv.Client()
	start := func(key string) {
		t.Helper()
		up, err := cl.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.UploadPart(ctx, &awss3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key),
			UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader(make([]byte, 5<<20))})
		if err != nil {
			t.Fatal(err)
		}
	}
	pending := func() map[string]bool {
		t.Helper()
		out, err := cl.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]bool{}
		for _, u := range out.Uploads {
			keys[aws.ToString(u.Key)] = true
		}
		return keys
	}
	putObject := func(key string) {
		t.Helper()
		if _, err := cl.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader([]byte("{}"))}); err != nil {
			t.Fatal(err)
		}
	}
	start("mirror/data/a.parquet")
	start("mirror/versions/x/ducklake.duckdb")
	start("other/data/b.parquet")
	// Not of the mirror's layout, and of mirrors nested in it: one with
	// fdl.json, one in its first sync (only its lock so far).
	start("mirror/notes/n.txt")
	start("mirror/data/inner/data/c.parquet")
	putObject("mirror/data/inner/fdl.json")
	start("mirror/versions/y/z/data/d.parquet")
	putObject("mirror/versions/y/z/.fdl-mirror/lock")
	const all = 6
	st := open(t, srv.URL(bucket, "mirror"), s3.Options{})

	if n, err := st.AbortStaleUploads(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("uploads younger than an hour: aborted %d (%v), want 0", n, err)
	}
	if got := pending(); len(got) != all {
		t.Fatalf("uploads left: %v, want all %d", got, all)
	}
	time.Sleep(1100 * time.Millisecond) // S3 keeps Initiated to the second
	n, err := st.AbortStaleUploads(ctx, time.Second)
	if err != nil || n != 2 {
		t.Fatalf("aborted %d (%v), want the 2 of the mirror's own layout", n, err)
	}
	got := pending()
	for _, key := range []string{"other/data/b.parquet", "mirror/notes/n.txt", "mirror/data/inner/data/c.parquet", "mirror/versions/y/z/data/d.parquet"} {
		if !got[key] {
			t.Errorf("the upload of %s, not this mirror's, was aborted", key)
		}
	}
	if len(got) != all-2 {
		t.Errorf("uploads left: %v", got)
	}

	// A mirror at the bucket's root: only its own layout, and nothing of
	// the mirror at mirror/ (which has fdl.json and a lock).
	putObject("mirror/fdl.json")
	start("data/e.parquet")
	time.Sleep(1100 * time.Millisecond)
	root := open(t, srv.URL(bucket, ""), s3.Options{})
	n, err = root.AbortStaleUploadsIn(ctx, time.Second, []string{"data/", "versions/", ".fdl-mirror/"})
	if err != nil || n != 1 {
		t.Fatalf("the root mirror aborted %d (%v), want 1: data/e.parquet", n, err)
	}
	if left := pending(); len(left) != all-2 || left["data/e.parquet"] {
		t.Errorf("uploads left after the root mirror's turn: %v", left)
	}
}

// A multipart upload aborted under a Put, between its parts and its
// completion (another run's cleanup, a lifecycle rule), is NoSuchUpload
// (404) to CompleteMultipartUpload: the write failed and may be tried
// again; it is never an absent object, which the engine would read as a
// file missing upstream (issue 27).
func TestUploadAbortedUnderAPutIsAFailedWriteNotAnAbsentObject(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	ctx := context.Background()
	cl := srv.Client()
	aborted := 0
	proxy := testserver.NewFaultProxy(t, srv.Endpoint)
	proxy.SetSchedule(func(_ int64, r *http.Request) testserver.Fault {
		if r.Method != http.MethodPost || !r.URL.Query().Has("uploadId") {
			return testserver.Pass
		}
		// CompleteMultipartUpload: abort the upload just before it.
		out, err := cl.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
		if err != nil {
			t.Error(err)
			return testserver.Pass
		}
		for _, u := range out.Uploads {
			if _, err := cl.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: u.Key, UploadId: u.UploadId}); err != nil {
				t.Error(err)
			}
			aborted++
		}
		return testserver.Pass
	})
	sink := strings.Replace(srv.URL(bucket, "mirror"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
	st := open(t, sink, s3.Options{PartSize: 5 << 20, MaxAttempts: 2})
	err := st.Put(ctx, "data/f.parquet", bytes.NewReader(make([]byte, 11<<20)), 11<<20)
	if aborted == 0 {
		t.Fatal("no upload was aborted under the Put")
	}
	if err == nil {
		t.Fatal("a Put whose upload was aborted under it succeeded")
	}
	if backend.IsNotExist(err) || backend.IsPermanent(err) {
		t.Fatalf("a Put whose upload was aborted: %v; IsNotExist %v, IsPermanent %v, want neither", err, backend.IsNotExist(err), backend.IsPermanent(err))
	}
	if !strings.Contains(err.Error(), "NoSuchUpload") {
		t.Errorf("the failed Put does not say what the store said: %v", err)
	}
	t.Logf("the failed Put: %v", err)
	if _, err := st.Stat(ctx, "data/f.parquet"); !backend.IsNotExist(err) {
		t.Errorf("after the failed Put, Stat: %v; want nothing published", err)
	}
}
