// Package backend is the one storage interface that every protocol (a local
// folder, S3, GCS, HTTP) implements, and the wrappers that add behaviour to
// any of them. The sync engine sees only these interfaces: a store is an
// upstream when it is read and a mirror when it is written, never two
// clients for one protocol.
//
// Names are slash-separated paths relative to the store's root, without a
// leading slash ("versions/019a…/version.json"). A backend never resolves a
// name outside its root: names holding "..", "." or empty segments, a
// leading "/" or a backslash are rejected with ErrInvalidName.
//
// # Who retries what
//
// Three layers retry, each what the one below it cannot:
//
//  1. One request: each backend's client (the AWS SDK's standard retryer,
//     the GCS client's, go-retryablehttp for HTTP) retries a request that
//     failed on a connection error, a timeout, 429 or 5xx, with jittered
//     exponential backoff, a bounded number of times (--retries), and logs
//     each retry.
//  2. One body: a download cut off mid-stream after its headers arrived is
//     resumed where it stopped by ResumingReader (S3 and HTTP; the GCS
//     client resumes its own), pinned to the same object by its ETag or
//     Last-Modified, at most MaxResumes times per body.
//  3. One file: the engine's copyFile tries a whole copy again
//     (CopyAttempts) only when the error is not IsPermanent: a failed
//     write to the mirror after its client gave up, say. An absent object,
//     a refusal, refused credentials or a redirect refused by policy are
//     final at every layer.
package backend

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

var (
	// ErrNotExist is wrapped by every error about an object that is absent.
	ErrNotExist = errors.New("object does not exist")
	// ErrExist is returned by Create when the object is already there.
	ErrExist = errors.New("object already exists")
	// ErrTooLarge is an object ReadAll refused for passing its limit.
	ErrTooLarge = errors.New("object too large")
	// ErrNotSupported is returned by List on a store that cannot list
	// (HTTP), and by the write methods of a read-only store.
	ErrNotSupported = errors.New("operation not supported by this store")
	// ErrInvalidName is returned for a name that could leave the root.
	ErrInvalidName = errors.New("invalid object name")
	// ErrPreconditionFailed is wrapped by the error of a conditional
	// write or removal (see Conditional) that the store refused: the
	// object is no longer the version the caller read, or is there when
	// the caller read it absent. Another writer changed it: for a run that
	// writes under a lease, it lost the lease, and must stop. It is
	// permanent: trying again cannot make the object what was read.
	ErrPreconditionFailed = errors.New("object changed since it was read (write condition refused by the store)")
)

// ErrNoBucket and ErrAccessDenied tell a wrong address or refused
// credentials from an absent object: an S3 or GCS service answers 404 (or
// 403) for all three, and only its error code says which. Neither wraps
// ErrNotExist, so that a missing bucket is never read as "this repository
// has no fdl.json".
var (
	// ErrNoBucket is wrapped by errors about a bucket that does not exist.
	ErrNoBucket = errors.New("bucket does not exist")
	// ErrAccessDenied is wrapped by errors where the service refused the
	// credentials (an unknown access key, a bad signature) or their rights.
	ErrAccessDenied = errors.New("access refused")
)

// IsNotExist reports whether err says an object is absent.
func IsNotExist(err error) bool { return errors.Is(err, ErrNotExist) }

// IsPreconditionFailed reports whether err is a refused write condition
// (ErrPreconditionFailed).
func IsPreconditionFailed(err error) bool { return errors.Is(err, ErrPreconditionFailed) }

// IsPermanent reports whether trying again cannot change the outcome of
// what failed with err: an absent or existing object, a bad name, an
// unsupported operation, a missing bucket, refused credentials, a refused
// write condition, or an
// error that says so itself with a method Permanent() bool (an HTTP
// redirect refused by policy, the engine's refusals). Cancellation is not
// in the list: the caller knows its own context.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	for _, target := range []error{ErrNotExist, ErrExist, ErrNotSupported, ErrInvalidName, ErrNoBucket, ErrAccessDenied, ErrPreconditionFailed} {
		if errors.Is(err, target) {
			return true
		}
	}
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

// Permanent marks err as permanent for IsPermanent (restic's
// backoff.Permanent): a failure that no retry can cure.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() error   { return e.err }
func (e *permanentError) Permanent() bool { return true }

