// Package s3 is the backend for Amazon S3 and S3-compatible stores (R2,
// MinIO, Versity S3 Gateway…), through aws-sdk-go-v2.
//
// An address is s3://BUCKET/PREFIX/?endpoint=URL&region=REGION&use_path_style=true;
// the query parameters are optional and follow the Go CDK URL convention,
// which also gives anonymous=true for public buckets read unsigned.
// Credentials and, unless the address names one, the region come from the
// SDK's standard chain (environment, shared config, IMDS, web identity);
// nothing here reads a secret itself.
//
// Every request goes through the SDK's standard retryer (backoff with
// jitter on 5xx, 429, throttling, connection resets and timeouts), bounded
// in attempts and backoff, and each retry is logged. A connection that
// delivers nothing for StallTimeout fails, so a stalled server costs a
// retry, not a hung sync.
//
// Writes are atomic as S3 makes them: an object is published whole by
// PutObject, or by CompleteMultipartUpload above PartSize, never partly.
// Data is read into part-sized buffers before it is sent, so memory stays
// bounded (PartSize × Concurrency per store, across its concurrent Puts,
// counting the parts being read) and each request can be retried. An
// object of one part given as an io.ReaderAt (a local file, bytes in
// memory) is sent from where it is, with no buffer: it can be read again
// for a retry as it is.
package s3

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
)

// Options tune the backend; the zero value is the defaults.
type Options struct {
	Logger *zap.Logger
	// MaxAttempts bounds the tries of one request, the first included
	// (default 8).
	MaxAttempts int
	// MaxBackoff caps the wait between two tries (default 20 s).
	MaxBackoff time.Duration
	// StallTimeout fails a connection that delivers no byte for this long
	// (default 2 min: long enough for a server assembling a large
	// multipart upload).
	StallTimeout time.Duration
	// PartSize is both the multipart threshold and the part size (default
	// 8 MiB, as the AWS CLI). It grows for objects that would need more
	// than 10000 parts.
	PartSize int64
	// Concurrency is the number of parts the store holds in memory at
	// once, read or being uploaded, across all its Puts (default 2: the
	// engine already copies several files at once, and each part holds
	// PartSize bytes).
	Concurrency int
	// RootCAs are the roots an https endpoint's chain must end in (the
	// system's and --ca-file's); nil means the system's. AWS_CA_BUNDLE,
	// when set, is added to them.
	RootCAs *x509.CertPool
}

const (
	maxParts = 10000
	// maxCopySize is the largest object a single CopyObject may copy.
	maxCopySize = 5 << 30
)

// Store is a bucket prefix used as a store.
type Store struct {
	client    *awss3.Client
	bucket    string
	prefix    string // "" or ending in "/"
	endpoint  string // as given in the address; "" for AWS
	location  string
	log       *zap.Logger
	opts      Options
	checksums bool // ask for CRC32 checksums on multipart uploads
	parts     *partPool
	// bucketFound is set once the bucket answered a request with an
	// object or a listing: a later 404 to HEAD is an absent object, not a
	// missing bucket or an unknown key (see headNotFound).
	bucketFound atomic.Bool
}

// partPool holds the part buffers of every Put of a store: at most
// cap(tokens) at once however many Puts run (the engine runs several), and
// reused, so that a large upload does not leave a part-sized buffer of
// garbage behind each part (the garbage alone doubled the heap).
type partPool struct {
	size   int64
	tokens chan struct{}
	free   chan []byte
}

func newPartPool(size int64, n int) *partPool {
	return &partPool{size: size, tokens: make(chan struct{}, n), free: make(chan []byte, n)}
}

