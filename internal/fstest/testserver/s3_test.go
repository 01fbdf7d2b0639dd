package testserver

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestS3ServesFreshBucketsAndStopsWithTheTest(t *testing.T) {
	var addr string
	t.Run("server", func(t *testing.T) {
		s := S3(t)
		addr = s.Process.Addr
		a, b := s.Bucket(t), s.Bucket(t)
		if a == b {
			t.Fatalf("Bucket returned %q twice", a)
		}
		out, err := s.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(a)})
		if err != nil {
			t.Fatalf("listing new bucket %s: %v", a, err)
		}
		if len(out.Contents) != 0 {
			t.Fatalf("new bucket %s holds %d objects", a, len(out.Contents))
		}
		if u := s.URL(a, "x/y"); !strings.HasPrefix(u, "s3://"+a+"/x/y/?") || !strings.Contains(u, "use_path_style=true") {
			t.Fatalf("URL = %q", u)
		}
	})
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("server on %s still accepts connections after its test ended", addr)
	}
}
