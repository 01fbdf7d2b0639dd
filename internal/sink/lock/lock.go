package lock

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
)

// Name is the lock's object in an object-store mirror, and its file in
// a local one. Readers ignore it: it sits under backend.ReservedPrefix.
const Name = backend.ReservedPrefix + "lock"

// ErrLocked is wrapped by Lock's error when another run holds the lock
// and did not let go within Options.Wait.
var ErrLocked = errors.New("mirror is locked by another run")

// DefaultTTL is how long an object-store lock lives without renewal.
const DefaultTTL = 2 * time.Minute

// Options say who locks and how patiently.
type Options struct {
	// Owner names this run in the lock, for the message another run
	// shows (default "hostname pid N").
	Owner string
	// TTL is how long an object-store lock stays valid without renewal
	// (default 2 min). It is renewed every TTL/3 while held.
	TTL time.Duration
	// Wait is how long to wait for a lock held by another run before
	// giving up; 0 gives up at once.
	Wait   time.Duration
	Logger *zap.Logger
}

// lockRecord is the content of an object-store lock.
type lockRecord struct {
	Owner   string    `json:"owner"`
	Expires time.Time `json:"expires"`
	Token   string    `json:"token"`
}

// Held is a lock this run holds.
type Held struct {
	b     backend.Backend // object store; nil for a local folder
	file  *os.File        // local folder: the flock(2)ed file
	rec   lockRecord      // Expires is the renewal goroutine's alone
	owner string
	log   *zap.Logger
	stop  context.CancelFunc
	done  chan struct{} // closed when the renewal goroutine has ended
	lost  chan struct{}
	lose  sync.Once
	freed sync.Once

	// The lease as this process's own clock sees it: leaseFrom is when
	// the expiry the store holds was computed (before the write that
	// carried it), so leaseFrom+ttl is never later than the expiry a
	// taker reads. It keeps Go's monotonic reading; see CheckLease.
	leaseMu   sync.Mutex
	leaseFrom time.Time
	ttl       time.Duration
}

// Lock takes the mirror's lock so that two runs (a CronJob that ran long,
// two replicas) do not write it at once.
//
// A local folder is locked with flock(2) on .fdl-mirror/lock: the kernel
// drops it when the process dies, so a killed run never blocks the next.
// Temporary files a killed run left are then cleared.
//
// An object store gets a lock object, Name, holding owner, expiry and
// a random token. It is made with Create (If-None-Match: * on S3, a
// does-not-exist precondition on GCS), so of two runs starting together
// exactly one gets it. The holder renews it every TTL/3, after checking
// that the object still carries its token; if renewal keeps failing until
// the lock is close to expiry (see renew), or the token changed, Lost is
// closed and the run must stop.
//
// A lock past its expiry is taken over by overwriting it with ours (Put):
// the lock object never disappears during a takeover, so a run that finds
// none can only be after a release, and its Create at the first try wins
// outright. Two runs taking over the same expired lock at once race: A
// overwrites it; B, which read the old lock before A's write, overwrites
// A's. So a lock is read back after a pause (TTL/20, between 100 ms and
// 1 s) whenever this Lock call met another lock: A then sees B's token and
// goes back to waiting. The race remains only if B's read-to-write gap
// exceeds that pause (a stalled process or network); then A's next
// renewal, at most TTL/3 later, sees B's token and closes Lost, and both
// runs wrote for that long (Check, before refs move, sees it at once).
// Expiry is judged by the taker's clock against the holder's, so clocks
// must agree to well within TTL.
//
// A lock created at the first try takes no pause (the common case: the
// previous run released its lock; 1 s of every small run otherwise). What
// that leaves open: a taker B that read an expired lock which its late
// holder then released, in B's one-request read-to-write gap, just as our
// Create landed; B overwrites ours. Check and the renewal catch that too.
func Lock(ctx context.Context, b backend.Backend, opts Options) (*Held, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Owner == "" {
		host, _ := os.Hostname()
		opts.Owner = host + " pid " + strconv.Itoa(os.Getpid())
	}
	var h *Held
	var err error
	if l, ok := backend.As[*local.Local](b); ok {
		h, err = lockLocal(ctx, l, opts)
	} else {
		h, err = lockObject(ctx, b, opts)
	}
	if err == nil {
		// With "releasing the lock", after nothing is written any more, a
		// record of who wrote the mirror when (replicas, manual syncs).
		h.log.Debug("took the lock", zap.String("owner", opts.Owner))
		h.owner = opts.Owner
	}
	return h, err
}

// Lost is closed when the lock could not be renewed or was taken by
// another run. A local folder's lock is never lost.
func (h *Held) Lost() <-chan struct{} { return h.lost }