// FileInfo describes one object.
type FileInfo struct {
	Name string // relative to the store's root
	Size int64
	// MD5 is the hex MD5 digest of the content as a listing gives it
	// (S3's ETag where it has the form of one, GCS's md5Hash); "" where
	// the store gives none. On S3 an ETag of an encrypted object has the
	// form and is not the digest: compare MD5 with a digest of content you
	// hold (repo.ListingHolds), never take it for one.
	MD5 string
	// Version is the token that names this version of the object for a
	// conditional write or removal (see Conditional): S3's ETag, GCS's
	// generation. "" where the store has none (a local folder, HTTP).
	// Stat and List give it on the stores that have it.
	Version string
}

// Properties say what a store can do, so the engine can choose the cheap way.
type Properties struct {
	// CanList: List works. False for HTTP, where names come from refs.json
	// and the catalogs instead.
	CanList bool
	// CanWrite: Put, Create and Remove work.
	CanWrite bool
	// AtomicCreate: Create is atomic against concurrent writers (a
	// conditional write such as If-None-Match: * or link(2)). Stores
	// without it emulate Create with Stat then Put.
	AtomicCreate bool
	// ConditionalWrite: the store implements Conditional, and evaluates
	// its conditions atomically with the write (S3 If-Match, GCS
	// generation preconditions). A store without it cannot refuse a
	// writer that lost its lease: a local folder needs none (its lock is
	// flock(2), which the kernel holds through any pause of its holder).
	ConditionalWrite bool
	// PageList: the store implements PageLister: it lists in byte order
	// and can start a listing at any name (S3, GCS; not an S3 directory
	// bucket, which lists in no order).
	PageList bool
	// LocalStat: Stat is a system call on this machine, not a request,
	// and List stats every file it lists (a local folder). Asking for the
	// files a run needs one by one then never costs more than a listing.
	LocalStat bool
}

// Reader is the read half of a store. Every method is safe for concurrent use.
type Reader interface {
	// Open returns the object's content, streamed. The error wraps
	// ErrNotExist when the object is absent.
	Open(ctx context.Context, name string) (io.ReadCloser, error)
	// Stat returns the object's size. The error wraps ErrNotExist when
	// absent. The size is -1 where the store cannot tell it without
	// reading the object: an HTTP server that sends no Content-Length.
	Stat(ctx context.Context, name string) (FileInfo, error)
	// List calls fn for every object whose name starts with prefix (a
	// folder prefix ends in "/"), recursively, in no particular order.
	// Files the backend itself keeps (temporary files, its lock) are not
	// listed. A store that cannot list returns ErrNotSupported. A missing
	// prefix lists nothing and is not an error. An error from fn stops the
	// listing and is returned.
	List(ctx context.Context, prefix string, fn func(FileInfo) error) error
	// Properties says what this store can do.
	Properties() Properties
	// Location is the store's address for messages: never a credential.
	Location() string
}

// Backend is a store that can also be written: a mirror.
type Backend interface {
	Reader
	// Put writes the object atomically, replacing any previous one: a
	// reader sees the old object, or all size bytes of the new one, never
	// a part. When r yields an error or a count other than size, nothing
	// is published and the error is returned. On a local disk the data is
	// fsynced before Put returns.
	Put(ctx context.Context, name string, r io.Reader, size int64) error
	// Create is Put only if the object does not exist yet; otherwise it
	// writes nothing and returns an error wrapping ErrExist.
	Create(ctx context.Context, name string, r io.Reader, size int64) error
	// Remove deletes the object; removing an absent object is not an error.
	Remove(ctx context.Context, name string) error
}

// Conditional is implemented by stores that can make a write or a removal
// conditional on the version of the object the caller read (restic's
// properties, the "fencing" of Kleppmann's "How to do distributed
// locking"): a run whose lease on the mirror lapsed while it was paused
// can check its lock before a write, and still be paused between the
// check and the write; only the store can refuse such a write. A refused
// condition is an error wrapping ErrPreconditionFailed, and nothing is
// written or removed.
type Conditional interface {
	// OpenVersion is Open that also says which version was opened: the
	// returned FileInfo's Version is the token of exactly the bytes the
	// body yields.
	OpenVersion(ctx context.Context, name string) (io.ReadCloser, FileInfo, error)
	// PutIfMatch is Put only if the object's current version is version
	// (If-Match on S3, ifGenerationMatch on GCS).
	PutIfMatch(ctx context.Context, name string, r io.Reader, size int64, version string) error
	// RemoveIfMatch removes the object only if its current version is
	// version. An object already absent is not an error (the removal
	// such a caller wants is done), as with Remove.
	RemoveIfMatch(ctx context.Context, name, version string) error
}