// get returns a buffer of n bytes once the store holds fewer parts than
// its limit; release gives it back.
func (p *partPool) get(ctx context.Context, n int64) ([]byte, error) {
	select {
	case p.tokens <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if n > p.size {
		return make([]byte, n), nil // parts grow for objects of more than maxParts parts
	}
	select {
	case b := <-p.free:
		return b[:n], nil
	default:
		return make([]byte, n, p.size), nil
	}
}

func (p *partPool) release(b []byte) {
	if int64(cap(b)) == p.size {
		select {
		case p.free <- b[:0]:
		default:
		}
	}
	<-p.tokens
}

// Open returns the store at u, an s3:// URL. It sends no request: a wrong
// bucket or missing credentials show on first use.
func Open(ctx context.Context, u *url.URL, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 8
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 20 * time.Second
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = 2 * time.Minute
	}
	if opts.PartSize <= 0 {
		opts.PartSize = 8 << 20
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 2
	}

	if u.Scheme != "s3" || u.Host == "" {
		return nil, fmt.Errorf("%s: not an s3://BUCKET/PREFIX/ address", redacted(u))
	}
	if u.User != nil {
		return nil, fmt.Errorf("%s: credentials do not belong in the address; they come from the AWS environment or shared config", redacted(u))
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	if prefix != "" {
		if !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		if err := backend.CheckPrefix(prefix); err != nil {
			return nil, fmt.Errorf("%s: prefix: %w", redacted(u), err)
		}
	}
	s := &Store{bucket: u.Host, prefix: prefix, opts: opts, parts: newPartPool(opts.PartSize, opts.Concurrency)}
	s.location = "s3://" + s.bucket + "/" + s.prefix

	var region string
	var pathStyle, anonymous bool
	for key, values := range u.Query() {
		value := values[len(values)-1]
		switch key {
		case "endpoint":
			s.endpoint = value
		case "region":
			region = value
		case "use_path_style":
			b, err := strconv.ParseBool(value)
			if err != nil {
				return nil, fmt.Errorf("%s: use_path_style=%q is not a boolean", s.location, value)
			}
			pathStyle = b
		case "anonymous":
			// Public buckets (open data) are read unsigned; without
			// this the chain would look for credentials, IMDS included.
			b, err := strconv.ParseBool(value)
			if err != nil {
				return nil, fmt.Errorf("%s: anonymous=%q is not a boolean", s.location, value)
			}
			anonymous = b
		case "awssdk":
			// Go CDK's choice of SDK version; this is always v2.
		default:
			return nil, fmt.Errorf("%s: unknown query parameter %q (known: endpoint, region, use_path_style, anonymous)", s.location, key)
		}
	}
	s.log = opts.Logger.With(zap.String("store", s.location))

	// The SDK's own buildable client, not an http.Client of ours: the
	// standard chain adds AWS_CA_BUNDLE to it, and refuses any other type.
	httpClient := awshttp.NewBuildableClient().WithReadTimeout(opts.StallTimeout)
	if opts.RootCAs != nil {
		// The chain appends AWS_CA_BUNDLE to these roots when it finds
		// them set (and to an empty pool, replacing the system's, when
		// not); each transport gets its own copy to append to.
		httpClient = httpClient.WithTransportOptions(func(tr *http.Transport) {
			if tr.TLSClientConfig == nil {
				tr.TLSClientConfig = &tls.Config{}
			}
			tr.TLSClientConfig.RootCAs = opts.RootCAs.Clone()
		})
	}
	loadOpts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = opts.MaxAttempts
				o.MaxBackoff = opts.MaxBackoff
				// The client-side retry quota would fail requests fast
				// after a burst of faults; the attempt bound is enough.
				o.RateLimiter = ratelimit.None
				// AWS answers 409 ConditionalRequestConflict when two
				// conditional writes race; trying again gets the real
				// answer (412 for the loser).
				o.Retryables = append(append([]retry.IsErrorRetryable{}, o.Retryables...),
					retry.RetryableErrorCode{Codes: map[string]struct{}{"ConditionalRequestConflict": {}}})
			})
		}),
	}
	if region != "" {
		loadOpts = append(loadOpts, config.WithRegion(region))
	}
	if anonymous {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("%s: loading AWS configuration: %w", s.location, err)
	}
	if cfg.Region == "" {
		if s.endpoint == "" {
			return nil, fmt.Errorf("%s: no region: add ?region=… to the address or set AWS_REGION", s.location)
		}
		// S3-compatible stores mostly ignore the region but SigV4 needs one.
		cfg.Region = "us-east-1"
	}
	s.checksums = cfg.RequestChecksumCalculation != aws.RequestChecksumCalculationWhenRequired
	s.client = awss3.NewFromConfig(cfg, func(o *awss3.Options) {
		if s.endpoint != "" {
			o.BaseEndpoint = aws.String(s.endpoint)
		}
		o.UsePathStyle = pathStyle
	})
	return s, nil
}

// redacted is u as messages may show it (redact.URL).
func redacted(u *url.URL) string { return redact.URL(u.String()) }

func (s *Store) Location() string { return s.location }

func (s *Store) Properties() backend.Properties {
	return backend.Properties{CanList: true, CanWrite: true, AtomicCreate: true, ConditionalWrite: true,
		PageList: !s.directoryBucket()}
}

// directoryBucket says whether the bucket is an S3 Express directory
// bucket, which neither lists in name order nor takes StartAfter.
func (s *Store) directoryBucket() bool { return strings.HasSuffix(s.bucket, "--x-s3") }

func (s *Store) key(name string) string { return s.prefix + name }

// addr is an object's address for messages and logs.
func (s *Store) addr(name string) string { return "s3://" + s.bucket + "/" + s.key(name) }

// err wraps an SDK error with the object's address, mapped by the
// service's error code to the backend's errors: an absent object to
// backend.ErrNotExist, a missing bucket to backend.ErrNoBucket, refused
// credentials to backend.ErrAccessDenied, a failed If-None-Match to
// backend.ErrExist. The code is said too.
func (s *Store) err(op, name string, err error) error {
	if class := classify(err); class != nil {
		return fmt.Errorf("%s: %s: %w (%s)", s.addr(name), op, class, says(err))
	}
	return fmt.Errorf("%s: %s: %w", s.addr(name), op, err)
}

// accessCodes are the S3 error codes that refuse the credentials or their
// rights. Versity S3 Gateway answers an unknown access key with 404
// XAdminUserNotFound, and its other account errors start with XAdmin too.
var accessCodes = map[string]bool{
	"AccessDenied": true, "InvalidAccessKeyId": true, "SignatureDoesNotMatch": true,
	"InvalidToken": true, "ExpiredToken": true, "TokenRefreshRequired": true,
	"InvalidSecurity": true, "AccountProblem": true, "AllAccessDisabled": true,
	"Forbidden": true,
}