// ErrLost is the cause (context.Cause) of a context from Watch that was
// cancelled because the lock was lost.
var ErrLost = errors.New("lost the mirror's lock")

// Watch returns ctx, cancelled with the cause ErrLost when the lock is
// lost, so that a run (a sync, a prune) stops at its next safe point; stop
// ends the watch. The one watch of every run that writes.
func (h *Held) Watch(ctx context.Context) (watched context.Context, stop func()) {
	watched, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-h.lost:
			h.log.Error("lost the mirror's lock; stopping at a safe point")
			cancel(ErrLost)
		case <-watched.Done():
		}
	}()
	return watched, func() { cancel(context.Canceled) }
}

// Check reads the lock object back and fails (wrapping ErrLocked) when it
// no longer carries this run's token: another run took it over, or it was
// removed by hand. A run calls it just before it moves refs, so that two
// runs never both do, whatever the renewal's timing. A local folder's
// flock cannot be taken over, and is not checked.
func (h *Held) Check(ctx context.Context) error {
	if h.file != nil {
		return nil
	}
	cur, err := readLock(ctx, h.b)
	switch {
	case backend.IsNotExist(err):
		err = fmt.Errorf("%w: %s: lock %s was removed by someone else", ErrLocked, h.b.Location(), Name)
	case err != nil:
		return fmt.Errorf("%s: reading back lock %s: %w", h.b.Location(), Name, err)
	case cur.Token != h.rec.Token:
		err = fmt.Errorf("%w: %s: lock %s was taken over by %s", ErrLocked, h.b.Location(), Name, cur.Owner)
	default:
		return nil
	}
	h.lose.Do(func() { close(h.lost) })
	return err
}

// Release gives the lock up: the object is removed if it still carries
// our token; the flock is dropped.
func (h *Held) Release(ctx context.Context) error {
	var err error
	h.freed.Do(func() {
		h.log.Debug("releasing the lock", zap.String("owner", h.owner))
		if h.file != nil {
			err = h.file.Close() // closing the last descriptor drops the flock
			return
		}
		h.stop()
		<-h.done
		err = h.removeIfOurs(ctx)
	})
	return err
}

// removeIfOurs removes the lock object if it still carries our token.
func (h *Held) removeIfOurs(ctx context.Context) error {
	cur, version, err := readLockVersion(ctx, h.b)
	switch {
	case backend.IsNotExist(err):
		return fmt.Errorf("%s: lock %s was already gone at release", h.b.Location(), Name)
	case err != nil:
		return err
	case cur.Token != h.rec.Token:
		return fmt.Errorf("%s: lock %s now belongs to %s; left in place", h.b.Location(), Name, cur.Owner)
	}
	// Removed only as read: a run paused between the read and the
	// removal must not remove the lock of one that took it over since.
	if err := backend.RemoveIfUnchanged(ctx, h.b, Name, version); backend.IsPreconditionFailed(err) {
		return fmt.Errorf("%s: lock %s was taken over at release; left in place", h.b.Location(), Name)
	} else if err != nil {
		return err
	}
	return nil
}

// newObjectHeld is the lock object this run will hold, with a random token.
func newObjectHeld(b backend.Backend, opts Options) *Held {
	log := opts.Logger.With(zap.String("sink", b.Location()))
	if !b.Properties().AtomicCreate {
		log.Warn("this store cannot create objects atomically; two runs starting at once may both take the lock")
	}
	var token [16]byte
	rand.Read(token[:])
	return &Held{
		b:    b,
		rec:  lockRecord{Owner: opts.Owner, Token: hex.EncodeToString(token[:])},
		log:  log,
		done: make(chan struct{}),
		lost: make(chan struct{}),
	}
}

