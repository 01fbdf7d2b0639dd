// Package gcs is the backend for a Google Cloud Storage bucket, through
// cloud.google.com/go/storage and its JSON API.
//
// The address is gs://BUCKET/PREFIX/. Credentials are Application Default
// Credentials; when STORAGE_EMULATOR_HOST is set the client itself talks to
// that emulator without credentials, and this package does nothing special
// about it.
//
// Uploads are never visible half-written: GCS publishes an object only when
// its upload is finalized, and Put cancels the upload (it never finalizes)
// when the data it was given is short, long or failing.
package gcs

import (
	"context"
	"crypto/md5"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/storage"
	"cloud.google.com/go/storage/experimental"
	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
	gax "github.com/googleapis/gax-go/v2"
	"go.uber.org/zap"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	htransport "google.golang.org/api/transport/http"
)

// DefaultChunkSize is the part size of resumable uploads: the writer holds
// at most one part in memory, and an object larger than one part is sent in
// several requests, each retried on its own. Smaller objects go in one
// request.
const DefaultChunkSize = 16 << 20

// MaxAttempts bounds every retried call (the first try included).
const MaxAttempts = 8

// listPageSize is the number of objects asked for per List request (the
// API's maximum).
const listPageSize = 1000

// Options carry what the address does not.
type Options struct {
	// Logger receives one warning per retried request. Nil logs nothing.
	Logger *zap.Logger
	// ChunkSize overrides DefaultChunkSize (a multiple of 256 KiB).
	ChunkSize int
	// MaxAttempts bounds the tries of one call, the first included
	// (default MaxAttempts).
	MaxAttempts int
	// MaxBackoff caps the wait between two tries (default 10 s); the wait
	// starts at 200 ms (or MaxBackoff, if less), doubles, and is jittered.
	MaxBackoff time.Duration
	// RootCAs are the roots an https endpoint's chain must end in (the
	// system's and --ca-file's: for STORAGE_EMULATOR_HOST or a proxy that
	// re-signs); nil means the system's.
	RootCAs *x509.CertPool
	// StallTimeout (default DefaultStallTimeout) retries a download whose
	// response headers do not come, and a chunk of a resumable upload
	// that the server does not acknowledge, within this time. Other calls
	// (metadata, listing, one-request uploads) have no timeout of their
	// own: the client offers none short of replacing its authenticated
	// transport; the caller's context bounds them.
	StallTimeout time.Duration
}

// DefaultStallTimeout is generous: a healthy bucket answers in well under
// a second, and a chunk of DefaultChunkSize should not take a minute.
const DefaultStallTimeout = 60 * time.Second

// Store is a bucket and prefix used as a store.
type Store struct {
	client    *storage.Client
	bucket    *storage.BucketHandle
	name      string // bucket
	prefix    string // "" or ends in "/"
	chunkSize int
	stall     time.Duration
	log       *zap.Logger
	pages     atomic.Int64
	// bucketFound is set once the bucket answered: a later "object does
	// not exist" is that (see objectErr).
	bucketFound atomic.Bool
}

