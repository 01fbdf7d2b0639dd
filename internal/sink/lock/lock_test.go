package lock_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

type record struct {
	Owner   string    `json:"owner"`
	Expires time.Time `json:"expires"`
	Token   string    `json:"token"`
}

// objectStore is a mirror on a real object-store server.
type objectStore struct {
	backend.Backend
	addr   string
	server *testserver.Process
}

// eachObjectStore runs test against a fresh mirror on the S3 gateway and
// one on the GCS emulator.
func eachObjectStore(t *testing.T, test func(t *testing.T, st objectStore)) {
	t.Run("s3", func(t *testing.T) {
		srv := testserver.S3(t)
		test(t, openObjectStore(t, srv.URL(srv.Bucket(t), "mirror"), srv.Process))
	})
	t.Run("gcs", func(t *testing.T) {
		srv := testserver.GCS(t)
		test(t, openObjectStore(t, srv.URL(srv.Bucket(t), "mirror"), srv.Process))
	})
}

func openObjectStore(t *testing.T, addr string, server *testserver.Process) objectStore {
	t.Helper()
	b, closeSink, err := location.OpenWritable(context.Background(), addr, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeSink() })
	return objectStore{Backend: b, addr: addr, server: server}
}

func readRecord(t *testing.T, b backend.Reader) record {
	t.Helper()
	data, err := backend.ReadAll(context.Background(), b, lock.Name, 1<<20)
	if err != nil {
		t.Fatalf("reading the lock: %v", err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("lock holds %q: %v", data, err)
	}
	return r
}

func writeRecord(t *testing.T, b backend.Backend, r record) {
	t.Helper()
	data, _ := json.Marshal(r)
	if err := b.Put(context.Background(), lock.Name, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
}

func mustLock(t *testing.T, b backend.Backend, opts lock.Options) *lock.Held {
	t.Helper()
	h, err := lock.Lock(context.Background(), b, opts)
	if err != nil {
		t.Fatalf("Lock as %q: %v", opts.Owner, err)
	}
	return h
}

func TestObjectLockOneOfTwoConcurrentLockersWins(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		var wg sync.WaitGroup
		held := make([]*lock.Held, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				held[i], errs[i] = lock.Lock(context.Background(), st, lock.Options{Owner: "run-" + strconv.Itoa(i)})
			}()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("want exactly one lock taken; errors: %v, %v", errs[0], errs[1])
		}
		winner, loser := 0, 1
		if errs[0] != nil {
			winner, loser = 1, 0
		}
		rec := readRecord(t, st)
		if rec.Owner != "run-"+strconv.Itoa(winner) {
			t.Fatalf("lock object names %q, want run-%d", rec.Owner, winner)
		}
		err := errs[loser]
		if !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("loser's error = %v, want ErrLocked", err)
		}
		if want := rec.Expires.Format(time.RFC3339); !strings.Contains(err.Error(), rec.Owner) || !strings.Contains(err.Error(), want) {
			t.Fatalf("loser's error %q does not name owner %q and expiry %s", err, rec.Owner, want)
		}
		if err := held[winner].Release(context.Background()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if _, err := st.Stat(context.Background(), lock.Name); !backend.IsNotExist(err) {
			t.Fatalf("lock object still there after Release: %v", err)
		}
		mustLock(t, st, lock.Options{Owner: "next"}).Release(context.Background())
	})
}

func TestObjectLockWaiterGetsItWhenReleased(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		first := mustLock(t, st, lock.Options{Owner: "first"})
		released := make(chan time.Time, 1)
		go func() {
			time.Sleep(500 * time.Millisecond)
			released <- time.Now()
			first.Release(context.Background())
		}()
		second := mustLock(t, st, lock.Options{Owner: "second", Wait: 10 * time.Second})
		defer second.Release(context.Background())
		if got := time.Now(); got.Before(<-released) {
			t.Fatal("second locker got the lock before the first released it")
		}
		if rec := readRecord(t, st); rec.Owner != "second" {
			t.Fatalf("lock names %q", rec.Owner)
		}
	})
}

func TestObjectLockExpiredIsTakenOver(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		// What a killed run leaves: a lock nobody renews.
		writeRecord(t, st, record{Owner: "killed", Expires: time.Now().Add(-time.Second), Token: "dead"})
		h := mustLock(t, st, lock.Options{Owner: "new"})
		defer h.Release(context.Background())
		if rec := readRecord(t, st); rec.Owner != "new" || rec.Token == "dead" {
			t.Fatalf("lock after takeover = %+v", rec)
		}
	})
}