func lockObject(ctx context.Context, b backend.Backend, opts Options) (*Held, error) {
	h := newObjectHeld(b, opts)
	log := h.log
	deadline := time.Now().Add(opts.Wait)
	// A waiter reads the lock (one small GET) this often.
	poll := min(max(opts.TTL/8, 50*time.Millisecond), time.Second)
	// A new lock is confirmed after this pause (see Lock): far longer than
	// the one request between a rival taker's read and its write.
	settle := min(max(opts.TTL/20, 100*time.Millisecond), time.Second)
	// contended: a Create found a lock there. Ours is then read back after
	// settle (see Lock): a rival may have read the same expired lock.
	contended := false
	h.ttl = opts.TTL
	for {
		h.setLeaseFrom(time.Now())
		h.rec.Expires = time.Now().Add(opts.TTL).UTC()
		err := b.Create(ctx, Name, bytes.NewReader(h.rec.encode()), int64(len(h.rec.encode())))
		if errors.Is(err, backend.ErrExist) {
			contended = true
			cur, curVersion, rerr := readLockVersion(ctx, b)
			switch {
			case backend.IsNotExist(rerr):
				continue // released meanwhile
			case rerr != nil:
				return nil, rerr
			case cur.Token == h.rec.Token:
				// Our Create went through but its answer was lost, and
				// the retry found our own lock. Its expiry was computed
				// after leaseFrom was set: leaseFrom stays, the earlier.
				h.rec.Expires = cur.Expires
				err = nil
			case time.Now().After(cur.Expires):
				log.Warn("taking over an expired lock", zap.String("owner", cur.Owner), zap.Time("expired", cur.Expires))
				h.setLeaseFrom(time.Now())
				h.rec.Expires = time.Now().Add(opts.TTL).UTC()
				// Over the expired lock as read, where the store can: of
				// two runs taking it over at once, one wins outright.
				err = backend.ReplaceIfUnchanged(ctx, b, Name, h.rec.encode(), curVersion)
				if backend.IsPreconditionFailed(err) {
					continue // another run was first: its lock is read next
				}
				if err != nil {
					return nil, fmt.Errorf("taking over expired lock %s: %w", Name, err)
				}
			case !time.Now().Before(deadline):
				return nil, fmt.Errorf("%w: %s holds %s until %s", ErrLocked, cur.Owner, Name, cur.Expires.Format(time.RFC3339))
			default:
				log.Info("waiting for the lock", zap.String("owner", cur.Owner), zap.Time("expires", cur.Expires))
				if err := sleep(ctx, min(poll, time.Until(deadline))); err != nil {
					return nil, err
				}
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("taking lock %s: %w", Name, err)
		}
		if !contended {
			break // made at the first try: no rival taker to wait out (see Lock)
		}
		// Another lock was there: read ours back after a pause (see Lock).
		if err := settlePause(ctx, settle); err != nil {
			h.removeIfOurs(context.WithoutCancel(ctx))
			return nil, err
		}
		again, err := readLock(ctx, b)
		if err == nil && again.Token == h.rec.Token {
			break
		}
		if err != nil && !backend.IsNotExist(err) {
			h.removeIfOurs(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("reading back lock %s: %w", Name, err)
		}
		log.Warn("another run taking the expired lock over replaced ours; trying again")
	}
	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	h.stop = stop
	go h.renew(renewCtx, opts.TTL)
	return h, nil
}

// renew extends the lock every TTL/3 until stopped. A failed renewal is
// tried again every TTL/10; when a further try could not end well before
// the expiry, or another run holds the lock, the lock is lost. Each try
// is bounded by TTL/4, so a stalled store cannot hold one past the expiry.
func (h *Held) renew(ctx context.Context, ttl time.Duration) {
	defer close(h.done)
	wait := ttl / 3
	for {
		if sleep(ctx, wait) != nil {
			return
		}
		tryCtx, cancel := context.WithTimeout(ctx, ttl/4)
		err := h.renewOnce(tryCtx, ttl)
		cancel()
		if err == nil {
			wait = ttl / 3
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// A further try waits TTL/10 and may take TTL/4; it must end with
		// TTL/10 to spare, or the lock could expire while we still write.
		if !errors.Is(err, ErrLocked) && !time.Now().Before(h.rec.Expires) {
			// Tries end before the expiry, so a run past it was stopped
			// (SIGSTOP, a paused VM) and woke with its try's deadline
			// gone. Whether the lock is still its own is then the
			// store's to say, as it is for a run whose sleep outlasted
			// the pause: one more try, conditional like every renewal.
			tryCtx, cancel := context.WithTimeout(ctx, ttl/4)
			err = h.renewOnce(tryCtx, ttl)
			cancel()
			if err == nil {
				h.log.Warn("renewed the lock after its lease ran out; no other run had taken it")
				wait = ttl / 3
				continue
			}
		}
		if errors.Is(err, ErrLocked) || time.Until(h.rec.Expires) < ttl/10+ttl/4+ttl/10 {
			h.log.Error("lost the lock", zap.Error(err))
			h.lose.Do(func() { close(h.lost) })
			return
		}
		h.log.Warn("renewing the lock failed; will try again", zap.Error(err))
		wait = ttl / 10
	}
}

func (h *Held) renewOnce(ctx context.Context, ttl time.Duration) error {
	cur, version, err := readLockVersion(ctx, h.b)
	if backend.IsNotExist(err) {
		return fmt.Errorf("%w: lock %s was removed by someone else", ErrLocked, Name)
	}
	if err != nil {
		return err
	}
	if cur.Token != h.rec.Token {
		return fmt.Errorf("%w: lock %s was taken over by %s", ErrLocked, Name, cur.Owner)
	}
	rec := h.rec
	started := time.Now()
	rec.Expires = started.Add(ttl).UTC()
	// Renewed only as read: a renewal paused between its read and its
	// write must not overwrite the lock of a run that took it over.
	if err := backend.ReplaceIfUnchanged(ctx, h.b, Name, rec.encode(), version); backend.IsPreconditionFailed(err) {
		return fmt.Errorf("%w: lock %s was taken over while it was renewed", ErrLocked, Name)
	} else if err != nil {
		return err
	}
	h.rec.Expires = rec.Expires
	h.setLeaseFrom(started)
	return nil
}

// leaseMargin is how much of a lease CheckLease gives up: the clocks of
// this run and of a taker (which judges expiry by its wall clock against
// ours) must agree to within it, and a request sent just before the
// check must land within it.
func leaseMargin(ttl time.Duration) time.Duration { return ttl / 10 }

// ErrLeaseRanOut is wrapped (with ErrLost) by CheckLease's error.
var ErrLeaseRanOut = errors.New("the lock's lease may have run out")

// CheckLease fails, wrapping ErrLost and ErrLeaseRanOut, when by this
// process's own clocks the lease may have run out: more than TTL less a
// margin since the expiry the store holds was computed, by the monotonic
// clock or by the wall clock. It reads nothing, so a run calls it before
// each removal and each publishing write. The renewal goroutine and the
// store's conditions cannot do this alone: a process paused past its
// lease (SIGSTOP, a frozen VM) wakes with its next request already
// decided, and may send it before the renewal goroutine has run and seen
// that another run took over. Once it fails the lock counts as lost
// (Lost is closed) even if a renewal later finds no other taker: the run
// stops and the next one starts clean. A local folder's flock has no
// lease.
func (h *Held) CheckLease() error {
	if h.file != nil {
		return nil
	}
	h.leaseMu.Lock()
	from, ttl := h.leaseFrom, h.ttl
	h.leaseMu.Unlock()
	limit := ttl - leaseMargin(ttl)
	now := time.Now()
	// now.Sub uses the monotonic readings (a pause counts in full); the
	// wall clock is checked too, for a VM whose monotonic clock stood
	// still while it was frozen.
	elapsed, wall := now.Sub(from), now.Round(0).Sub(from.Round(0))
	if elapsed < limit && wall < limit {
		return nil
	}
	h.lose.Do(func() { close(h.lost) })
	return fmt.Errorf("%w: %s: %w: %v since it was last renewed (%v by the wall clock), its lease is %v less a margin of %v",
		ErrLost, h.b.Location(), ErrLeaseRanOut, elapsed.Round(time.Millisecond), wall.Round(time.Millisecond), ttl, leaseMargin(ttl))
}

func (h *Held) setLeaseFrom(t time.Time) {
	h.leaseMu.Lock()
	h.leaseFrom = t
	h.leaseMu.Unlock()
}

func (r lockRecord) encode() []byte {
	b, _ := json.Marshal(r)
	return b
}

func readLock(ctx context.Context, b backend.Reader) (lockRecord, error) {
	rec, _, err := readLockVersion(ctx, b)
	return rec, err
}

// readLockVersion is readLock that also gives the version token of the
// lock object read ("" on a store without conditional writes).
func readLockVersion(ctx context.Context, b backend.Reader) (lockRecord, string, error) {
	data, version, err := backend.ReadAllVersion(ctx, b, Name, 64<<10)
	if err != nil {
		return lockRecord{}, "", err
	}
	var rec lockRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.Token == "" {
		// Not ours to judge: a human should look before it is removed.
		return lockRecord{}, "", fmt.Errorf("%s: lock %s is not a lock record (%.100q); remove it by hand if no run holds it", b.Location(), Name, data)
	}
	return rec, version, nil
}

// settlePause is the pause before a taken-over lock is read back; a
// variable so that tests can see it taken without waiting for it.
var settlePause = sleep

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// lockLocal flocks <dir>/.fdl-mirror/lock and writes the owner into it,
// for the message a waiting run shows.
func lockLocal(ctx context.Context, l *local.Local, opts Options) (*Held, error) {
	p := filepath.Join(l.Dir(), filepath.FromSlash(Name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", p, err)
	}
	deadline := time.Now().Add(opts.Wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", p, err)
		}
		if !time.Now().Before(deadline) {
			owner, _ := io.ReadAll(io.LimitReader(f, 1024))
			f.Close()
			return nil, fmt.Errorf("%w: %s holds %s", ErrLocked, bytes.TrimSpace(owner), p)
		}
		if err := sleep(ctx, min(100*time.Millisecond, time.Until(deadline))); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(opts.Owner+"\n"), 0)
	}
	if err := l.ClearTemp(); err != nil {
		f.Close()
		return nil, err
	}
	done := make(chan struct{})
	close(done)
	return &Held{file: f, log: opts.Logger.With(zap.String("sink", l.Location())), done: done, lost: make(chan struct{})}, nil
}