// Open returns the store at u (gs://BUCKET/PREFIX/). It does not touch the
// network: a missing bucket shows up at the first request.
func Open(ctx context.Context, u *url.URL, opts Options) (*Store, error) {
	if u.Scheme != "gs" || u.Host == "" {
		return nil, fmt.Errorf("%s: not a gs://BUCKET/PREFIX/ address", redact.URL(u.String()))
	}
	if u.RawQuery != "" {
		return nil, fmt.Errorf("%s: gs:// addresses take no query parameters", redact.URL(u.String()))
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := backend.CheckName(prefix); err != nil {
			return nil, fmt.Errorf("gs://%s/%s: prefix: %w", u.Host, prefix, err)
		}
		prefix += "/"
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	stall := opts.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	// The stall timeout adapts upwards to the bucket's observed latency
	// (99th percentile), never below stall.
	clientOpts := []option.ClientOption{experimental.WithReadStallTimeout(&experimental.ReadStallTimeoutConfig{Min: stall, TargetPercentile: 0.99})}
	if opts.RootCAs != nil {
		hc, err := httpClientTrusting(ctx, opts.RootCAs)
		if err != nil {
			return nil, fmt.Errorf("gs://%s/%s: creating client: %w", u.Host, prefix, err)
		}
		clientOpts = append(clientOpts, option.WithHTTPClient(hc))
	}
	client, err := storage.NewClient(ctx, clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("gs://%s/%s: creating client: %w", u.Host, prefix, err)
	}
	s := &Store{
		client:    client,
		name:      u.Host,
		prefix:    prefix,
		chunkSize: opts.ChunkSize,
		stall:     stall,
		log:       log.With(zap.String("store", "gs://"+u.Host+"/"+prefix)),
	}
	if s.chunkSize <= 0 {
		s.chunkSize = DefaultChunkSize
	}
	// The default policy (RetryIdempotent) retries reads, and writes that
	// carry a precondition such as Create's does-not-exist. Put, Remove and
	// CopyFrom opt in to RetryAlways themselves: repeating them is harmless
	// here because they write the same bytes or delete the same name.
	attempts, maxBackoff := opts.MaxAttempts, opts.MaxBackoff
	if attempts <= 0 {
		attempts = MaxAttempts
	}
	if maxBackoff <= 0 {
		maxBackoff = 10 * time.Second
	}
	client.SetRetry(
		storage.WithPolicy(storage.RetryIdempotent),
		// gax jitters every wait: a random duration up to the current one.
		storage.WithBackoff(gax.Backoff{Initial: min(200*time.Millisecond, maxBackoff), Max: maxBackoff, Multiplier: 2}),
		storage.WithMaxAttempts(attempts),
		storage.WithMaxRetryDuration(2*time.Minute),
		storage.WithErrorFuncWithContext(s.shouldRetry),
	)
	s.bucket = client.Bucket(u.Host)
	return s, nil
}

// httpClientTrusting is the client's HTTP client with roots of the
// operator's: an HTTP client given to the storage client replaces its
// authenticated one, so the credentials are layered on it here as the
// storage client would, unless it talks to an emulator (which takes none).
func httpClientTrusting(ctx context.Context, roots *x509.CertPool) (*http.Client, error) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = &tls.Config{RootCAs: roots}
	if os.Getenv("STORAGE_EMULATOR_HOST") != "" {
		return &http.Client{Transport: base}, nil
	}
	rt, err := htransport.NewTransport(ctx, base, option.WithScopes(storage.ScopeFullControl))
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: rt}, nil
}

// shouldRetry is the client's default decision, plus a log line for every
// retry it decides on. The client calls it only for calls its policy lets
// it retry.
func (s *Store) shouldRetry(err error, rc *storage.RetryContext) bool {
	return s.logRetry(err, rc, "", "")
}

// retryFor is shouldRetry for one object's writes: the client passes no
// RetryContext for uploads, so op and key name them in the log instead.
func (s *Store) retryFor(op, key string) storage.RetryOption {
	return storage.WithErrorFuncWithContext(func(err error, rc *storage.RetryContext) bool {
		return s.logRetry(err, rc, op, key)
	})
}

func (s *Store) logRetry(err error, rc *storage.RetryContext, op, key string) bool {
	if !storage.ShouldRetry(err) {
		return false
	}
	attempt := 0
	if rc != nil {
		if rc.Operation != "" {
			op = rc.Operation
		}
		if rc.Object != "" {
			key = rc.Object
		}
		attempt = rc.Attempt
	}
	s.log.Warn("gcs: retrying request", zap.String("op", op), zap.String("object", key),
		zap.Int("attempt", attempt), zap.Error(err))
	return true
}

// Close releases the client.
func (s *Store) Close() error { return s.client.Close() }

// Location is gs://BUCKET/PREFIX/.
func (s *Store) Location() string { return "gs://" + s.name + "/" + s.prefix }

// Properties: a bucket lists, Create is a conditional write, and writes
// and removals can be made conditional on an object's generation.
func (s *Store) Properties() backend.Properties {
	return backend.Properties{CanList: true, CanWrite: true, AtomicCreate: true, ConditionalWrite: true, PageList: true}
}

// generation is an object's generation as a FileInfo's Version.
func generation(g int64) string { return strconv.FormatInt(g, 10) }

// parseGeneration reads a Version back; a version of another store's
// making is no generation.
func (s *Store) parseGeneration(op, name, version string) (int64, error) {
	g, err := strconv.ParseInt(version, 10, 64)
	if err != nil || g <= 0 {
		return 0, fmt.Errorf("gs://%s/%s: %s: version %q is not a generation", s.name, s.key(name), op, version)
	}
	return g, nil
}

// Pages is the number of List requests (pages of up to 1000 objects) sent
// since the store was opened.
func (s *Store) Pages() int64 { return s.pages.Load() }

func (s *Store) key(name string) string { return s.prefix + name }