// classify maps an S3 error to the backend error it means, by the
// service's error code first and the HTTP status second; nil when it
// means none of them. A 404 without a code the service explains (HEAD
// answers have no body: "NotFound") reads as an absent object here; Stat
// asks the bucket what such a 404 means (see Store.headNotFound).
func classify(err error) error {
	if err == nil {
		return nil
	}
	code := ""
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	status := 0
	var respErr *awshttp.ResponseError
	if errors.As(err, &respErr) {
		status = respErr.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchBucket":
		return backend.ErrNoBucket
	case accessCodes[code] || strings.HasPrefix(code, "XAdmin") || status == http.StatusForbidden:
		return backend.ErrAccessDenied
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return backend.ErrExist
	case code == "NoSuchKey" || status == http.StatusNotFound:
		return backend.ErrNotExist
	}
	return nil
}

// says is what the service said, for a message: its code and message, or
// the HTTP status when it sent no code.
func says(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() != "" {
		if m := apiErr.ErrorMessage(); m != "" && m != apiErr.ErrorCode() {
			return "S3 error " + apiErr.ErrorCode() + ": " + m
		}
		return "S3 error " + apiErr.ErrorCode()
	}
	var respErr *awshttp.ResponseError
	if errors.As(err, &respErr) {
		return fmt.Sprintf("HTTP %d", respErr.HTTPStatusCode())
	}
	return err.Error()
}

func isNotFound(err error) bool { return errors.Is(classify(err), backend.ErrNotExist) }

// retryLogger logs every retry the SDK's retryer decides on, naming the
// object.
type retryLogger struct {
	aws.RetryerV2
	log  *zap.Logger
	addr string
}

func (r retryLogger) RetryDelay(attempt int, err error) (time.Duration, error) {
	d, derr := r.RetryerV2.RetryDelay(attempt, err)
	if derr == nil {
		r.log.Warn("retrying S3 request", zap.String("object", r.addr),
			zap.Int("attempt", attempt), zap.Duration("after", d), zap.Error(err))
	}
	return d, derr
}

// logRetries is a per-request option that logs retries under the
// object's address.
func (s *Store) logRetries(name string) func(*awss3.Options) {
	return func(o *awss3.Options) {
		if r, ok := o.Retryer.(aws.RetryerV2); ok {
			o.Retryer = retryLogger{RetryerV2: r, log: s.log, addr: s.addr(name)}
		}
	}
}

// Open streams the object through a backend.ResumingReader: a body cut
// off mid-stream (a reset, a stall) is resumed with a ranged GET from where
// it stopped, If-Match the first answer's ETag, so the stream never mixes
// two versions of the object; with MaxAttempts-1 resumptions per Open at
// most.
func (s *Store) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, _, err := s.OpenVersion(ctx, name)
	return rc, err
}

// OpenVersion is Open that also gives the object's ETag as its Version,
// the token PutIfMatch and RemoveIfMatch compare.
func (s *Store) OpenVersion(ctx context.Context, name string) (io.ReadCloser, backend.FileInfo, error) {
	if err := backend.CheckName(name); err != nil {
		return nil, backend.FileInfo{}, err
	}
	var etag string
	var size int64
	optFns := []func(*awss3.Options){s.logRetries(name)}
	checked := backend.CheckedRead(ctx)
	if checked {
		optFns = append(optFns, func(o *awss3.Options) {
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		})
	}
	open := func(ctx context.Context, off int64) (backend.Response, error) {
		in := &awss3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.key(name))}
		if off > 0 {
			in.Range = aws.String("bytes=" + strconv.FormatInt(off, 10) + "-")
			in.IfMatch = aws.String(etag)
		}
		out, err := s.client.GetObject(ctx, in, optFns...)
		if err != nil {
			if off > 0 {
				// A 412 here means the object was replaced under us.
				return backend.Response{}, fmt.Errorf("resuming at byte %d: %w", off, err)
			}
			return backend.Response{}, s.err("open", name, err)
		}
		s.bucketFound.Store(true)
		if off == 0 {
			etag, size = aws.ToString(out.ETag), aws.ToInt64(out.ContentLength)
			resp := backend.Response{Body: out.Body, Size: size, Pinned: etag != ""}
			if !checked {
				// The caller of a checked read checks every byte itself.
				resp.Digest = objectDigest(out)
			}
			return resp, nil
		}
		if want := fmt.Sprintf("bytes %d-%d/%d", off, size-1, size); aws.ToString(out.ContentRange) != want {
			out.Body.Close()
			return backend.Response{}, fmt.Errorf("resuming at byte %d: got Content-Range %q", off, aws.ToString(out.ContentRange))
		}
		return backend.Response{Body: out.Body}, nil
	}
	rr, err := backend.OpenResuming(ctx, s.addr(name), open, backend.ResumeOptions{
		MaxResumes: s.opts.MaxAttempts - 1,
		WaitMin:    resumeWaitMin,
		WaitMax:    s.opts.MaxBackoff,
		OnResume: func(off int64, resume int, cause error) {
			s.log.Warn("resuming an interrupted read", zap.String("object", s.addr(name)),
				zap.Int64("offset", off), zap.Int("resume", resume), zap.Error(cause))
		},
	})
	if err != nil {
		return nil, backend.FileInfo{}, err // not a typed nil in the interface
	}
	return rr, backend.FileInfo{Name: name, Size: size, Version: etag}, nil
}

