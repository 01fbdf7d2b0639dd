package testserver

import (
	"bytes"
	"errors"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Fault is what the proxy does to one request.
type Fault int

const (
	// Pass forwards the request untouched.
	Pass Fault = iota
	// Drop closes the connection without answering.
	Drop
	// Status500 answers 500 Internal Server Error without forwarding.
	Status500
	// Status503 answers 503 Service Unavailable without forwarding.
	Status503
	// Stall waits StallFor without answering, then closes the connection:
	// a client with a shorter timeout gives up first.
	Stall
	// CutBody forwards the request and the response's headers, then
	// closes the connection after CutAfter bytes of the body.
	CutBody
	// StallBody forwards the request and CutAfter bytes of the body, then
	// waits StallFor and closes the connection.
	StallBody
	// FlipByte forwards the request and the whole response with one bit
	// of the body's byte after CutAfter bytes flipped: a transfer that
	// damages bytes and keeps their number.
	FlipByte
)

func (f Fault) String() string {
	return [...]string{"pass", "drop", "500", "503", "stall", "cut-body", "stall-body", "flip-byte"}[f]
}

// Schedule decides the fault for the n-th request (counting from 1).
type Schedule func(n int64, r *http.Request) Fault

// EveryNth faults every n-th request, cycling through faults: with n=3
// and faults (Drop, Status503), requests 3, 9, 15… are dropped and 6, 12,
// 18… get 503; all others pass.
func EveryNth(n int64, faults ...Fault) Schedule {
	return func(k int64, _ *http.Request) Fault {
		if n <= 0 || len(faults) == 0 || k%n != 0 {
			return Pass
		}
		return faults[(k/n-1)%int64(len(faults))]
	}
}

// FaultProxy is an HTTP reverse proxy on 127.0.0.1 in front of a server,
// that injects faults by a deterministic schedule. It keeps the client's
// Host header (unless TargetHost), so S3 signatures made for the proxy's
// address stay valid.
type FaultProxy struct {
	URL string // http://127.0.0.1:port, to be used instead of the target

	// StallFor is how long Stall and StallBody wait (default 2 s).
	StallFor time.Duration
	// CutAfter is how many body bytes CutBody and StallBody let through
	// (default 1).
	CutAfter int64
	// TargetHost sends the target's address as the Host header instead of
	// the client's (for servers that route by host, as fake-gcs-server
	// does). Leave it false for S3, whose signatures cover the Host.
	TargetHost bool

	proxy    *httputil.ReverseProxy
	mu       sync.Mutex
	schedule Schedule
	failAll  Fault
	requests atomic.Int64
	faults   atomic.Int64
	pauses   []*Pause
	observe  func(*http.Request)
}

// OnRequest has f called with every request the proxy receives from now
// on, in the order received, before it is handled (nil: none): a log of
// what a run asked, in order. f may read the body if it puts it back.
func (p *FaultProxy) OnRequest(f func(*http.Request)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observe = f
}

// NewFaultProxy starts a proxy in front of target (http://host:port) that
// passes everything until SetSchedule or FailAll say otherwise; it is
// stopped when the test ends.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	tu, err := url.Parse(target)
	if err != nil {
		t.Fatalf("testserver: proxy target %q: %v", target, err)
	}
	tu.Path, tu.RawPath, tu.RawQuery = "", "", ""
	p := &FaultProxy{StallFor: 2 * time.Second, CutAfter: 1}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(tu)
			if !p.TargetHost {
				pr.Out.Host = pr.In.Host
			}
		},
		Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16},
		// Aborted and stalled requests are the point, not news.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: listening: %v", err)
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	p.URL = "http://" + l.Addr().String()
	return p
}

// SetSchedule sets the faults to inject from now on; nil passes all.
func (p *FaultProxy) SetSchedule(s Schedule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.schedule = s
}

// FailAll makes every request get fault f, whatever the schedule, until
// FailAll(Pass): an upstream that cannot complete anything.
func (p *FaultProxy) FailAll(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failAll = f
}

// Requests is the number of requests received.
func (p *FaultProxy) Requests() int64 { return p.requests.Load() }

// Faults is the number of faults injected. A CutBody, StallBody or
// FlipByte fault counts only when there was a body longer than CutAfter
// to cut or damage (a HEAD request has none).
func (p *FaultProxy) Faults() int64 { return p.faults.Load() }

// Pause is a process stopped by the proxy at a chosen request (see
// FaultProxy.StopOn).
type Pause struct {
	pid     int
	match   func(*http.Request) bool
	stopped chan struct{} // closed once the process is stopped
	resume  chan struct{} // closed by Resume
	done    chan struct{} // closed once the request was answered and the process continued
	taken   atomic.Bool
	resumed sync.Once
	// when is where the process is stopped: at the request (holdRequest),
	// once the server answered it (holdAnswer), or a while after
	// (stopLater, by delay).
	when  pauseWhen
	delay time.Duration
	// early, for stopLater: closed by the next request match accepts
	// before the timer fired, which is held and stops the process now.
	early     chan struct{}
	earlyOnce sync.Once
	fired     atomic.Bool // stopLater: stopped, by the timer or early
	// Request is the request that stopped the process ("PUT /bucket/key"),
	// set before Stopped is closed.
	Request string
}

