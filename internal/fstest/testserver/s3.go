package testserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3Server is a Versity S3 Gateway serving a posix folder.
type S3Server struct {
	Endpoint  string // http://127.0.0.1:port
	AccessKey string
	SecretKey string
	Region    string
	Dir       string // the posix root: one folder per bucket
	// AccessLog is the gateway's access log, one line per request it
	// answered (read by RequestsSince); "" when it keeps none.
	AccessLog string
	Process   *Process
}

// S3 starts a Versity S3 Gateway (v1.8.0, posix backend on t.TempDir()).
// It sets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY with t.Setenv so that
// the SDK's standard credential chain finds them; so a test calling it
// cannot be t.Parallel.
func S3(t testing.TB) *S3Server {
	t.Helper()
	s := newS3(t.TempDir(), "")
	s.Process = Start(t, Binary(t, "versitygw"), s.args, s.rootEnv()...)
	s.Endpoint = "http://" + s.Process.Addr
	t.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.SecretKey)
	return s
}

// StartS3 starts the Versity S3 Gateway binary outside a test, for the
// benchmark harness: the posix root is dir/posix, and the gateway keeps an
// access log in dir/access.log, the server's own count of the requests
// each client sends (retries and list pages included). It sets no
// environment variables; the caller stops it with s.Process.Stop.
func StartS3(binary, dir string) (*S3Server, error) {
	s := newS3(filepath.Join(dir, "posix"), filepath.Join(dir, "access.log"))
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	p, err := StartProcess(binary, s.args, s.rootEnv()...)
	if err != nil {
		return nil, err
	}
	s.Process = p
	s.Endpoint = "http://" + p.Addr
	return s, nil
}

func newS3(dir, accessLog string) *S3Server {
	return &S3Server{
		AccessKey: "fdltest" + randomHex(4),
		SecretKey: randomHex(20),
		Region:    "us-east-1",
		Dir:       dir,
		AccessLog: accessLog,
	}
}

func (s *S3Server) args(port int) []string {
	args := []string{
		"--port", "127.0.0.1:" + strconv.Itoa(port),
		"--region", s.Region,
		"--quiet",
	}
	if s.AccessLog != "" {
		args = append(args, "--access-log", s.AccessLog)
	}
	return append(args, "posix", s.Dir)
}

// rootEnv gives the gateway its root credentials.
func (s *S3Server) rootEnv() []string {
	return []string{"ROOT_ACCESS_KEY_ID=" + s.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s.SecretKey}
}

// Client returns an S3 client for the server with its root credentials,
// for tests that look at or tamper with the bucket behind a backend's back.
func (s *S3Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

var bucketSeq atomic.Int64

// Bucket creates a new empty bucket and returns its name.
func (s *S3Server) Bucket(t testing.TB) string {
	t.Helper()
	name := "fdl-" + strconv.FormatInt(bucketSeq.Add(1), 10) + "-" + randomHex(4)
	_, err := s.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)})
	if err != nil {
		t.Fatalf("testserver: creating bucket %s: %v", name, err)
	}
	return name
}

// URL is the fdl-mirror address of prefix in bucket on this server:
// s3://bucket/prefix/?endpoint=…&region=…&use_path_style=true. An empty
// prefix addresses the bucket's root.
func (s *S3Server) URL(bucket, prefix string) string {
	u := url.URL{Scheme: "s3", Host: bucket, Path: "/"}
	if prefix != "" {
		u.Path = "/" + prefix + "/"
	}
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	q.Set("region", s.Region)
	q.Set("use_path_style", "true")
	u.RawQuery = q.Encode()
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