// resumeWaitMin is the first wait before resuming a cut-off body; it
// doubles with each resumption, up to MaxBackoff.
const resumeWaitMin = 100 * time.Millisecond

func (s *Store) Stat(ctx context.Context, name string) (backend.FileInfo, error) {
	if err := backend.CheckName(name); err != nil {
		return backend.FileInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &awss3.HeadObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(name)),
	}, s.logRetries(name))
	if err != nil {
		if isNotFound(err) {
			return backend.FileInfo{}, s.headNotFound(ctx, "stat", name, err)
		}
		return backend.FileInfo{}, s.err("stat", name, err)
	}
	s.bucketFound.Store(true)
	return backend.FileInfo{Name: name, Size: aws.ToInt64(out.ContentLength), Version: aws.ToString(out.ETag)}, nil
}

// headNotFound says what a 404 to HEAD means. A HEAD answer has no body,
// so its error code is only "NotFound" whether the object, the bucket or
// (on Versity) the access key is unknown. Until the bucket has answered
// a request with an object or a listing, a one-key listing of the bucket
// asks: its answer has a body and so a code. A listing refused for want
// of rights (403 AccessDenied) tells nothing: the 404 then stays an
// absent object. After an answer it is not asked again: on Versity's
// posix store a listing from a name in a folder of 300,000 files took
// 0.33 s, most of a run that mirrors one new version.
func (s *Store) headNotFound(ctx context.Context, op, name string, headErr error) error {
	if !s.bucketFound.Load() {
		_, err := s.client.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{
			Bucket:  aws.String(s.bucket),
			Prefix:  aws.String(s.key(name)),
			MaxKeys: aws.Int32(1),
		}, s.logRetries(name))
		switch class := classify(err); {
		case err == nil:
			s.bucketFound.Store(true)
		case class == backend.ErrNoBucket || (class == backend.ErrAccessDenied && !isAccessDeniedOnly(err)):
			return fmt.Errorf("%s: %s: %w (%s)", s.addr(name), op, class, says(err))
		}
	}
	return s.err(op, name, headErr)
}

// isAccessDeniedOnly is a 403 AccessDenied: the credentials are good but
// may not do this one thing (list), which says nothing of the bucket.
func isAccessDeniedOnly(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "AccessDenied"
}

