package s3

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// DefaultLayout is where a mirror writes, for AbortStaleUploads: the
// default data_dir, the version folders and the mirror's own files.
var DefaultLayout = []string{"data/", "versions/", backend.ReservedPrefix}

// AbortStaleUploads is AbortStaleUploadsIn with DefaultLayout.
func (s *Store) AbortStaleUploads(ctx context.Context, olderThan time.Duration) (int, error) {
	return s.AbortStaleUploadsIn(ctx, olderThan, DefaultLayout)
}

// AbortStaleUploadsIn aborts the incomplete multipart uploads of this
// mirror that were started more than olderThan ago, and returns how many
// it aborted. A run killed mid-upload leaves its parts in the bucket,
// invisible to a listing and billed. The caller holds the mirror's lock
// and passes at least the lock's lifetime: an upload older than that
// belongs to a run that no longer holds the lock, so nothing will ever
// complete it.
//
// Only uploads this mirror could have started are its to abort: those
// under the name prefixes of its layout (its data_dir, versions/,
// .fdl-mirror/), and none below a nested mirror, a folder of its own
// with fdl.json or .fdl-mirror/ in it (whose live uploads look stale by
// this mirror's lock lifetime, not its own). A mirror at a bucket's root
// would otherwise abort every upload in the bucket.
func (s *Store) AbortStaleUploadsIn(ctx context.Context, olderThan time.Duration, layout []string) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	in := &awss3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket)}
	if s.prefix != "" {
		in.Prefix = aws.String(s.prefix)
	}
	nested := map[string]bool{} // folder → holds a mirror of its own
	aborted := 0
	for {
		out, err := s.client.ListMultipartUploads(ctx, in, s.logRetries(""))
		if err != nil {
			return aborted, fmt.Errorf("s3://%s/%s: listing incomplete multipart uploads: %w", s.bucket, s.prefix, err)
		}
		for _, u := range out.Uploads {
			if u.Initiated == nil || !u.Initiated.Before(cutoff) {
				continue
			}
			name, ok := strings.CutPrefix(aws.ToString(u.Key), s.prefix)
			if !ok || !inLayout(name, layout) {
				continue
			}
			below, err := s.belowNestedMirror(ctx, name, nested)
			if err != nil {
				return aborted, err
			}
			if below != "" {
				s.log.Debug("leaving an upload of a nested mirror alone", zap.String("object", s.addr(name)), zap.String("nested", s.addr(below)))
				continue
			}
			_, err = s.client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{
				Bucket: aws.String(s.bucket), Key: u.Key, UploadId: u.UploadId,
			}, s.logRetries(""))
			if err != nil {
				return aborted, fmt.Errorf("s3://%s/%s: aborting an incomplete multipart upload: %w", s.bucket, aws.ToString(u.Key), err)
			}
			s.log.Info("aborted an incomplete multipart upload left by an earlier run",
				zap.String("object", "s3://"+s.bucket+"/"+aws.ToString(u.Key)), zap.Time("initiated", *u.Initiated))
			aborted++
		}
		if !aws.ToBool(out.IsTruncated) {
			return aborted, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// inLayout says whether name lies under one of the layout's prefixes.
func inLayout(name string, layout []string) bool {
	if backend.CheckName(name) != nil {
		return false // not a name this store writes
	}
	for _, p := range layout {
		if p != "" && strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// belowNestedMirror returns the innermost folder between the store's root
// and name that holds a mirror of its own (fdl.json, or anything under
// .fdl-mirror/: a first sync holds its lock before it writes fdl.json);
// "" when none. Answers are kept in seen across one call.
func (s *Store) belowNestedMirror(ctx context.Context, name string, seen map[string]bool) (string, error) {
	found := ""
	for i := strings.Index(name, "/"); i >= 0; i = next(name, i) {
		dir := name[:i+1]
		is, ok := seen[dir]
		if !ok {
			var err error
			if is, err = s.holdsMirror(ctx, dir); err != nil {
				return "", err
			}
			seen[dir] = is
		}
		if is {
			found = dir
		}
	}
	return found, nil
}

func next(name string, i int) int {
	j := strings.Index(name[i+1:], "/")
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// holdsMirror says whether the folder dir (ending in "/") has fdl.json or
// anything under .fdl-mirror/, with at most two one-key listings.
func (s *Store) holdsMirror(ctx context.Context, dir string) (bool, error) {
	for _, probe := range []string{dir + "fdl.json", dir + backend.ReservedPrefix} {
		out, err := s.client.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{
			Bucket: aws.String(s.bucket), Prefix: aws.String(s.key(probe)), MaxKeys: aws.Int32(1),
		}, s.logRetries(dir))
		if err != nil {
			return false, fmt.Errorf("%s: looking for a nested mirror: %w", s.addr(dir), err)
		}
		if len(out.Contents) > 0 {
			return true, nil
		}
	}
	return false, nil
}
