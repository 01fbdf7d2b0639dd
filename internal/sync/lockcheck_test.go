package sync_test

import (
	"context"
	"path/filepath"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlmirror "github.com/fdl-mirror/fdl-mirror/internal/mirror"
)

// A run whose lock is taken over while it copies (the documented takeover
// race, or a lock deleted by hand) learns it before it moves any ref: it
// checks the lock's token just before stage two, and stops with an error
// (exit 1) instead of finishing with a warning (issue 10).
func TestRunThatLostItsLockMovesNoRef(t *testing.T) {
	srv := testserver.S3(t)
	bucket := srv.Bucket(t)
	up := filepath.Join(t.TempDir(), "up")
	ctx := context.Background()
	if _, err := generate.Generate(ctx, up, generate.Options{Versions: 2, FilesPerVersion: 3, FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	var once gosync.Once
	steal := func(files, bytes int64) {
		once.Do(func() {
			thief := `{"owner":"thief","expires":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `","token":"stolen"}`
			_, err := srv.Client().PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("mirror/.fdl-mirror/lock"),
				Body: strings.NewReader(thief)})
			if err != nil {
				t.Error(err)
			}
		})
	}
	// An hour's lifetime: no renewal notices the thief during the run.
	job := fdlmirror.Job{Stores: fdlmirror.Stores{Source: up, Sink: srv.URL(bucket, "mirror"), LockTTL: time.Hour}, Concurrency: 1}
	rep, err := fdlmirror.Run(ctx, job, nil, steal)
	if err == nil || !strings.Contains(err.Error(), "thief") {
		t.Fatalf("run whose lock was taken over: err %v, want one naming the thief", err)
	}
	if rep != nil && len(rep.RefsMoved) > 0 {
		t.Errorf("refs moved: %+v", rep.RefsMoved)
	}
	out, lerr := srv.Client().ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("mirror/refs")})
	if lerr != nil {
		t.Fatal(lerr)
	}
	for _, o := range out.Contents {
		t.Errorf("ref written by a run that lost its lock: %s", aws.ToString(o.Key))
	}
}