// List lists with ListObjectsV2, a thousand objects per request. Keys that
// are not valid names (folder markers ending in "/", "a//b" written by
// other tools) cannot be opened through a store and are skipped, as are
// the store's own files under backend.ReservedPrefix.
func (s *Store) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	if err := backend.CheckPrefix(prefix); err != nil {
		return err
	}
	bounds, expect := s.usableBounds(prefix, backend.ListBounds(ctx))
	if len(bounds) == 0 {
		return s.listRange(ctx, prefix, "", "", 0, false, fn)
	}
	// The parts at once, each in order; what they found is handed to fn
	// after, part by part, from one goroutine as a plain listing would.
	found := make([][]backend.FileInfo, len(bounds)+1)
	errs := make([]error, len(found))
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range found {
		after, last, want := "", "", 0
		if i > 0 {
			after = bounds[i-1]
		}
		if i < len(bounds) {
			last, want = bounds[i], expect[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.listRange(pctx, prefix, after, last, want, true, func(fi backend.FileInfo) error {
				found[i] = append(found[i], fi)
				return nil
			})
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if errors.Is(err, errUnordered) {
			// A store that does not list in name order (a directory
			// bucket, a gateway of its own kind): the plain way.
			s.log.Debug("listing not in name order; listing again in one part", zap.String("prefix", s.addr(prefix)))
			return s.listRange(ctx, prefix, "", "", 0, false, fn)
		}
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, part := range found {
		for _, fi := range part {
			if err := fn(fi); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxListBounds bounds the parts of one listing (one more than bounds).
const maxListBounds = 15

// usableBounds keeps the bounds under prefix, in strictly increasing
// order, and how many names each kept part is expected to hold (0 where
// not known): a part of bounds left out is counted in the next kept. None
// on a directory bucket (S3 Express), which neither lists in name order
// nor takes StartAfter.
func (s *Store) usableBounds(prefix string, split backend.ListSplit) (bounds []string, expect []int) {
	if s.directoryBucket() {
		return nil, nil
	}
	known := len(split.Expect) == len(split.Bounds)
	carried := 0
	for i, b := range split.Bounds {
		if known {
			carried += max(split.Expect[i], 0)
		}
		if strings.HasPrefix(b, prefix) && b != prefix && (len(bounds) == 0 || b > bounds[len(bounds)-1]) {
			bounds = append(bounds, b)
			expect = append(expect, carried)
			carried = 0
		}
		if len(bounds) == maxListBounds {
			break
		}
	}
	return bounds, expect
}

// errUnordered is a listing whose keys did not come in increasing order.
var errUnordered = errors.New("listing is not in name order")

// listRange lists the names under prefix after after (from the start
// when empty) up to and including last (to the end when empty); with
// inOrder, it also checks that they come in increasing order, as a part
// of a split listing relies on. want, where more than 0, is how many
// names the caller expects up to last: the last page asks for no more
// than are still expected (backend.ListSplit's Expect).
func (s *Store) listRange(ctx context.Context, prefix, after, last string, want int, inOrder bool, fn func(backend.FileInfo) error) error {
	in := &awss3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket),
		Prefix: aws.String(s.key(prefix)),
	}
	prev := ""
	if after != "" {
		prev = s.key(after)
		in.StartAfter = aws.String(prev)
	}
	lastKey := ""
	if last != "" {
		lastKey = s.key(last)
	}
	seen := 0 // keys answered so far
	for {
		in.MaxKeys = nil
		if left := want - seen; lastKey != "" && left > 0 && left < listPageKeys {
			in.MaxKeys = aws.Int32(int32(left))
		}
		page, err := s.client.ListObjectsV2(ctx, in, s.logRetries(prefix))
		if err != nil {
			if class := classify(err); class == backend.ErrNoBucket || class == backend.ErrAccessDenied {
				return fmt.Errorf("%s: listing: %w (%s)", s.addr(prefix), class, says(err))
			}
			return fmt.Errorf("%s: listing: %w", s.addr(prefix), err)
		}
		s.bucketFound.Store(true)
		for _, obj := range page.Contents {
			key := aws.ToString(obj.Key)
			if inOrder && prev != "" && key <= prev {
				return errUnordered
			}
			prev = key
			if lastKey != "" && key > lastKey {
				return nil
			}
			name := strings.TrimPrefix(key, s.prefix)
			if strings.HasPrefix(name, backend.ReservedPrefix) || backend.CheckName(name) != nil {
				continue
			}
			fi := backend.FileInfo{Name: name, Size: aws.ToInt64(obj.Size), MD5: etagMD5(aws.ToString(obj.ETag)), Version: aws.ToString(obj.ETag)}
			if err := fn(fi); err != nil {
				return err
			}
		}
		seen += len(page.Contents)
		// Past the last name wanted there is nothing to ask for: no page
		// more to find the next name beyond it.
		if lastKey != "" && prev == lastKey {
			return nil
		}
		next := aws.ToString(page.NextContinuationToken)
		if !aws.ToBool(page.IsTruncated) || next == "" || next == aws.ToString(in.ContinuationToken) {
			// The end, or a store that would hand back the same page
			// again (the SDK's paginator stops there too).
			return nil
		}
		in.ContinuationToken = aws.String(next)
	}
}

// listPageKeys is how many keys a ListPage request asks for (S3's most).
const listPageKeys = 1000

// ListPage lists one page from from on with ListObjectsV2. StartAfter
// starts after a key, and from must be listed: it starts after from
// without its last character (a UTF-8 key, since S3 takes no other), and
// the few keys between that and from are left out. Should a page hold
// none at or after from but those, or only keys List skips, the next is
// asked for, after the last key seen: each request starts past the last.
func (s *Store) ListPage(ctx context.Context, prefix, from string) ([]backend.FileInfo, bool, error) {
	if err := backend.CheckPrefix(prefix); err != nil {
		return nil, false, err
	}
	if s.directoryBucket() {
		return nil, false, fmt.Errorf("%s: listing a page: a directory bucket lists in no order: %w", s.addr(prefix), backend.ErrNotSupported)
	}
	in := &awss3.ListObjectsV2Input{
		Bucket:  aws.String(s.bucket),
		Prefix:  aws.String(s.key(prefix)),
		MaxKeys: aws.Int32(listPageKeys),
	}
	fromKey, after := "", ""
	if from != "" {
		fromKey = s.key(from)
		_, n := utf8.DecodeLastRuneInString(fromKey)
		after = fromKey[:len(fromKey)-n]
	}
	var page []backend.FileInfo
	for {
		if after != "" {
			in.StartAfter = aws.String(after)
		}
		out, err := s.client.ListObjectsV2(ctx, in, s.logRetries(prefix))
		if err != nil {
			if class := classify(err); class == backend.ErrNoBucket || class == backend.ErrAccessDenied {
				return nil, false, fmt.Errorf("%s: listing: %w (%s)", s.addr(prefix), class, says(err))
			}
			return nil, false, fmt.Errorf("%s: listing: %w", s.addr(prefix), err)
		}
		s.bucketFound.Store(true)
		last := after
		for _, obj := range out.Contents {
			key := aws.ToString(obj.Key)
			if key <= last {
				return nil, false, fmt.Errorf("%s: listing a page after %q: %q came after %q: %w", s.addr(prefix), after, key, last, errUnordered)
			}
			last = key
			name := strings.TrimPrefix(key, s.prefix)
			if key < fromKey || strings.HasPrefix(name, backend.ReservedPrefix) || backend.CheckName(name) != nil {
				continue
			}
			page = append(page, backend.FileInfo{Name: name, Size: aws.ToInt64(obj.Size), MD5: etagMD5(aws.ToString(obj.ETag)), Version: aws.ToString(obj.ETag)})
		}
		more := aws.ToBool(out.IsTruncated)
		if len(page) > 0 || !more {
			return page, more, nil
		}
		if last == after {
			return nil, false, fmt.Errorf("%s: listing a page after %q: an empty page said more keys follow", s.addr(prefix), after)
		}
		after = last
	}
}

func (s *Store) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	return s.put(ctx, name, r, size, condition{})
}

// Create is Put with If-None-Match: *, which S3 evaluates atomically when
// it publishes the object; a 412 answer means another writer was first.
func (s *Store) Create(ctx context.Context, name string, r io.Reader, size int64) error {
	return s.put(ctx, name, r, size, condition{create: true})
}

// PutIfMatch is Put with If-Match: version (an ETag), which S3 evaluates
// atomically when it publishes the object, as it does If-None-Match; a
// 412, or a 404 for an object removed meanwhile, is
// backend.ErrPreconditionFailed.
func (s *Store) PutIfMatch(ctx context.Context, name string, r io.Reader, size int64, version string) error {
	if version == "" {
		return fmt.Errorf("%s: put if match: no version given", s.addr(name))
	}
	return s.put(ctx, name, r, size, condition{ifMatch: version})
}

// condition is what a write asks of the object it replaces.
type condition struct {
	create  bool   // If-None-Match: *
	ifMatch string // If-Match: this ETag
}

func (c condition) op() string {
	switch {
	case c.create:
		return "create"
	case c.ifMatch != "":
		return "put if match"
	}
	return "put"
}

// writeErr is err for the answer to a write: a refused condition is
// backend.ErrExist for a Create and backend.ErrPreconditionFailed for an
// If-Match, and no not-found is ever an absent object: a write that
// meets 404 (NoSuchUpload: its multipart upload was aborted under it, by
// a lifecycle rule or another run; a NoSuchKey from a gateway) is a
// failed write, tried again by the caller, never "missing upstream".
func (s *Store) writeErr(c condition, name string, err error) error {
	op := c.op()
	class := classify(err)
	switch {
	case c.ifMatch != "" && (class == backend.ErrExist || class == backend.ErrNotExist):
		return fmt.Errorf("%s: %s %s: %w (%s)", s.addr(name), op, c.ifMatch, backend.ErrPreconditionFailed, says(err))
	case class == backend.ErrNotExist:
		return fmt.Errorf("%s: %s: the write failed, the store found no object or upload to write to (%s); it may be tried again", s.addr(name), op, says(err))
	}
	return s.err(op, name, err)
}

func (s *Store) put(ctx context.Context, name string, r io.Reader, size int64, cond condition) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	op := cond.op()
	if size < 0 {
		return fmt.Errorf("%s: %s: negative size %d", s.addr(name), op, size)
	}
	partSize := int64(0) // a single PutObject
	if size > s.opts.PartSize {
		partSize = max(s.opts.PartSize, (size+maxParts-1)/maxParts)
	}
	if old := backend.NewToken(ctx); old != "" {
		var err error
		if partSize, err = otherForm(old, size, partSize); err != nil {
			return fmt.Errorf("%s: %s: %w", s.addr(name), op, err)
		}
	}
	if partSize > 0 {
		return s.putMultipart(ctx, name, r, size, partSize, cond)
	}
	if ra, ok := r.(io.ReaderAt); ok {
		if err := endsAt(ra, size); err != nil {
			return fmt.Errorf("%s: %s: %w", s.addr(name), op, err)
		}
		return s.putObject(ctx, name, io.NewSectionReader(ra, 0, size), size, cond)
	}
	held, err := s.readBody(ctx, r, size)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", s.addr(name), op, err)
	}
	defer held.release()
	return s.putObject(ctx, name, bytes.NewReader(held.buf), size, cond)
}