// StopOn makes the proxy stop process pid with SIGSTOP when it receives
// the first request for which match is true, as a paused run (a GC pause,
// a frozen VM) is stopped just before a write: the request is held, not
// sent on. Resume sends it to the server and, once the server has
// answered, continues the process (SIGCONT) with that answer, so the
// request reaches the store after whatever other runs did meanwhile. The
// process is continued when the test ends, whatever happened.
func (p *FaultProxy) StopOn(t testing.TB, pid int, match func(*http.Request) bool) *Pause {
	return p.stopOn(t, pid, match, holdRequest, 0)
}

func (p *FaultProxy) stopOn(t testing.TB, pid int, match func(*http.Request) bool, when pauseWhen, delay time.Duration) *Pause {
	ps := &Pause{pid: pid, match: match, when: when, delay: delay,
		stopped: make(chan struct{}), resume: make(chan struct{}), done: make(chan struct{}), early: make(chan struct{})}
	p.mu.Lock()
	p.pauses = append(p.pauses, ps)
	p.mu.Unlock()
	t.Cleanup(func() {
		ps.Resume()
		if ps.taken.Load() {
			select {
			case <-ps.done:
			case <-time.After(10 * time.Second):
			}
		}
		syscall.Kill(pid, syscall.SIGCONT)
	})
	return ps
}

// pauseWhen says where a Pause stops its process.
type pauseWhen int

const (
	holdRequest pauseWhen = iota
	holdAnswer
	stopLater
)

// StopAfterAnswer is StopOn, but the request goes on to the server at
// once: the process is stopped once the server has answered, with that
// answer held until Resume, as a run paused just after a write landed
// (its removal done, say) and before it saw so.
func (p *FaultProxy) StopAfterAnswer(t testing.TB, pid int, match func(*http.Request) bool) *Pause {
	return p.stopOn(t, pid, match, holdAnswer, 0)
}

// StopLater is StopOn, but the request and its answer pass: the process
// is stopped delay after the answer was passed on, wherever its work has
// got to by then (a pause that falls on a timer, among the requests
// that follow), and at the latest at the next request match accepts,
// held: a process that would finish its work within delay (or whose
// test's timer is late, on a loaded machine) is still stopped, never
// let exit.
func (p *FaultProxy) StopLater(t testing.TB, pid int, match func(*http.Request) bool, delay time.Duration) *Pause {
	return p.stopOn(t, pid, match, stopLater, delay)
}

// Stopped is closed once the process is stopped at its request.
func (ps *Pause) Stopped() <-chan struct{} { return ps.stopped }

// Resume lets the held request go on to the server and continues the
// process once it is answered; Done is closed then.
func (ps *Pause) Resume() { ps.resumed.Do(func() { close(ps.resume) }) }

// Done is closed once the held request was answered and the process
// continued.
func (ps *Pause) Done() <-chan struct{} { return ps.done }

// laterPause returns a StopLater pause, taken and not yet fired, that
// matches r.
func (p *FaultProxy) laterPause(r *http.Request) *Pause {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ps := range p.pauses {
		if ps.when == stopLater && ps.taken.Load() && !ps.fired.Load() && ps.match(r) {
			return ps
		}
	}
	return nil
}

// takePause returns the first pause, not yet taken, that matches r.
func (p *FaultProxy) takePause(r *http.Request) *Pause {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ps := range p.pauses {
		if !ps.taken.Load() && ps.match(r) {
			ps.taken.Store(true)
			return ps
		}
	}
	return nil
}

// hold stops ps's process at r, waits for Resume, then sends r on and
// continues the process as soon as the server's answer is in.
func (p *FaultProxy) hold(ps *Pause, w http.ResponseWriter, r *http.Request) {
	switch ps.when {
	case holdAnswer:
		p.holdAnswer(ps, w, r)
		return
	case stopLater:
		p.proxy.ServeHTTP(w, r)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		req := r.Method + " " + r.URL.Path
		go func() {
			defer close(ps.done)
			select {
			case <-time.After(ps.delay):
			case <-ps.early:
				req += " (the timer late: stopped at the next, held)"
			}
			ps.fired.Store(true)
			if err := syscall.Kill(ps.pid, syscall.SIGSTOP); err != nil {
				log.Printf("testserver: stopping pid %d: %v", ps.pid, err)
			}
			ps.Request = req
			close(ps.stopped)
			<-ps.resume
			syscall.Kill(ps.pid, syscall.SIGCONT)
		}()
		return
	}
	defer close(ps.done)
	// The whole body first: the process is stopped with its request
	// sent, as if the pause fell just after it left.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if err := syscall.Kill(ps.pid, syscall.SIGSTOP); err != nil {
		log.Printf("testserver: stopping pid %d: %v", ps.pid, err)
	}
	ps.Request = r.Method + " " + r.URL.Path
	close(ps.stopped)
	<-ps.resume
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	p.proxy.ServeHTTP(&continueWriter{ResponseWriter: w, pid: ps.pid}, r)
	syscall.Kill(ps.pid, syscall.SIGCONT) // when the answer had no body
}

