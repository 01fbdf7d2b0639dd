package s3_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
)

// Incomplete multipart uploads (a run killed mid-upload) are aborted under
// the store's prefix once older than the given age; younger ones, and
// those of another prefix, are left alone (issue 10).
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
	start("mirror/data/a.parquet")
	start("mirror/versions/x/ducklake.duckdb")
	start("other/data/b.parquet")
	st := open(t, srv.URL(bucket, "mirror"), s3.Options{})

	if n, err := st.AbortStaleUploads(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("uploads younger than an hour: aborted %d (%v), want 0", n, err)
	}
	if got := pending(); len(got) != 3 {
		t.Fatalf("uploads left: %v, want all 3", got)
	}
	time.Sleep(1100 * time.Millisecond) // S3 keeps Initiated to the second
	n, err := st.AbortStaleUploads(ctx, time.Second)
	if err != nil || n != 2 {
		t.Fatalf("aborted %d (%v), want the 2 under mirror/", n, err)
	}
	if got := pending(); len(got) != 1 || !got["other/data/b.parquet"] {
		t.Fatalf("uploads left: %v, want only other/data/b.parquet", got)
	}
}