// endsAt checks that ra holds exactly size bytes, as readPart does for a
// stream: an object is never sent cut short or cut off.
func endsAt(ra io.ReaderAt, size int64) error {
	var one [1]byte
	if size > 0 {
		if n, err := ra.ReadAt(one[:], size-1); n != 1 {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("reading source: fewer than the expected %d bytes", size)
			}
			return fmt.Errorf("reading source at byte %d: %w", size-1, err)
		}
	}
	n, err := ra.ReadAt(one[:], size)
	if n > 0 {
		return fmt.Errorf("reading source: more than the expected %d bytes", size)
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("reading source at byte %d: %w", size, err)
}

// heldBody is an object's bytes read into memory for a single PutObject.
type heldBody struct {
	buf     []byte
	release func()
}

// readBody reads an object of one part into memory. Objects of more than
// a quarter part count against the store's parts; smaller ones are held
// as they are, a few MiB per concurrent Put.
func (s *Store) readBody(ctx context.Context, r io.Reader, size int64) (*heldBody, error) {
	h := &heldBody{release: func() {}}
	if size > s.opts.PartSize/4 {
		b, err := s.parts.get(ctx, size)
		if err != nil {
			return nil, err
		}
		h.buf, h.release = b, func() { s.parts.release(b) }
	} else {
		h.buf = make([]byte, size)
	}
	if err := readPart(r, h.buf, 0, size); err != nil {
		h.release()
		return nil, err
	}
	return h, nil
}

// putObject sends an object of one part with PutObject.
func (s *Store) putObject(ctx context.Context, name string, body io.ReadSeeker, size int64, cond condition) error {
	in := &awss3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(s.key(name)),
		Body:          body,
		ContentLength: aws.Int64(size),
	}
	if cond.create {
		in.IfNoneMatch = aws.String("*")
	}
	if cond.ifMatch != "" {
		in.IfMatch = aws.String(cond.ifMatch)
	}
	optFns := []func(*awss3.Options){s.logRetries(name)}
	if sum := backend.ContentSHA256(ctx); sum != nil {
		// The store checks the object against the sum the caller
		// verified, and the SDK signs with it rather than hashing the
		// body again (it would, twice, on an http:// endpoint).
		in.ChecksumSHA256 = aws.String(base64.StdEncoding.EncodeToString(sum))
		optFns = append(optFns, signWithPayloadHash(hex.EncodeToString(sum)))
	}
	if _, err := s.client.PutObject(ctx, in, optFns...); err != nil {
		return s.writeErr(cond, name, err)
	}
	return nil
}