// Several runs finding the same expired lock race to take it over; the
// read-back after each new lock leaves exactly one holding it.
func TestObjectLockExpiredRaceHasOneWinner(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		writeRecord(t, st, record{Owner: "killed", Expires: time.Now().Add(-time.Second), Token: "dead"})
		const n = 4
		var wg sync.WaitGroup
		held := make([]*lock.Held, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				held[i], errs[i] = lock.Lock(context.Background(), st, lock.Options{Owner: "run-" + strconv.Itoa(i)})
			}()
		}
		wg.Wait()
		winners := 0
		for i, err := range errs {
			switch {
			case err == nil:
				winners++
				if rec := readRecord(t, st); rec.Owner != "run-"+strconv.Itoa(i) {
					t.Errorf("run-%d holds the lock but it names %q", i, rec.Owner)
				}
				defer held[i].Release(context.Background())
			case !errors.Is(err, lock.ErrLocked):
				t.Errorf("run-%d: err = %v, want nil or ErrLocked", i, err)
			}
		}
		if winners != 1 {
			t.Fatalf("%d runs hold the lock, want 1; errors: %v", winners, errs)
		}
	})
}

// A Create whose answer is lost is retried by the client, and the retry
// finds the lock that the first try made: that is our lock, not another
// run's.
func TestObjectLockCreateWithLostAnswerIsTaken(t *testing.T) {
	srv := testserver.S3(t)
	target, _ := url.Parse(srv.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(target)
	var lost atomic.Int32
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodPut && strings.HasSuffix(resp.Request.URL.Path, "/"+lock.Name) &&
			resp.StatusCode == http.StatusOK && lost.Add(1) == 1 {
			return errors.New("answer lost on purpose") // the client gets a 502
		}
		return nil
	}
	proxy := httptest.NewServer(rp)
	t.Cleanup(proxy.Close)
	addr := strings.Replace(srv.URL(srv.Bucket(t), "mirror"), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1)
	st := openObjectStore(t, addr, srv.Process)
	h := mustLock(t, st, lock.Options{Owner: "me"})
	defer h.Release(context.Background())
	if lost.Load() == 0 {
		t.Fatal("no answer was lost; the test tested nothing")
	}
	if rec := readRecord(t, st); rec.Owner != "me" {
		t.Fatalf("lock names %q", rec.Owner)
	}
}

func TestObjectLockLiveIsNotTakenOverBeforeExpiry(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		expires := time.Now().Add(1500 * time.Millisecond)
		writeRecord(t, st, record{Owner: "slow", Expires: expires, Token: "live"})
		_, err := lock.Lock(context.Background(), st, lock.Options{Owner: "impatient"})
		if !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("Lock with Wait 0 on a live lock: err = %v, want ErrLocked", err)
		}
		if rec := readRecord(t, st); rec.Token != "live" {
			t.Fatalf("a refused Lock changed the lock: %+v", rec)
		}
		h := mustLock(t, st, lock.Options{Owner: "patient", Wait: 10 * time.Second})
		defer h.Release(context.Background())
		if time.Now().Before(expires) {
			t.Fatal("took the lock over before it expired")
		}
	})
}

func TestObjectLockIsRenewedWhileHeld(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		ttl := 3 * time.Second
		h := mustLock(t, st, lock.Options{Owner: "holder", TTL: ttl})
		first := readRecord(t, st)
		time.Sleep(2 * ttl) // the lock would have expired twice without renewal
		select {
		case <-h.Lost():
			t.Fatal("lock lost while nobody else touched it")
		default:
		}
		rec := readRecord(t, st)
		if rec.Token != first.Token || !rec.Expires.After(first.Expires.Add(ttl)) {
			t.Fatalf("lock not renewed: first %+v, now %+v", first, rec)
		}
		if _, err := lock.Lock(context.Background(), st, lock.Options{Owner: "other", TTL: ttl}); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("another Lock on a renewed lock: err = %v, want ErrLocked", err)
		}
		if err := h.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestObjectLockLostWhenTakenOver(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		ttl := 2 * time.Second
		h := mustLock(t, st, lock.Options{Owner: "holder", TTL: ttl})
		thief := record{Owner: "thief", Expires: time.Now().Add(time.Hour), Token: "stolen"}
		writeRecord(t, st, thief)
		select {
		case <-h.Lost():
		case <-time.After(3 * ttl):
			t.Fatal("Lost not closed after another run replaced the lock")
		}
		if err := h.Release(context.Background()); err == nil || !strings.Contains(err.Error(), "thief") {
			t.Fatalf("Release of a lost lock: err = %v, want one naming the thief", err)
		}
		if rec := readRecord(t, st); rec.Token != thief.Token || !rec.Expires.Equal(thief.Expires) {
			t.Fatalf("Release touched the other run's lock: %+v", rec)
		}
	})
}

