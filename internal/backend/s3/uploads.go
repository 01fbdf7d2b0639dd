package s3

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"go.uber.org/zap"
)

// AbortStaleUploads aborts the incomplete multipart uploads under the
// store's prefix that were started more than olderThan ago, and returns
// how many it aborted. A run killed mid-upload leaves its parts in the
// bucket, invisible to a listing and billed. The caller holds the mirror's
// lock and passes at least the lock's lifetime: an upload older than that
// belongs to a run that no longer holds the lock, so nothing will ever
// complete it.
func (s *Store) AbortStaleUploads(ctx context.Context, olderThan time.Duration) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	in := &awss3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket)}
	if s.prefix != "" {
		in.Prefix = aws.String(s.prefix)
	}
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
			_, err := s.client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{
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