// holdAnswer sends r on, stops ps's process once the server answered,
// and passes the answer on after Resume.
func (p *FaultProxy) holdAnswer(ps *Pause, w http.ResponseWriter, r *http.Request) {
	defer close(ps.done)
	rec := httptest.NewRecorder()
	p.proxy.ServeHTTP(rec, r)
	if err := syscall.Kill(ps.pid, syscall.SIGSTOP); err != nil {
		log.Printf("testserver: stopping pid %d: %v", ps.pid, err)
	}
	ps.Request = r.Method + " " + r.URL.Path
	close(ps.stopped)
	<-ps.resume
	syscall.Kill(ps.pid, syscall.SIGCONT)
	maps.Copy(w.Header(), rec.Header())
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// continueWriter continues a stopped process when the server's answer to
// its held request starts.
type continueWriter struct {
	http.ResponseWriter
	pid  int
	once sync.Once
}

func (c *continueWriter) WriteHeader(code int) {
	c.once.Do(func() { syscall.Kill(c.pid, syscall.SIGCONT) })
	c.ResponseWriter.WriteHeader(code)
}

func (c *continueWriter) Write(b []byte) (int, error) {
	c.once.Do(func() { syscall.Kill(c.pid, syscall.SIGCONT) })
	return c.ResponseWriter.Write(b)
}

func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := p.requests.Add(1)
	p.mu.Lock()
	observe := p.observe
	p.mu.Unlock()
	if observe != nil {
		observe(r)
	}
	if ps := p.takePause(r); ps != nil {
		p.hold(ps, w, r)
		return
	}
	if ps := p.laterPause(r); ps != nil {
		// StopLater's backstop: this request waits, the process stopped,
		// until Resume.
		ps.earlyOnce.Do(func() { close(ps.early) })
		<-ps.stopped
		<-ps.resume
	}
	p.mu.Lock()
	f := p.failAll
	if f == Pass && p.schedule != nil {
		f = p.schedule(n, r)
	}
	p.mu.Unlock()
	if f != Pass && f != CutBody && f != StallBody && f != FlipByte {
		p.faults.Add(1)
	}
	switch f {
	case Drop:
		// Makes net/http close the connection without a response.
		panic(http.ErrAbortHandler)
	case Status500, Status503:
		code := http.StatusInternalServerError
		if f == Status503 {
			code = http.StatusServiceUnavailable
		}
		io.Copy(io.Discard, r.Body)
		http.Error(w, "injected fault", code)
		return
	case Stall:
		p.sleep(r)
		panic(http.ErrAbortHandler)
	case CutBody, StallBody:
		// The copy error makes ReverseProxy abort the connection, so the
		// client sees a body shorter than its Content-Length.
		rw := &cutWriter{ResponseWriter: w, left: p.CutAfter, cut: &p.faults}
		if f == StallBody {
			rw.stall = func() { p.sleep(r) }
		}
		p.proxy.ServeHTTP(rw, r)
		return
	case FlipByte:
		p.proxy.ServeHTTP(&flipWriter{ResponseWriter: w, left: p.CutAfter, flipped: &p.faults}, r)
		return
	}
	p.proxy.ServeHTTP(w, r)
}

// flipWriter writes the body with one bit flipped in the byte after the
// first left bytes.
type flipWriter struct {
	http.ResponseWriter
	left    int64 // -1 once flipped
	flipped *atomic.Int64
}

func (f *flipWriter) Write(b []byte) (int, error) {
	if f.left >= 0 && int64(len(b)) > f.left {
		d := append([]byte(nil), b...)
		d[f.left] ^= 0x20
		f.left = -1
		f.flipped.Add(1)
		return f.ResponseWriter.Write(d)
	}
	if f.left >= 0 {
		f.left -= int64(len(b))
	}
	return f.ResponseWriter.Write(b)
}

func (f *flipWriter) Flush() {
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

func (p *FaultProxy) sleep(r *http.Request) {
	select {
	case <-time.After(p.StallFor):
	case <-r.Context().Done():
	}
}

var errCut = errors.New("testserver: body cut by fault proxy")

// cutWriter lets left bytes of the body through, then fails every write
// (after stalling, for StallBody).
type cutWriter struct {
	http.ResponseWriter
	left  int64
	stall func()
	cut   *atomic.Int64 // counts the cut
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if int64(len(b)) <= c.left {
		c.left -= int64(len(b))
		return c.ResponseWriter.Write(b)
	}
	n, _ := c.ResponseWriter.Write(b[:c.left])
	c.left = 0
	c.cut.Add(1)
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if c.stall != nil {
		c.stall()
	}
	// ReverseProxy answers a failed write by closing the upstream body
	// and aborting the connection to the client.
	return n, errCut
}

func (c *cutWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
