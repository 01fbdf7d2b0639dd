package mirror_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
)

// A run holding the lock aborts the incomplete multipart uploads an
// earlier, killed run left under the sink's prefix once they are older
// than the lock's lifetime; nothing else removed them (issue 10).
func TestRunAbortsIncompleteUploadsOfEarlierRuns(t *testing.T) {
	srv := testserver.S3(t)
	bucket := srv.Bucket(t)
	up := filepath.Join(t.TempDir(), "up")
	ctx := context.Background()
	if _, err := generate.Generate(ctx, up, generate.Options{Versions: 1, FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	cl := srv.Client()
	created, err := cl.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String("mirror/data/killed.parquet")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.UploadPart(ctx, &awss3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String("mirror/data/killed.parquet"),
		UploadId: created.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader(make([]byte, 5<<20))}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond) // older than the lock's lifetime below; S3 keeps seconds

	job := mirror.Job{Stores: mirror.Stores{Source: up, Sink: srv.URL(bucket, "mirror"), LockTTL: 2 * time.Second}}
	rep, err := mirror.Run(ctx, job, nil, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("sync: %v %+v", err, rep)
	}
	out, err := cl.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Uploads) != 0 {
		t.Fatalf("%d incomplete uploads left after a run that held the lock", len(out.Uploads))
	}
}