// ConditionalOf returns the Conditional of a store, looking through
// wrappers that do not implement it; nil when the store underneath has
// none (a local folder, HTTP). A wrapper that must refuse writes (a dry
// run's) implements it itself, so that it is found first.
func ConditionalOf(r Reader) Conditional {
	if !r.Properties().ConditionalWrite {
		return nil
	}
	c, _ := As[Conditional](r)
	return c
}

// ReadAllVersion is ReadAll that also returns the version token of the
// bytes read ("" on a store without Conditional), for a later
// ReplaceIfUnchanged. An absent object is an error wrapping ErrNotExist.
func ReadAllVersion(ctx context.Context, r Reader, name string, limit int64) ([]byte, string, error) {
	c := ConditionalOf(r)
	if c == nil {
		b, err := ReadAll(ctx, r, name, limit)
		return b, "", err
	}
	rc, fi, err := c.OpenVersion(ctx, name)
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, "", fmt.Errorf("%s: reading %s: %w", r.Location(), name, err)
	}
	if int64(len(b)) > limit {
		return nil, "", fmt.Errorf("%s: %s is larger than %d bytes: %w", r.Location(), name, limit, ErrTooLarge)
	}
	return b, fi.Version, nil
}

// ReplaceIfUnchanged writes data to name only if the object is still what
// the caller read: version is the token it read (ReadAllVersion, Stat,
// List), or "" for an object it found absent, which is then created
// only if still absent. A changed object fails with an error wrapping
// ErrPreconditionFailed, and nothing is written. On a store without
// ConditionalWrite it is a plain Put: the store cannot refuse, and the
// caller's lock is all that guards the write (see Properties).
func ReplaceIfUnchanged(ctx context.Context, b Backend, name string, data []byte, version string) error {
	c := ConditionalOf(b)
	switch {
	case c == nil:
		return b.Put(ctx, name, bytes.NewReader(data), int64(len(data)))
	case version == "":
		err := b.Create(ctx, name, bytes.NewReader(data), int64(len(data)))
		if errors.Is(err, ErrExist) {
			return fmt.Errorf("%w: %w", ErrPreconditionFailed, err)
		}
		return err
	default:
		return c.PutIfMatch(ctx, name, bytes.NewReader(data), int64(len(data)), version)
	}
}

// RemoveIfUnchanged removes name only if it is still the version the
// caller read (List or Stat gave it), where the store can make removals
// conditional; elsewhere, or without a version, it is Remove.
func RemoveIfUnchanged(ctx context.Context, b Backend, name, version string) error {
	if c := ConditionalOf(b); c != nil && version != "" {
		return c.RemoveIfMatch(ctx, name, version)
	}
	return b.Remove(ctx, name)
}

// Copier is implemented by backends that can copy an object from another
// store without the bytes passing through this process (S3 CopyObject
// within one endpoint, GCS rewrite). CopyFrom returns ok=false, and does
// nothing, when it cannot copy from src; the caller then streams.
type Copier interface {
	// CanCopyFrom says, without a request, whether CopyFrom would copy
	// from src, so that a caller spends no request preparing a copy that
	// will be declined.
	CanCopyFrom(src Reader) bool
	CopyFrom(ctx context.Context, src Reader, srcName, dstName string, size int64) (ok bool, err error)
}

// PageLister is implemented by stores whose listing comes in byte order
// and can start at any name (S3's StartAfter, GCS's StartOffset), as
// Properties.PageList says: a caller that asks about names in increasing
// order can then merge them with the listing a page at a time (a
// Cursor), holding one page where a whole listing would hold every name
// of the folder.
type PageLister interface {
	// ListPage lists one page (one request of about a thousand names) of
	// the names under prefix that are from or after it, from included,
	// in increasing byte order, with their sizes. more says that names
	// may follow the page's last one; a page with more is never empty.
	// Names List skips (the store's own files, names no store could
	// open) are skipped here too. A missing prefix lists nothing and is
	// not an error.
	ListPage(ctx context.Context, prefix, from string) (page []FileInfo, more bool, err error)
}

// PageListerOf returns the PageLister of a store, looking through
// wrappers that do not implement it; nil when the store cannot list a
// page (Properties.PageList is false). A wrapper that counts requests
// implements it itself, and is found first.
func PageListerOf(r Reader) PageLister {
	if !r.Properties().PageList {
		return nil
	}
	l, _ := As[PageLister](r)
	return l
}