// errorf names gs://bucket/key and maps the service's answer to the
// backend's errors: an absent object to backend.ErrNotExist, a missing
// bucket to backend.ErrNoBucket, refused credentials (401, 403) to
// backend.ErrAccessDenied.
func (s *Store) errorf(op, name string, err error) error {
	where := "gs://" + s.name + "/" + s.key(name)
	var gerr *googleapi.Error
	switch {
	case errors.Is(err, storage.ErrObjectNotExist):
		return fmt.Errorf("%s: %s: %w", where, op, backend.ErrNotExist)
	case errors.Is(err, storage.ErrBucketNotExist):
		return fmt.Errorf("%s: %s: %w", where, op, backend.ErrNoBucket)
	case errors.As(err, &gerr) && (gerr.Code == http.StatusUnauthorized || gerr.Code == http.StatusForbidden):
		return fmt.Errorf("%s: %s: %w (%s)", where, op, backend.ErrAccessDenied, gerr.Message)
	case errors.As(err, &gerr) && gerr.Code == http.StatusNotFound && op == "list":
		// Listing objects has no object to miss: only the bucket.
		return fmt.Errorf("%s: %s: %w (%s)", where, op, backend.ErrNoBucket, gerr.Message)
	}
	return fmt.Errorf("%s: %s: %w", where, op, err)
}

// objectErr is errorf for the answer to an object's read. The client
// reports any 404 as storage.ErrObjectNotExist, a missing bucket included,
// so until the bucket was seen once, its attributes are asked for: a
// missing bucket is then said as such. Where the credentials may not read
// the bucket's attributes (403) nothing more is known, and the object is
// absent as the client said.
func (s *Store) objectErr(ctx context.Context, op, name string, err error) error {
	if errors.Is(err, storage.ErrObjectNotExist) && !s.bucketFound.Load() {
		_, berr := s.bucket.Attrs(ctx)
		switch {
		case berr == nil:
			s.bucketFound.Store(true)
		case errors.Is(berr, storage.ErrBucketNotExist):
			return s.errorf(op, name, berr)
		}
	}
	return s.errorf(op, name, err)
}

func (s *Store) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, _, err := s.OpenVersion(ctx, name)
	return rc, err
}

// OpenVersion is Open that also gives the generation it reads (the client
// pins the whole read to it) as the Version.
func (s *Store) OpenVersion(ctx context.Context, name string) (io.ReadCloser, backend.FileInfo, error) {
	if err := backend.CheckName(name); err != nil {
		return nil, backend.FileInfo{}, err
	}
	r, err := s.bucket.Object(s.key(name)).NewReader(ctx)
	if err != nil {
		return nil, backend.FileInfo{}, s.objectErr(ctx, "open", name, err)
	}
	fi := backend.FileInfo{Name: name, Size: r.Attrs.Size, Version: generation(r.Attrs.Generation)}
	return &reader{r: r, s: s, name: name}, fi, nil
}

// reader names the object in errors met while streaming.
type reader struct {
	r    *storage.Reader
	s    *Store
	name string
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.s.errorf("read", r.name, err)
	}
	return n, err
}

func (r *reader) Close() error { return r.r.Close() }

func (s *Store) Stat(ctx context.Context, name string) (backend.FileInfo, error) {
	if err := backend.CheckName(name); err != nil {
		return backend.FileInfo{}, err
	}
	a, err := s.bucket.Object(s.key(name)).Attrs(ctx)
	if err != nil {
		return backend.FileInfo{}, s.objectErr(ctx, "stat", name, err)
	}
	return backend.FileInfo{Name: name, Size: a.Size, Version: generation(a.Generation)}, nil
}

// List pages through the objects under prefix, 1000 per request.
func (s *Store) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	if err := backend.CheckPrefix(prefix); err != nil {
		return err
	}
	q := &storage.Query{Prefix: s.key(prefix)}
	if err := q.SetAttrSelection([]string{"Name", "Size", "MD5", "Generation"}); err != nil {
		return err
	}
	pager := iterator.NewPager(s.bucket.Objects(ctx, q), listPageSize, "")
	for {
		var page []*storage.ObjectAttrs
		next, err := pager.NextPage(&page)
		s.pages.Add(1)
		if err != nil {
			return s.errorf("list", prefix, err)
		}
		for _, a := range page {
			name := strings.TrimPrefix(a.Name, s.prefix)
			// Folder placeholders ("a/") made by other tools, and names
			// this store could not open, are not objects of the store.
			if strings.HasPrefix(name, backend.ReservedPrefix) || backend.CheckName(name) != nil {
				continue
			}
			fi := backend.FileInfo{Name: name, Size: a.Size, Version: generation(a.Generation)}
			if len(a.MD5) == md5.Size { // composite objects have none
				fi.MD5 = hex.EncodeToString(a.MD5)
			}
			if err := fn(fi); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
	}
}