// signWithPayloadHash is a per-request option that gives SigV4 the body's
// SHA-256 (hex), known beforehand, so the SDK does not read the body to
// compute it.
func signWithPayloadHash(hexSum string) func(*awss3.Options) {
	return func(o *awss3.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("fdlPayloadHash",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					return next.HandleFinalize(v4.SetPayloadHash(ctx, hexSum), in)
				}), middleware.Before)
		})
	}
}

// readPart fills buf, the part of an object of size bytes that starts at
// off, from r. The last part also checks that r ends there: a reader
// yielding more or fewer than size bytes fails the Put before anything is
// published.
func readPart(r io.Reader, buf []byte, off, size int64) error {
	if n, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("reading source: got %d bytes, want %d", off+int64(n), size)
		}
		return fmt.Errorf("reading source at byte %d: %w", off+int64(n), err)
	}
	if off+int64(len(buf)) < size {
		return nil
	}
	var one [1]byte
	for {
		n, err := r.Read(one[:])
		if n > 0 {
			return fmt.Errorf("reading source: more than the expected %d bytes", size)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading source at byte %d: %w", size, err)
		}
	}
}

// partsOf is the number of parts of size bytes in parts of partSize
// (0: a single PutObject); an empty object uploaded in parts has one.
func partsOf(size, partSize int64) int {
	if partSize <= 0 {
		return 0
	}
	return max(1, int((size+partSize-1)/partSize))
}

// etagParts is the number of parts an ETag says its object was uploaded
// in ("…-3": 3), 0 for one of a single PutObject (an MD5 digest).
func etagParts(etag string) int {
	etag = strings.Trim(etag, `"`)
	i := strings.LastIndexByte(etag, '-')
	if i < 0 {
		return 0
	}
	n, err := strconv.Atoi(etag[i+1:])
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// otherForm is the part size (0: a single PutObject) of a write of size
// bytes that leaves the object with an ETag other than old, whatever the
// bytes (backend.WithNewToken): S3's ETag is the MD5 of the bytes for a
// PutObject, and the MD5 of the parts' MD5s followed by "-" and the number
// of parts for a multipart upload, so a write in a different number of
// parts (a PutObject counting as none) can never give old back. partSize
// is the form the write would take otherwise, kept when it already
// differs. From n parts it goes to n-1 (a PutObject from one part), never
// more: parts that stay at least as large as before stay above S3's least
// part size.
func otherForm(old string, size, partSize int64) (int64, error) {
	n := etagParts(old)
	if partsOf(size, partSize) != n {
		return partSize, nil
	}
	switch n {
	case 0:
		return max(size, 1), nil // one part
	case 1:
		if size > maxCopySize {
			return 0, fmt.Errorf("cannot write %d bytes in a single PutObject to change the object's ETag %s", size, old)
		}
		return 0, nil
	}
	partSize = (size + int64(n) - 2) / int64(n-1)
	if partSize > maxCopySize {
		return 0, fmt.Errorf("cannot write %d bytes in fewer than %d parts to change the object's ETag %s", size, n, old)
	}
	return partSize, nil
}

// putMultipart uploads in parts of PartSize, as many at a time as the
// store's part pool allows (Concurrency across all Puts). Any
// failure aborts the upload, so that nothing is published and the parts
// do not linger (and cost) in the bucket.
func (s *Store) putMultipart(ctx context.Context, name string, r io.Reader, size, partSize int64, cond condition) (err error) {
	nparts := partsOf(size, partSize)

	in := &awss3.CreateMultipartUploadInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(name)),
	}
	if s.checksums {
		in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32
	}
	created, err := s.client.CreateMultipartUpload(ctx, in, s.logRetries(name))
	if err != nil {
		return s.writeErr(condition{}, name, err)
	}
	uploadID := created.UploadId
	defer func() {
		if err != nil {
			s.abort(ctx, name, uploadID)
		}
	}()

	partCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		parts    = make([]types.CompletedPart, nparts)
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	for i := 0; i < nparts && !failed(); i++ {
		off := int64(i) * partSize
		buf, err := s.parts.get(partCtx, min(partSize, size-off))
		if err != nil {
			fail(err)
			continue
		}
		if err := readPart(r, buf, off, size); err != nil {
			s.parts.release(buf)
			fail(err)
			continue
		}
		wg.Add(1)
		go func(num int32, buf []byte) {
			defer wg.Done()
			defer s.parts.release(buf)
			up := &awss3.UploadPartInput{
				Bucket:        aws.String(s.bucket),
				Key:           aws.String(s.key(name)),
				UploadId:      uploadID,
				PartNumber:    aws.Int32(num),
				Body:          bytes.NewReader(buf),
				ContentLength: aws.Int64(int64(len(buf))),
			}
			if s.checksums {
				up.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32
			}
			out, err := s.client.UploadPart(partCtx, up, s.logRetries(name))
			if err != nil {
				fail(fmt.Errorf("part %d: %w", num, err))
				return
			}
			parts[num-1] = types.CompletedPart{
				PartNumber:    aws.Int32(num),
				ETag:          out.ETag,
				ChecksumCRC32: out.ChecksumCRC32,
			}
		}(int32(i+1), buf)
	}
	wg.Wait()
	if firstErr != nil {
		return s.writeErr(condition{}, name, firstErr)
	}
	complete := &awss3.CompleteMultipartUploadInput{
		Bucket:          aws.String(s.bucket),
		Key:             aws.String(s.key(name)),
		UploadId:        uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	if cond.create {
		complete.IfNoneMatch = aws.String("*")
	}
	if cond.ifMatch != "" {
		complete.IfMatch = aws.String(cond.ifMatch)
	}
	if _, err := s.client.CompleteMultipartUpload(ctx, complete, s.logRetries(name)); err != nil {
		// NoSuchUpload (404) here is an upload aborted under us; a 412
		// is the condition refused.
		return s.writeErr(cond, name, err)
	}
	return nil
}