// As returns the first store, from r down through its wrappers, that is a
// T: an optional interface (Copier, Barrier) or a concrete store
// (*local.Local), as restic's AsBackend finds a backend under its
// wrappers. A wrapper that must hide what it wraps (ReadOnly hides the
// Copier) implements T itself, and is found first.
func As[T any](r Reader) (T, bool) {
	for {
		if t, ok := r.(T); ok {
			return t, true
		}
		u, ok := r.(Unwrapper)
		if !ok {
			var zero T
			return zero, false
		}
		r = u.Unwrap()
	}
}

// Unwrapper is implemented by wrappers, so that optional interfaces such as
// Copier can be found on the backend underneath.
type Unwrapper interface {
	Unwrap() Reader
}

// Innermost returns the backend under every wrapper.
func Innermost(r Reader) Reader {
	for {
		u, ok := r.(Unwrapper)
		if !ok {
			return r
		}
		r = u.Unwrap()
	}
}

// CheckName rejects a name that is empty, absolute, or could climb out of
// the root. Backends call it before touching anything.
func CheckName(name string) error {
	if !cleanName(name) {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return nil
}

// cleanName says whether name is non-empty, has no "\\" or NUL, and no
// empty, "." or ".." segment (so no leading or trailing "/"): one pass,
// as it runs for every row of a catalog. Such a name is one path.Clean
// leaves as it is (Clean only drops empty, "." and ".." segments and a
// trailing "/"), which is why that is not asked as well; a test holds
// the two to the same answers.
func cleanName(name string) bool {
	if name == "" {
		return false
	}
	start := 0
	for i := 0; i <= len(name); i++ {
		if i < len(name) {
			switch name[i] {
			case '\\', 0:
				return false
			case '/':
			default:
				continue
			}
		}
		if seg := name[start:i]; seg == "" || seg == "." || seg == ".." {
			return false
		}
		start = i + 1
	}
	return true
}

// CheckPrefix is CheckName for List prefixes: empty (everything) or a name,
// optionally ending in "/".
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return CheckName(strings.TrimSuffix(prefix, "/"))
}

// ReadAll reads a whole small object (refs, records, settings). Objects
// larger than limit are refused, so a hostile upstream cannot make us hold
// a huge "ref" in memory.
func ReadAll(ctx context.Context, r Reader, name string, limit int64) ([]byte, error) {
	rc, err := r.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading %s: %w", r.Location(), name, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: %s is larger than %d bytes: %w", r.Location(), name, limit, ErrTooLarge)
	}
	return b, nil
}

// ReservedPrefix is where backends and the engine keep their own files in a
// mirror (temporary files, the lock). Readers of the repository ignore it:
// the spec lets other files sit at the root.
const ReservedPrefix = ".fdl-mirror/"

// Barrier is implemented by stores whose writes can be made durable in a
// batch rather than one by one: a local disk, where an fsync of every file
// and its folder costs more than copying it. A write made under a context
// from WithoutSync may return before its bytes (and the name that points
// at them) are durable; Barrier makes every such write and removal made
// so far durable. Writes under any other context are durable when they
// return, on every store. Object stores have no Barrier: a PUT is durable
// when it is acknowledged, and WithoutSync changes nothing there.
type Barrier interface {
	Barrier(ctx context.Context) error
}

// ReadAheader is implemented by stores whose reads go faster when they are
// announced: a local disk, where copies of many small files otherwise wait
// for each file's read in turn, as many at once as there are copies (a
// 300,000-file first mirror whose files were not in the page cache:
// 20-25 s, against 9-14 s announced).
type ReadAheader interface {
	// ReadAhead starts reading the named files, in order, without
	// waiting for their bytes, and returns when it has gone through
	// them or ctx is done. A hint: a name it cannot open is skipped,
	// and nothing read is checked or kept.
	ReadAhead(ctx context.Context, names []string)
}

type withoutSyncKey struct{}

// WithoutSync returns a context under which writes and removals may leave
// their durability to the store's next Barrier. It travels through every
// wrapper unchanged, as the context does.
func WithoutSync(ctx context.Context) context.Context {
	return context.WithValue(ctx, withoutSyncKey{}, true)
}

// SyncDeferred reports whether ctx came from WithoutSync.
func SyncDeferred(ctx context.Context) bool {
	v, _ := ctx.Value(withoutSyncKey{}).(bool)
	return v
}

type listBoundsKey struct{}

