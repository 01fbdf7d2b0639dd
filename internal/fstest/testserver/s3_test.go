package testserver

import (
	"bytes"
	"context"
	"fmt"
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

// The gateway's access log is what the S3 request counts of the
// benchmark's report come from: each request the test sends must be counted once, under its
// bucket and operation.
func TestStartS3CountsEachRequestUnderItsBucket(t *testing.T) {
	ctx := context.Background()
	g, err := StartS3(Binary(t, "versitygw"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Process.Stop()
	c := g.Client()
	for _, b := range []string{"bench-a", "bench-b"} {
		if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	off := g.LogOffset()
	const puts, gets, misses = 3, 2, 1
	for i := range puts {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bench-a"), Key: aws.String(fmt.Sprintf("k%d", i)),
			Body: bytes.NewReader([]byte("hello")), ContentLength: aws.Int64(5)})
		if err != nil {
			t.Fatal(err)
		}
	}
	for range gets {
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bench-a"), Key: aws.String("k0")})
		if err != nil {
			t.Fatal(err)
		}
		out.Body.Close()
	}
	for range misses {
		if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bench-b"), Key: aws.String("absent")}); err == nil {
			t.Fatal("HEAD of an absent object succeeded")
		}
	}
	counts, err := g.RequestsSince(off)
	if err != nil {
		t.Fatal(err)
	}
	a, b := counts["bench-a"], counts["bench-b"]
	if a == nil || b == nil {
		t.Fatalf("counts %v: want both buckets", counts)
	}
	if a.Requests != puts+gets || a.Ops["PutObject"] != puts || a.Ops["GetObject"] != gets || a.Errors != 0 {
		t.Errorf("bench-a: %+v; want %d PutObject and %d GetObject", a, puts, gets)
	}
	if b.Requests != misses || b.Ops["HeadObject"] != misses || b.Errors != misses {
		t.Errorf("bench-b: %+v; want %d HeadObject answered 404", b, misses)
	}
	if len(counts) != 2 {
		t.Errorf("requests counted under %d buckets, want 2: %v", len(counts), counts)
	}
}