func TestObjectLockLostWhenRenewalKeepsFailing(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		ttl := 3 * time.Second
		h := mustLock(t, st, lock.Options{Owner: "holder", TTL: ttl})
		st.server.Stop()
		// Every renewal the store accepted ended before this, so the lock
		// expires by stopped+ttl at the latest; Lost must come before.
		stopped := time.Now()
		select {
		case <-h.Lost():
		case <-time.After(3 * ttl):
			t.Fatal("Lost not closed while the store was gone")
		}
		if late := time.Since(stopped); late >= ttl {
			t.Fatalf("Lost closed %v after the store went away; the lock may have expired before", late)
		}
	})
}

// Local folders.

func localStore(t *testing.T, dir string) *local.Local {
	t.Helper()
	l, err := local.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// The helper process: the test binary run again with helperEnv set to the
// mirror's address (a folder or an s3:// URL).
const helperEnv = "FDL_MIRROR_LOCK_HELPER"

// helperTTL is the TTL of the helper's lock on an object store.
const helperTTL = time.Second

// TestLockHelperProcess is not a test: run by the test binary itself with
// helperEnv set, it takes the lock, says so, and waits to be killed.
func TestLockHelperProcess(t *testing.T) {
	addr := os.Getenv(helperEnv)
	if addr == "" {
		t.Skip("helper process for the killed-holder tests")
	}
	b, closeSink, err := location.OpenWritable(context.Background(), addr, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeSink()
	opts := lock.Options{Owner: "helper pid " + strconv.Itoa(os.Getpid()), TTL: helperTTL}
	if _, err := lock.Lock(context.Background(), b, opts); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("locked\n")
	time.Sleep(time.Minute)
	t.Fatal("helper was not killed")
}

// startHolder runs the helper process on addr and returns once it holds
// the lock.
func startHolder(t *testing.T, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	return cmd
}

func TestObjectLockOfKilledRunTakenOverAfterExpiry(t *testing.T) {
	eachObjectStore(t, func(t *testing.T, st objectStore) {
		cmd := startHolder(t, st.addr)
		holder := "helper pid " + strconv.Itoa(cmd.Process.Pid)
		if _, err := lock.Lock(context.Background(), st, lock.Options{Owner: "me"}); !errors.Is(err, lock.ErrLocked) || !strings.Contains(err.Error(), holder) {
			t.Fatalf("Lock while the helper holds it: err = %v, want ErrLocked naming %q", err, holder)
		}
		cmd.Process.Kill() // SIGKILL: its lock object stays, unrenewed
		cmd.Wait()
		expires := readRecord(t, st).Expires
		h := mustLock(t, st, lock.Options{Owner: "me", Wait: 10 * helperTTL})
		defer h.Release(context.Background())
		if time.Now().Before(expires) {
			t.Fatalf("took over a lock expiring at %v before it expired", expires)
		}
		if rec := readRecord(t, st); rec.Owner != "me" {
			t.Fatalf("lock names %q after takeover", rec.Owner)
		}
	})
}

func TestLocalLockFreedWhenHolderIsKilled(t *testing.T) {
	dir := t.TempDir()
	cmd := startHolder(t, dir)
	l := localStore(t, dir)
	_, err := lock.Lock(context.Background(), l, lock.Options{Owner: "me"})
	if !errors.Is(err, lock.ErrLocked) || !strings.Contains(err.Error(), "helper pid "+strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("Lock while the helper holds it: err = %v, want ErrLocked naming the helper", err)
	}
	cmd.Process.Kill() // SIGKILL: no chance to release anything
	cmd.Wait()
	h := mustLock(t, l, lock.Options{Owner: "me"})
	h.Release(context.Background())
}

func TestLocalLockWaitsAndClearsTemp(t *testing.T) {
	dir := t.TempDir()
	l := localStore(t, dir)
	first := mustLock(t, l, lock.Options{Owner: "first"})
	// A temporary file a killed writer left behind.
	leftover := filepath.Join(dir, filepath.FromSlash(local.TempDir), "half-written")
	if err := os.WriteFile(leftover, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Lock(context.Background(), l, lock.Options{Owner: "second"}); !errors.Is(err, lock.ErrLocked) || !strings.Contains(err.Error(), "first") {
		t.Fatalf("Lock with Wait 0 while held: err = %v, want ErrLocked naming first", err)
	}
	if _, err := os.Stat(leftover); err != nil {
		t.Fatalf("a refused Lock cleared the holder's temporary files: %v", err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		first.Release(context.Background())
	}()
	second := mustLock(t, l, lock.Options{Owner: "second", Wait: 10 * time.Second})
	defer second.Release(context.Background())
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file survived taking the lock: %v", err)
	}
}