// WithListBounds returns a context under which List may list a prefix in
// parts at once, split where split says: a guess of where its names lie,
// from what the caller knew of it before (a catalog's files). Every name
// is listed once, whatever the guess; a store whose listing is in name
// order and can start after a name (S3) lists the parts at once, the
// others ignore the split and never call split (computed once, by the
// first store that asks).
func WithListBounds(ctx context.Context, split func() ListSplit) context.Context {
	return context.WithValue(ctx, listBoundsKey{}, sync.OnceValue(split))
}

// ListSplit is where a listing may be split (WithListBounds).
type ListSplit struct {
	// Bounds are names in increasing order: the first part lists the
	// names up to and including Bounds[0], part i those after
	// Bounds[i-1] up to and including Bounds[i], the last part the
	// names after the last bound.
	Bounds []string
	// Expect, where it has a count for each bound, is how many names the
	// caller expects in each part but the last. A part then asks for no
	// more names than it still expects, so that its last page does not
	// read on past its bound: on S3 a page of a thousand names is some
	// 350 KB, and a listing in four parts read up to three pages more
	// than a plain one, as many as where the bounds fell (issue 43: what
	// the upstream sends for two sinks moved with it). A guess too: a
	// part that finds more names asks for whole pages again.
	Expect []int
}

// ListBounds is what WithListBounds gave, the zero ListSplit when nothing.
func ListBounds(ctx context.Context) ListSplit {
	if split, _ := ctx.Value(listBoundsKey{}).(func() ListSplit); split != nil {
		return split()
	}
	return ListSplit{}
}

// SplitBounds picks a ListSplit's bounds from names the caller
// expects under a prefix: one every perPart names, at most maxParts-1 of
// them, in order; nil when there are too few names to be worth a split.
func SplitBounds(names []string, perPart, maxParts int) []string {
	if perPart <= 0 || len(names) < 2*perPart || maxParts < 2 {
		return nil
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	parts := min(maxParts, len(sorted)/perPart)
	var bounds []string
	for i := 1; i < parts; i++ {
		bounds = append(bounds, sorted[len(sorted)*i/parts])
	}
	return bounds
}

type checkedReadKey struct{}

// WithCheckedRead returns a context under which the caller of Open checks
// every byte it reads against a digest it trusts (a catalog against its
// record's SHA-256): a store may then leave out a check of its own over
// the same bytes (the S3 SDK's CRC64 of each response, about 5 % of a
// small S3 mirror's CPU). A read whose bytes came out wrong is then found
// by the caller's check instead of failing as it is read.
func WithCheckedRead(ctx context.Context) context.Context {
	return context.WithValue(ctx, checkedReadKey{}, true)
}

// CheckedRead says whether ctx is from WithCheckedRead.
func CheckedRead(ctx context.Context) bool {
	b, _ := ctx.Value(checkedReadKey{}).(bool)
	return b
}

type contentSHA256Key struct{}

// WithContentSHA256 returns a context under which a Put writes bytes whose
// SHA-256 the caller knows (a catalog checked against its record): a
// store that can have the write checked against the sum does, and then
// stores nothing but those bytes (S3's x-amz-checksum-sha256); the others
// ignore it. A sum that is not 64 hex digits is no sum.
func WithContentSHA256(ctx context.Context, hexSum string) context.Context {
	return context.WithValue(ctx, contentSHA256Key{}, hexSum)
}

// ContentSHA256 is the sum given to WithContentSHA256, as 32 bytes; nil
// when there is none.
func ContentSHA256(ctx context.Context) []byte {
	s, _ := ctx.Value(contentSHA256Key{}).(string)
	if len(s) != 64 {
		return nil
	}
	sum, err := hex.DecodeString(s)
	if err != nil {
		return nil
	}
	return sum
}

type newTokenKey struct{}

// WithNewToken returns a context under which a Put must leave the object
// with a version token other than old (a FileInfo's Version), bytes the
// same or not: a removal conditional on old, sent before and landing
// after, then fails (internal/prune's grace, a sync that makes a
// candidate its own). A store whose every write makes a new token (a GCS
// generation) ignores it; S3, whose ETag is a digest of the bytes, writes
// in the other of its two forms (one PutObject, a multipart upload);
// a store without tokens ignores it. A server-side copy (Copier) may
// decline under it, and the caller streams.
func WithNewToken(ctx context.Context, old string) context.Context {
	return context.WithValue(ctx, newTokenKey{}, old)
}

// NewToken is the token given to WithNewToken; "" when none.
func NewToken(ctx context.Context) string {
	s, _ := ctx.Value(newTokenKey{}).(string)
	return s
}