// abort discards a multipart upload, even when ctx was canceled: the
// parts would otherwise stay in the bucket, invisible and billed.
func (s *Store) abort(ctx context.Context, name string, uploadID *string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_, err := s.client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{
		Bucket:   aws.String(s.bucket),
		Key:      aws.String(s.key(name)),
		UploadId: uploadID,
	}, s.logRetries(name))
	if err != nil {
		s.log.Warn("aborting multipart upload failed; a lifecycle rule for incomplete uploads will remove its parts",
			zap.String("object", s.addr(name)), zap.Error(err))
	}
}

func (s *Store) Remove(ctx context.Context, name string) error {
	return s.remove(ctx, name, "")
}

// RemoveIfMatch is DeleteObject with If-Match: version (an ETag); a 412
// is backend.ErrPreconditionFailed. An object already absent is not an
// error, as for Remove: what the caller wanted gone is gone.
func (s *Store) RemoveIfMatch(ctx context.Context, name, version string) error {
	if version == "" {
		return fmt.Errorf("%s: remove if match: no version given", s.addr(name))
	}
	return s.remove(ctx, name, version)
}

func (s *Store) remove(ctx context.Context, name, ifMatch string) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	in := &awss3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(name)),
	}
	op := "remove"
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
		op = "remove if match " + ifMatch
	}
	_, err := s.client.DeleteObject(ctx, in, s.logRetries(name))
	switch class := classify(err); {
	case err == nil || class == backend.ErrNotExist:
		return nil
	case ifMatch != "" && class == backend.ErrExist:
		return fmt.Errorf("%s: %s: %w (%s)", s.addr(name), op, backend.ErrPreconditionFailed, says(err))
	}
	return s.err(op, name, err)
}

// CopyFrom copies with CopyObject when src is an S3 store on the same
// endpoint, so the bytes stay in the service. Objects above 5 GiB, which
// CopyObject cannot copy, are left to the caller to stream.
// CanCopyFrom: another prefix or bucket behind the same endpoint.
func (s *Store) CanCopyFrom(src backend.Reader) bool {
	from, ok := backend.Innermost(src).(*Store)
	return ok && from.endpoint == s.endpoint
}

func (s *Store) CopyFrom(ctx context.Context, src backend.Reader, srcName, dstName string, size int64) (bool, error) {
	from, ok := backend.Innermost(src).(*Store)
	// A copy takes the ETag of the bytes (a PutObject's): under
	// WithNewToken the caller streams instead, in the other form.
	if !ok || !s.CanCopyFrom(src) || size > maxCopySize || backend.NewToken(ctx) != "" {
		return false, nil
	}
	if err := backend.CheckName(srcName); err != nil {
		return false, err
	}
	if err := backend.CheckName(dstName); err != nil {
		return false, err
	}
	_, err := s.client.CopyObject(ctx, &awss3.CopyObjectInput{
		Bucket:     aws.String(s.bucket),
		Key:        aws.String(s.key(dstName)),
		CopySource: aws.String(copySource(from.bucket, from.key(srcName))),
	}, s.logRetries(dstName))
	if err != nil {
		if class := classify(err); class != nil {
			return false, fmt.Errorf("copying %s to %s: %w (%s)", from.addr(srcName), s.addr(dstName), class, says(err))
		}
		return false, fmt.Errorf("copying %s to %s: %w", from.addr(srcName), s.addr(dstName), err)
	}
	return true, nil
}

// copySource is the x-amz-copy-source value: bucket/key, URL-encoded by
// segment. "+" is escaped too, as some servers decode it as a space.
func copySource(bucket, key string) string {
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		segs[i] = strings.ReplaceAll(url.PathEscape(seg), "+", "%2B")
	}
	return bucket + "/" + strings.Join(segs, "/")
}

// etagMD5 is an ETag that has the form of an MD5 digest (32 hex digits,
// quoted), lower case; "" for any other (weak, multipart "-N", absent).
func etagMD5(etag string) string {
	etag = strings.TrimSuffix(strings.TrimPrefix(etag, `"`), `"`)
	if len(etag) != 32 {
		return ""
	}
	if _, err := hex.DecodeString(etag); err != nil {
		return ""
	}
	return strings.ToLower(etag)
}

var (
	_ backend.Backend     = (*Store)(nil)
	_ backend.Copier      = (*Store)(nil)
	_ backend.Conditional = (*Store)(nil)
)
