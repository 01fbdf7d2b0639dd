package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

// The gateway's access log is what the S3 request counts of the report
// come from: each request the test sends must be counted once, under its
// bucket and operation.
func TestGatewayCountsEachRequestUnderItsBucket(t *testing.T) {
	ctx := context.Background()
	g, err := startGateway(ctx, testserver.Binary(t, "versitygw"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer g.stop()
	c := awss3.New(awss3.Options{
		Region: g.region, BaseEndpoint: aws.String(g.endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(g.accessKey, g.secretKey, ""),
	})
	for _, b := range []string{"bench-a", "bench-b"} {
		if _, err := c.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	off := g.logOffset()
	const puts, gets, misses = 3, 2, 1
	for i := range puts {
		_, err := c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String("bench-a"), Key: aws.String(fmt.Sprintf("k%d", i)),
			Body: bytes.NewReader([]byte("hello")), ContentLength: aws.Int64(5)})
		if err != nil {
			t.Fatal(err)
		}
	}
	for range gets {
		out, err := c.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String("bench-a"), Key: aws.String("k0")})
		if err != nil {
			t.Fatal(err)
		}
		out.Body.Close()
	}
	for range misses {
		if _, err := c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String("bench-b"), Key: aws.String("absent")}); err == nil {
			t.Fatal("HEAD of an absent object succeeded")
		}
	}
	counts, err := g.countsSince(off)
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

// The local file-system calls of the report are strace's summary: the
// parsed total is strace's own, and the breakdown adds up to it.
func TestStraceSummaryOfARealRun(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (scripts/bench installs it)")
	}
	dir := t.TempDir()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "summary")
	cmd := exec.Command(strace, "-f", "-c", "--seccomp-bpf", "-e", "trace="+straceSet, "-o", out, "ls", "-l", dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("strace: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	total, detail, err := parseStraceSummary(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var want int64 = -1
	var sum int64
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[len(f)-1] == "total" {
			fmt.Sscan(f[3], &want)
		}
	}
	for _, part := range strings.Split(detail, ", ") {
		var name string
		var n int64
		if _, err := fmt.Sscan(part, &name, &n); err != nil {
			t.Fatalf("breakdown %q: %v", detail, err)
		}
		sum += n
	}
	if total != want || sum != total || total < 5 {
		t.Errorf("parsed total %d, strace's %d, breakdown sums to %d (%s); ls -l of 5 files stats each", total, want, sum, detail)
	}
}
