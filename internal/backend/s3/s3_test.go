package s3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/backendtest"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

// startS3 starts the gateway and sets AWS_CA_BUNDLE, as many operators
// do: the SDK then insists on its own HTTP client type, which the backend
// must keep working with, over plain http:// too.
func startS3(t *testing.T) *testserver.S3Server {
	t.Helper()
	srv := testserver.S3(t)
	// A fresh CA of its own, so the test does not depend on the machine's bundle.
	t.Setenv("AWS_CA_BUNDLE", testserver.NewCA(t).WriteFile(t))
	return srv
}

func open(t *testing.T, addr string, opts s3.Options) *s3.Store {
	t.Helper()
	u, err := url.Parse(addr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s3.Open(context.Background(), u, opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestConformance(t *testing.T) {
	srv := startS3(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return open(t, srv.URL(srv.Bucket(t), "mirrors/one"), s3.Options{})
	})
}

func TestConformanceReaderAtBucketRoot(t *testing.T) {
	srv := startS3(t)
	backendtest.RunReader(t, func(t *testing.T, files map[string][]byte) backend.Reader {
		bucket := srv.Bucket(t)
		for name, content := range files {
			_, err := srv.Client().PutObject(context.Background(), &awss3.PutObjectInput{
				Bucket: aws.String(bucket), Key: aws.String(name), Body: bytes.NewReader(content),
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return open(t, srv.URL(bucket, ""), s3.Options{})
	})
}

func TestCreateAboveMultipartThresholdIsIfAbsent(t *testing.T) {
	srv := startS3(t)
	st := open(t, srv.URL(srv.Bucket(t), "m"), s3.Options{PartSize: 5 << 20})
	ctx := context.Background()
	first := bytes.Repeat([]byte("1"), 11<<20)
	if err := st.Create(ctx, "big", bytes.NewReader(first), int64(len(first))); err != nil {
		t.Fatalf("first Create: %v", err)
	}
	second := bytes.Repeat([]byte("2"), 11<<20)
	if err := st.Create(ctx, "big", bytes.NewReader(second), int64(len(second))); !errors.Is(err, backend.ErrExist) {
		t.Fatalf("second Create: err = %v, want ErrExist", err)
	}
	if got := backendtest.MustRead(t, st, "big"); sha256.Sum256(got) != sha256.Sum256(first) {
		t.Fatal("the second Create changed the object")
	}
}

func TestFailedMultipartUploadIsAborted(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	st := open(t, srv.URL(bucket, "m"), s3.Options{PartSize: 5 << 20})
	size := int64(23 << 20)
	r := io.MultiReader(io.LimitReader(backendtest.Zeros{}, 17<<20), errReader{})
	if err := st.Put(context.Background(), "big", r, size); err == nil {
		t.Fatal("Put with a failing reader succeeded")
	}
	out, err := srv.Client().ListMultipartUploads(context.Background(), &awss3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Uploads) != 0 {
		t.Fatalf("%d multipart uploads left in the bucket after a failed Put", len(out.Uploads))
	}
}

func TestCopyFromSameEndpoint(t *testing.T) {
	srv := startS3(t)
	src := open(t, srv.URL(srv.Bucket(t), "upstream"), s3.Options{})
	dst := open(t, srv.URL(srv.Bucket(t), "mirror"), s3.Options{})
	ctx := context.Background()
	name := "data/with space/ü+%#?.parquet"
	content := []byte("copied server-side")
	if err := src.Put(ctx, name, bytes.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
	ok, err := dst.CopyFrom(ctx, src, name, "copy/"+name, int64(len(content)))
	if err != nil || !ok {
		t.Fatalf("CopyFrom = %v, %v; want true, nil", ok, err)
	}
	if got := backendtest.MustRead(t, dst, "copy/"+name); !bytes.Equal(got, content) {
		t.Fatalf("copy holds %q", got)
	}
	ok, err = dst.CopyFrom(ctx, src, "missing", "copy/missing", 1)
	if ok || !errors.Is(err, backend.ErrNotExist) {
		t.Fatalf("CopyFrom of a missing object = %v, %v; want false, ErrNotExist", ok, err)
	}
}

func TestCopyFromOtherStoreDeclines(t *testing.T) {
	srv := startS3(t)
	dst := open(t, srv.URL(srv.Bucket(t), "mirror"), s3.Options{})
	other := open(t, srv.URL(srv.Bucket(t), "x")+"&endpoint=http://127.0.0.2:1", s3.Options{})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("local"), 0o644)
	loc, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	for _, src := range []backend.Reader{loc, other} {
		ok, err := dst.CopyFrom(context.Background(), src, "f", "f", 5)
		if ok || err != nil {
			t.Fatalf("CopyFrom %s = %v, %v; want false, nil", src.Location(), ok, err)
		}
	}
	if _, err := dst.Stat(context.Background(), "f"); !errors.Is(err, backend.ErrNotExist) {
		t.Fatalf("a declined copy wrote something: Stat err = %v", err)
	}
}

// faultProxy forwards to the gateway, answering the first failures
// requests with 503 or stalling them.
func faultProxy(t *testing.T, target string, failures int32, stall time.Duration) *httptest.Server {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	var n atomic.Int32
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= failures {
			if stall > 0 {
				select {
				case <-time.After(stall):
				case <-r.Context().Done():
				}
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func TestRetriesAreLoggedWithTheObject(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	direct := open(t, srv.URL(bucket, "p"), s3.Options{})
	ctx := context.Background()
	if err := direct.Put(ctx, "obj", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stall time.Duration
	}{{"503", 0}, {"stall", 10 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := faultProxy(t, srv.Endpoint, 3, tc.stall)
			core, logs := observer.New(zap.WarnLevel)
			addr := strings.Replace(srv.URL(bucket, "p"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
			st := open(t, addr, s3.Options{Logger: zap.New(core), MaxBackoff: 50 * time.Millisecond, StallTimeout: 300 * time.Millisecond})
			start := time.Now()
			if got := backendtest.MustRead(t, st, "obj"); string(got) != "hello" {
				t.Fatalf("read %q through the faults", got)
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("took %v: stalls were waited out, not timed out", time.Since(start))
			}
			retries := logs.FilterMessage("retrying S3 request").FilterField(zap.String("object", "s3://"+bucket+"/p/obj")).Len()
			if retries != 3 {
				t.Fatalf("logged %d retries naming the object, want 3; all logs: %v", retries, logs.All())
			}
		})
	}
}

// cutProxy forwards to the gateway, cutting off the bodies of the first
// cuts object GETs after cutAt bytes; between, if set, runs after each
// such answer's headers, before its body is sent.
func cutProxy(t *testing.T, target string, cuts int32, cutAt int64, between func()) *httptest.Server {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	var n atomic.Int32
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodGet && resp.StatusCode/100 == 2 && resp.Request.URL.Query().Get("list-type") == "" && n.Add(1) <= cuts {
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(io.LimitReader(resp.Body, cutAt), errReader{}), resp.Body}
			if between != nil {
				between()
			}
		}
		return nil
	}
	p := httptest.NewServer(rp)
	t.Cleanup(p.Close)
	return p
}

func TestOpenResumesCutBody(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	direct := open(t, srv.URL(bucket, "p"), s3.Options{})
	ctx := context.Background()
	content := make([]byte, 3<<20)
	rand.Read(content)
	if err := direct.Put(ctx, "obj", bytes.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
	proxy := cutProxy(t, srv.Endpoint, 3, 512<<10, nil)
	core, logs := observer.New(zap.WarnLevel)
	addr := strings.Replace(srv.URL(bucket, "p"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
	st := open(t, addr, s3.Options{Logger: zap.New(core), MaxBackoff: 10 * time.Millisecond})
	if got := backendtest.MustRead(t, st, "obj"); !bytes.Equal(got, content) {
		t.Fatalf("read %d bytes through three cuts, not the %d written", len(got), len(content))
	}
	if n := logs.FilterMessage("resuming an interrupted read").Len(); n != 3 {
		t.Fatalf("%d resumes logged, want 3", n)
	}
}

func TestOpenDoesNotResumeIntoAReplacedObject(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	direct := open(t, srv.URL(bucket, "p"), s3.Options{})
	ctx := context.Background()
	first, second := bytes.Repeat([]byte("1"), 2<<20), bytes.Repeat([]byte("2"), 2<<20)
	if err := direct.Put(ctx, "obj", bytes.NewReader(first), int64(len(first))); err != nil {
		t.Fatal(err)
	}
	replace := func() {
		if err := direct.Put(ctx, "obj", bytes.NewReader(second), int64(len(second))); err != nil {
			t.Error(err)
		}
	}
	proxy := cutProxy(t, srv.Endpoint, 1, 1<<20, replace)
	addr := strings.Replace(srv.URL(bucket, "p"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
	st := open(t, addr, s3.Options{MaxBackoff: 10 * time.Millisecond})
	rc, err := st.Open(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err == nil {
		t.Fatalf("read %d bytes of a replaced object without an error", len(got))
	}
	if !strings.Contains(err.Error(), "PreconditionFailed") {
		t.Fatalf("read failed for another reason than the changed ETag: %v", err)
	}
	if bytes.Contains(got, []byte("2")) {
		t.Fatal("the stream mixed the old and the new object")
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	proxy := faultProxy(t, srv.Endpoint, 1000, 0)
	addr := strings.Replace(srv.URL(bucket, "p"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
	core, logs := observer.New(zap.WarnLevel)
	st := open(t, addr, s3.Options{Logger: zap.New(core), MaxAttempts: 4, MaxBackoff: 10 * time.Millisecond})
	_, err := st.Stat(context.Background(), "obj")
	if err == nil || errors.Is(err, backend.ErrNotExist) {
		t.Fatalf("Stat through a failing server: err = %v", err)
	}
	if !strings.Contains(err.Error(), "s3://"+bucket+"/p/obj") {
		t.Fatalf("error does not name the object: %v", err)
	}
	if n := logs.Len(); n != 3 {
		t.Fatalf("logged %d retries for 4 attempts, want 3", n)
	}
}

func TestErrorsNameTheObjectNeverTheSecret(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	wrong := "wrong" + srv.SecretKey
	t.Setenv("AWS_SECRET_ACCESS_KEY", wrong)
	st := open(t, srv.URL(bucket, "p"), s3.Options{MaxAttempts: 1})
	_, err := st.Stat(context.Background(), "some/object")
	if err == nil {
		t.Fatal("Stat with a wrong secret succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, "s3://"+bucket+"/p/some/object") {
		t.Fatalf("error does not name the object: %v", err)
	}
	if strings.Contains(msg, wrong) || strings.Contains(msg, srv.SecretKey) {
		t.Fatalf("error holds the secret: %v", err)
	}
}

// anonymous=true sends requests unsigned, as public buckets are read.
func TestAnonymousRequestsAreUnsigned(t *testing.T) {
	srv := startS3(t)
	u, _ := url.Parse(srv.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(u)
	var signed, unsigned atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			unsigned.Add(1)
		} else {
			signed.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	addr := strings.Replace(srv.URL(srv.Bucket(t), "p"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
	ctx := context.Background()
	open(t, addr, s3.Options{}).Stat(ctx, "x")
	if signed.Load() == 0 || unsigned.Load() != 0 {
		t.Fatalf("default store: %d signed, %d unsigned requests", signed.Load(), unsigned.Load())
	}
	signed.Store(0)
	_, err := open(t, addr+"&anonymous=true", s3.Options{MaxAttempts: 1}).Stat(ctx, "x")
	if err == nil || backend.IsNotExist(err) {
		t.Fatalf("an unsigned Stat in a private bucket: err = %v, want access denied", err)
	}
	if signed.Load() != 0 || unsigned.Load() == 0 {
		t.Fatalf("anonymous store: %d signed, %d unsigned requests", signed.Load(), unsigned.Load())
	}
}

func TestOpenRefusesBadAddresses(t *testing.T) {
	for _, addr := range []string{
		"s3://bucket/p/?endpoint=http://x&regoin=eu",       // typo: unknown parameter
		"s3://AKIAEXAMPLE:hunter2@bucket/p/",               // credentials in the address
		"s3://bucket/a/../b/?region=eu-west-1",             // prefix leaving itself
		"s3:///p/?region=eu-west-1",                        // no bucket
		"s3://bucket/p/?region=x&use_path_style=sometimes", // not a boolean
	} {
		u, err := url.Parse(addr)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s3.Open(context.Background(), u, s3.Options{})
		if err == nil {
			t.Errorf("Open %s succeeded", addr)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open %s: error holds the password: %v", addr, err)
		}
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("source failed on purpose") }

// TestPutMemoryIsBounded streams 120 MiB from a reader that holds nothing
// and watches the heap: with 5 MiB parts, 2 at a time, the backend needs
// about 15 MiB of buffers, far from the object's size.
func TestPutMemoryIsBounded(t *testing.T) {
	srv := startS3(t)
	st := open(t, srv.URL(srv.Bucket(t), "m"), s3.Options{PartSize: 5 << 20, Concurrency: 2})
	const size = 120 << 20
	var err error
	grew := backendtest.HeapGrowth(func() {
		err = st.Put(context.Background(), "big", io.LimitReader(backendtest.Zeros{}, size), size)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("heap grew by at most %d MiB while putting %d MiB", grew>>20, size>>20)
	if grew > 48<<20 {
		t.Fatalf("heap grew by %d MiB while putting a %d MiB stream", grew>>20, size>>20)
	}
	if fi, err := st.Stat(context.Background(), "big"); err != nil || fi.Size != size {
		t.Fatalf("Stat = %+v, %v", fi, err)
	}
}

// A 404 is not always an absent object: Versity answers an unknown access
// key with 404 XAdminUserNotFound, and a missing bucket is NoSuchBucket.
// Each is said as what it is, for HEAD (Stat, whose answer has no body to
// carry the code), GET (Open) and List alike, and none reads as "object
// does not exist"; a missing object in a good bucket still does.
func TestMissingBucketAndBadKeyAreNotAbsentObjects(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	ctx := context.Background()
	check := func(what string, st *s3.Store, want error) {
		t.Helper()
		rc, openErr := st.Open(ctx, "fdl.json")
		if rc != nil {
			rc.Close()
		}
		_, statErr := st.Stat(ctx, "fdl.json")
		listErr := st.List(ctx, "", func(backend.FileInfo) error { return nil })
		for op, err := range map[string]error{"Open": openErr, "Stat": statErr, "List": listErr} {
			if !errors.Is(err, want) || backend.IsNotExist(err) || !backend.IsPermanent(err) {
				t.Errorf("%s: %s: %v; want %v and not %v", what, op, err, want, backend.ErrNotExist)
			}
		}
		t.Logf("%s: %v", what, openErr)
	}
	check("missing bucket", open(t, srv.URL("no-such-"+bucket, "p"), s3.Options{MaxAttempts: 1}), backend.ErrNoBucket)

	good := open(t, srv.URL(bucket, "p"), s3.Options{MaxAttempts: 1})
	if _, err := good.Stat(ctx, "fdl.json"); !backend.IsNotExist(err) || strings.Contains(err.Error(), "bucket") {
		t.Errorf("Stat of a missing object: %v", err)
	}
	if _, err := good.Open(ctx, "fdl.json"); !backend.IsNotExist(err) {
		t.Errorf("Open of a missing object: %v", err)
	}

	t.Setenv("AWS_ACCESS_KEY_ID", "nobody"+srv.AccessKey)
	check("unknown access key", open(t, srv.URL(bucket, "p"), s3.Options{MaxAttempts: 1}), backend.ErrAccessDenied)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong"+srv.SecretKey)
	check("wrong secret", open(t, srv.URL(bucket, "p"), s3.Options{MaxAttempts: 1}), backend.ErrAccessDenied)
}

// A Put that carries the SHA-256 its caller verified stores those bytes
// or nothing: the gateway checks the body against the sum, and a body
// that differs leaves the object as it was.
func TestPutWithContentSHA256IsCheckedByTheStore(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	st := open(t, srv.URL(bucket, "m"), s3.Options{})
	ctx := context.Background()
	body := []byte("catalog bytes as verified")
	sum := sha256.Sum256(body)
	hexSum := hex.EncodeToString(sum[:])
	if err := st.Put(backend.WithContentSHA256(ctx, hexSum), "cat", bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatalf("Put with the body's own sum: %v", err)
	}
	out, err := srv.Client().GetObject(ctx, &awss3.GetObjectInput{
		Bucket: aws.String(bucket), Key: aws.String("m/cat"), ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		t.Fatal(err)
	}
	out.Body.Close()
	if got, want := aws.ToString(out.ChecksumSHA256), base64.StdEncoding.EncodeToString(sum[:]); got != want {
		t.Fatalf("stored object's SHA-256 checksum = %q, want %q (the sum was not sent)", got, want)
	}

	other := []byte("other bytes, same length!")
	if len(other) != len(body) {
		t.Fatal("test bodies must be of one length")
	}
	if err := st.Put(backend.WithContentSHA256(ctx, hexSum), "cat", bytes.NewReader(other), int64(len(other))); err == nil {
		t.Fatal("Put of bytes other than the sum's succeeded")
	}
	if got := backendtest.MustRead(t, st, "cat"); !bytes.Equal(got, body) {
		t.Fatalf("after the refused Put the object holds %q, want %q", got, body)
	}
	if err := st.Put(backend.WithContentSHA256(ctx, hexSum), "absent", bytes.NewReader(other), int64(len(other))); err == nil {
		t.Fatal("Put of bytes other than the sum's succeeded")
	}
	if _, err := st.Stat(ctx, "absent"); !backend.IsNotExist(err) {
		t.Fatalf("a refused Put left an object: Stat err = %v", err)
	}
}

// A read under backend.WithCheckedRead leaves the transfer's check to the
// caller: through a proxy that flips a byte of every object body, a plain
// read fails on the SDK's checksum of the response, and a checked read
// returns the bytes as they came (the caller's digest then refuses them).
func TestCheckedReadLeavesTheTransferCheckToTheCaller(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	direct := open(t, srv.URL(bucket, "p"), s3.Options{})
	ctx := context.Background()
	content := bytes.Repeat([]byte("catalog "), 4096)
	if err := direct.Put(ctx, "cat", bytes.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
	proxy := testserver.NewFaultProxy(t, srv.Endpoint)
	proxy.CutAfter = int64(len(content) / 2)
	proxy.FailAll(testserver.FlipByte)
	addr := strings.Replace(srv.URL(bucket, "p"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
	st := open(t, addr, s3.Options{MaxAttempts: 1})

	read := func(ctx context.Context) ([]byte, error) {
		rc, err := st.Open(ctx, "cat")
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	if got, err := read(ctx); err == nil || !strings.Contains(err.Error(), "checksum did not match") {
		t.Fatalf("a plain read of a damaged body: %d bytes (equal to what was written: %v), error %v; want the SDK's checksum error", len(got), bytes.Equal(got, content), err)
	}
	got, err := read(backend.WithCheckedRead(ctx))
	if err != nil {
		t.Fatalf("checked read: %v", err)
	}
	if len(got) != len(content) || bytes.Equal(got, content) {
		t.Fatalf("checked read returned %d bytes, equal to what was written: %v; want the damaged body", len(got), bytes.Equal(got, content))
	}
}

// A 404 to HEAD is asked about with a one-key listing (is it the bucket,
// or the key, that is unknown?) only until the bucket has answered: after
// a listing, an object read or a HEAD that found one, an absent object is
// absent with no listing more.
func TestAbsentObjectAfterAnAnswerAsksNoListing(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	u, _ := url.Parse(srv.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(u)
	var lists atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("list-type") == "2" {
			lists.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	addr := strings.Replace(srv.URL(bucket, "p"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
	ctx := context.Background()
	if err := open(t, addr, s3.Options{}).Put(ctx, "there", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		first string
		do    func(st *s3.Store) error
		want  int32 // listings made in all
	}{
		{"nothing", func(*s3.Store) error { return nil }, 1},
		{"a listing", func(st *s3.Store) error { return st.List(ctx, "", func(backend.FileInfo) error { return nil }) }, 1},
		{"a read", func(st *s3.Store) error {
			rc, err := st.Open(ctx, "there")
			if err == nil {
				rc.Close()
			}
			return err
		}, 0},
		{"a HEAD that found the object", func(st *s3.Store) error { _, err := st.Stat(ctx, "there"); return err }, 0},
	} {
		st := open(t, addr, s3.Options{})
		if err := c.do(st); err != nil {
			t.Fatal(err)
		}
		lists.Store(0)
		if c.first == "a listing" {
			lists.Store(1) // the listing itself
		}
		if _, err := st.Stat(ctx, "absent"); !backend.IsNotExist(err) {
			t.Fatalf("after %s: Stat of an absent object: %v", c.first, err)
		}
		if got := lists.Load(); got != c.want {
			t.Errorf("after %s: %d listings in all, want %d", c.first, got, c.want)
		}
	}
}