// ListPage lists one page from from on: GCS lists in name order, and
// StartOffset starts at a name, included. Should a page hold only names
// List skips, the next is asked for; each must start past the last name
// seen, so that a service that repeats a page cannot keep it asking.
func (s *Store) ListPage(ctx context.Context, prefix, from string) ([]backend.FileInfo, bool, error) {
	if err := backend.CheckPrefix(prefix); err != nil {
		return nil, false, err
	}
	q := &storage.Query{Prefix: s.key(prefix)}
	fromKey := ""
	if from != "" {
		fromKey = s.key(from)
		q.StartOffset = fromKey
	}
	if err := q.SetAttrSelection([]string{"Name", "Size", "MD5", "Generation"}); err != nil {
		return nil, false, err
	}
	pager := iterator.NewPager(s.bucket.Objects(ctx, q), listPageSize, "")
	var page []backend.FileInfo
	last, seen := "", false
	for {
		var objs []*storage.ObjectAttrs
		next, err := pager.NextPage(&objs)
		s.pages.Add(1)
		if err != nil {
			return nil, false, s.errorf("list", prefix, err)
		}
		for _, a := range objs {
			if a.Name < fromKey || (seen && a.Name <= last) {
				return nil, false, fmt.Errorf("gs://%s/%s: listing a page from %q: %q out of order", s.name, s.key(prefix), fromKey, a.Name)
			}
			last, seen = a.Name, true
			name := strings.TrimPrefix(a.Name, s.prefix)
			if strings.HasPrefix(name, backend.ReservedPrefix) || backend.CheckName(name) != nil {
				continue
			}
			fi := backend.FileInfo{Name: name, Size: a.Size, Version: generation(a.Generation)}
			if len(a.MD5) == md5.Size {
				fi.MD5 = hex.EncodeToString(a.MD5)
			}
			page = append(page, fi)
		}
		if len(page) > 0 || next == "" {
			return page, next != "", nil
		}
		if len(objs) == 0 {
			return nil, false, fmt.Errorf("gs://%s/%s: listing a page from %q: an empty page said more names follow", s.name, s.key(prefix), fromKey)
		}
	}
}

func (s *Store) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	// Rewriting the same name with the same bytes is harmless, so the
	// unconditional upload may be retried too.
	o := s.bucket.Object(s.key(name)).Retryer(storage.WithPolicy(storage.RetryAlways), s.retryFor("put", s.key(name)))
	return s.upload(ctx, o, "put", name, r, size)
}

func (s *Store) Create(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	o := s.bucket.Object(s.key(name)).If(storage.Conditions{DoesNotExist: true}).Retryer(s.retryFor("create", s.key(name)))
	err := s.upload(ctx, o, "create", name, r, size)
	if isPreconditionFailed(err) {
		// A retried attempt whose first try did land also ends here; the
		// object is then ours, but callers re-read what they create.
		return fmt.Errorf("gs://%s/%s: create: %w", s.name, s.key(name), backend.ErrExist)
	}
	return err
}

// PutIfMatch is Put with an ifGenerationMatch precondition, which GCS
// evaluates when it finalizes the upload; a refusal (412) is
// backend.ErrPreconditionFailed.
func (s *Store) PutIfMatch(ctx context.Context, name string, r io.Reader, size int64, version string) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	gen, err := s.parseGeneration("put if match", name, version)
	if err != nil {
		return err
	}
	o := s.bucket.Object(s.key(name)).If(storage.Conditions{GenerationMatch: gen}).Retryer(s.retryFor("put if match", s.key(name)))
	err = s.upload(ctx, o, "put if match "+version, name, r, size)
	if isPreconditionFailed(err) {
		// As for Create: a retry of a first try that landed ends here
		// too, and the caller stops as if it had lost; never the
		// other way round.
		return fmt.Errorf("gs://%s/%s: put if match generation %s: %w", s.name, s.key(name), version, backend.ErrPreconditionFailed)
	}
	return err
}

// RemoveIfMatch deletes the object only at generation version; a refusal
// (412) is backend.ErrPreconditionFailed; an object already gone is not an
// error, as for Remove.
func (s *Store) RemoveIfMatch(ctx context.Context, name, version string) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	gen, err := s.parseGeneration("remove if match", name, version)
	if err != nil {
		return err
	}
	// The generation named twice: as the one to delete (which the
	// emulator honours, and which on a bucket without object versioning
	// exists only while it is the live one) and as a precondition (which
	// GCS evaluates against the live object).
	o := s.bucket.Object(s.key(name))
	err = o.Generation(gen).If(storage.Conditions{GenerationMatch: gen}).Retryer(s.retryFor("remove if match", s.key(name))).Delete(ctx)
	refused := fmt.Errorf("gs://%s/%s: remove if match generation %s: %w", s.name, s.key(name), version, backend.ErrPreconditionFailed)
	switch {
	case err == nil:
		return nil
	case isPreconditionFailed(err):
		return refused
	case errors.Is(err, storage.ErrObjectNotExist):
		// That generation is gone; the store removed nothing. Whether
		// another generation now stands in its place says whether the
		// caller's removal was refused or done by someone else before.
		a, serr := o.Attrs(ctx)
		switch {
		case errors.Is(serr, storage.ErrObjectNotExist):
			return nil
		case serr != nil:
			return s.objectErr(ctx, "remove if match", name, serr)
		case a.Generation != gen:
			return refused
		}
	}
	return s.errorf("remove if match", name, err)
}

func isPreconditionFailed(err error) bool {
	var gerr *googleapi.Error
	return errors.As(err, &gerr) && gerr.Code == http.StatusPreconditionFailed
}

// upload streams exactly size bytes of r into o. Anything else cancels the
// upload before it is finalized, so no object is published.
func (s *Store) upload(ctx context.Context, o *storage.ObjectHandle, op, name string, r io.Reader, size int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := o.NewWriter(wctx)
	w.ChunkSize = s.chunkSize
	w.ChunkTransferTimeout = s.stall
	// An explicit type keeps the client from sniffing the first bytes.
	w.ContentType = "application/octet-stream"
	n, err := io.Copy(w, io.LimitReader(r, size+1))
	if err == nil && n != size {
		err = fmt.Errorf("got %d bytes, expected %d", n, size)
	}
	if err != nil {
		cancel()
		w.Close()
		return fmt.Errorf("gs://%s/%s: %s: %w", s.name, s.key(name), op, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("gs://%s/%s: %s: %w", s.name, s.key(name), op, err)
	}
	if a := w.Attrs(); a != nil && a.Size != size {
		return fmt.Errorf("gs://%s/%s: %s: stored %d bytes, sent %d", s.name, s.key(name), op, a.Size, size)
	}
	return nil
}

func (s *Store) Remove(ctx context.Context, name string) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	// Deleting a name twice is harmless: retry it like a read.
	err := s.bucket.Object(s.key(name)).Retryer(storage.WithPolicy(storage.RetryAlways), s.retryFor("remove", s.key(name))).Delete(ctx)
	if err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
		return s.errorf("remove", name, err)
	}
	return nil
}

// CopyFrom copies within GCS (any bucket the credentials reach) by a
// server-side rewrite. The source generation is pinned after checking its
// size, so a concurrent overwrite of the source cannot slip in other bytes.
// CanCopyFrom: any GCS store (the rewrite crosses buckets).
func (s *Store) CanCopyFrom(src backend.Reader) bool {
	_, ok := backend.Innermost(src).(*Store)
	return ok
}

func (s *Store) CopyFrom(ctx context.Context, src backend.Reader, srcName, dstName string, size int64) (bool, error) {
	from, ok := backend.Innermost(src).(*Store)
	if !ok {
		return false, nil
	}
	if err := backend.CheckName(srcName); err != nil {
		return false, err
	}
	if err := backend.CheckName(dstName); err != nil {
		return false, err
	}
	srcObj := from.bucket.Object(from.key(srcName))
	a, err := srcObj.Attrs(ctx)
	if err != nil {
		return false, from.objectErr(ctx, "copy", srcName, err)
	}
	if a.Size != size {
		return false, fmt.Errorf("gs://%s/%s: copy: source has %d bytes, expected %d", from.name, from.key(srcName), a.Size, size)
	}
	dst := s.bucket.Object(s.key(dstName)).Retryer(storage.WithPolicy(storage.RetryAlways), s.retryFor("copy", s.key(dstName)))
	c := dst.CopierFrom(srcObj.Generation(a.Generation))
	c.ContentType = "application/octet-stream"
	if _, err := c.Run(ctx); err != nil {
		return false, fmt.Errorf("gs://%s/%s: copy from gs://%s/%s: %w", s.name, s.key(dstName), from.name, from.key(srcName), err)
	}
	return true, nil
}

var (
	_ backend.Backend     = (*Store)(nil)
	_ backend.Copier      = (*Store)(nil)
	_ backend.Conditional = (*Store)(nil)
)
