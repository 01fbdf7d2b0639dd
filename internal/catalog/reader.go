package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// A catalog is read in a reader: the reader binary beside this one, or
// this binary re-executed (program.go), with readerCommand (child.go),
// an empty environment, pipes for its stdin, stdout and stderr, and one
// more descriptor, the catalog the mirror fetched and hashed (or, for a
// Pool, the folder of one upstream's catalogs), open read-only. Before
// it parses a byte it confines itself (sandbox_linux.go). DuckDB's own
// security model assumes a database file from a trusted writer ("closer
// to loading a shared library than to opening a document"): a crafted
// catalog may crash it or allocate without end, and in a reader that
// costs one refusal, not the mirror.
//
// What a reader says is checked again here (protocol.go): a reader taken
// over by its catalog can say no more than the catalog's upstream could.

// Layers are the confinement layers a reader has beyond its own process,
// empty environment and rlimits.
type Layers struct {
	LandlockABI int  // the kernel's Landlock ABI the reader was confined with; 0: none
	Seccomp     bool // its seccomp filter is loaded
}

// The Landlock ABI a reader relies on. With its seccomp filter, ABI 1:
// Landlock rules the files it opens (its catalog, read-only; nothing
// written, made or removed), and the filter refuses what later ABIs
// added rules for (truncate, 3; TCP, 4, as every socket; signals and
// abstract sockets, 6, as every signal to another process and every
// socket). Without the filter, ABI 6, and Landlock is the one layer
// against all of them. Landlock below the ABI it relies on is counted
// as missing: at ABI 2 without seccomp a reader empties any file its
// uid may write; at ABI 5 it signals the mirror.
const (
	landlockWithSeccomp = 1
	landlockAlone       = 6
)

// LandlockNeeded is the Landlock ABI counted as a layer: 1 with seccomp,
// 6 without.
func (l Layers) LandlockNeeded() int {
	if l.Seccomp {
		return landlockWithSeccomp
	}
	return landlockAlone
}

// Landlock says whether the reader is confined by Landlock at an ABI
// that covers what it relies on Landlock for (LandlockNeeded).
func (l Layers) Landlock() bool { return l.LandlockABI > 0 && l.LandlockABI >= l.LandlockNeeded() }

// Missing names the layers a reader lacks: "landlock", "seccomp".
func (l Layers) Missing() []string {
	var m []string
	if !l.Landlock() {
		m = append(m, "landlock")
	}
	if !l.Seccomp {
		m = append(m, "seccomp")
	}
	return m
}

// ReasonReaderFailed is the reason a version is refused for when the
// reader of one of its catalogs failed (ReaderError).
const ReasonReaderFailed = "catalog-reader-failed"

// ReaderError is a catalog whose reader failed: it crashed, was killed by
// a limit or the timeout, broke the protocol or said something invalid.
// The catalog is refused; the next run tries it again.
type ReaderError struct {
	Catalog string // the catalog's name in the repository
	// Cause is what stopped the reader: "signal", "seccomp", "rlimit-cpu",
	// "rlimit-as", "timeout", "protocol", "exit", "sandbox".
	Cause  string
	Detail string // what happened, for the operator
}

func (e *ReaderError) Error() string {
	return fmt.Sprintf("catalog %s: its reader failed: %s", e.Catalog, e.Detail)
}

// Causes of a ReaderError.
const (
	CauseSignal      = "signal"     // a crash: SIGSEGV, SIGABRT, ...
	CauseSeccomp     = "seccomp"    // killed by its seccomp filter (SIGSYS)
	CauseCPU         = "rlimit-cpu" // killed at its CPU time limit
	CauseMemory      = "rlimit-as"  // out of its address space limit
	CauseTimeout     = "timeout"    // killed by the mirror at the catalog timeout
	CauseProtocol    = "protocol"   // broke the protocol or said something invalid
	CauseExit        = "exit"       // exited otherwise
	CauseNoSandbox   = "sandbox"    // a layer is missing and the sandbox is required
	readerGrace      = 2 * time.Second
	stderrKept       = 4 << 10
	baseAddressSpace = 5 << 29 // 2.5 GiB
)

// readerKnobs are what this package's tests may change of how readers
// start: layers off (to show what each one stops) and limits smaller.
type readerKnobs struct {
	noLandlock, noSeccomp bool
	landlockABI           int           // an older ruleset than maxLandlockABI, imitating an older kernel
	keepFDs, keepCaps     bool          // inherited descriptors and capabilities left to the reader
	noGroup               bool          // the reader in the mirror's process group, its pid alone killed, no WaitDelay
	readsPerReader        int           // a pool's reader's catalogs: 1 unless a test imitates the pools before issue 40
	idle                  time.Duration // a pooled reader's wait for its request: 0, the catalog timeout
	cpuSeconds            uint64        // 0: from the limits
	grace                 time.Duration
	exe                   *readerExe // the program readers run: nil, theReaderExe's
}

var knobs readerKnobs

// readerAddressSpace is a reader's RLIMIT_AS: DuckDB's memory limit is
// its own bound, honoured where it can be; this one holds where DuckDB's
// is not (a crafted file's allocations outside its buffer manager), with
// room for what the Go runtime, glibc and DuckDB reserve without using:
// 1.7 GB of address space before a catalog is opened, 1.9 GB after one
// of 400 files, on the test machine (2.0 and 2.1 GB in a race-detector
// build, whose shadow memory grows with the heap).
func readerAddressSpace(lim Limits) uint64 {
	base := uint64(baseAddressSpace)
	if raceEnabled {
		base += 2 << 30
	}
	return base + 4*uint64(lim.MemoryLimit)
}

// readerCPU is a reader's RLIMIT_CPU: the timeout of each catalog it
// may read, in CPU seconds, and one more. The mirror's own timer kills a
// reader that sleeps; this kills one that spins faster than the timer.
func readerCPU(lim Limits, reads int) uint64 {
	if knobs.cpuSeconds > 0 {
		return knobs.cpuSeconds
	}
	per := uint64(math.Ceil(lim.Timeout.Seconds()))
	return per*uint64(reads) + 1
}

var nonDumpable gosync.Once

// observed is the layers the last reader started had.
var observed atomic.Pointer[Layers]

func noteLayers(l Layers) { observed.Store(&l) }

// readersStarted counts the readers this process started (tests).
var readersStarted atomic.Int64

// readerPeakRSS is the largest peak resident set (VmHWM), in bytes, of
// the readers this process ended after an answer. Not their ru_maxrss:
// that counts the mirror's own, which a reader shares until its exec.
var readerPeakRSS atomic.Int64

// notePeak records the reader's VmHWM in readerPeakRSS, where it can.
func (p *readerProc) notePeak() {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return
	}
	_, v, ok := strings.Cut(string(b), "\nVmHWM:")
	if !ok {
		return
	}
	v, _, _ = strings.Cut(v, "\n")
	var kib int64
	if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kib); err == nil {
		readerPeakRSS.Store(max(readerPeakRSS.Load(), kib<<10))
	}
}

// SandboxNow is what the operator is shown of the readers' layers: those
// of the last reader started, else what the kernel would give one.
func SandboxNow() Layers {
	if l, ok := ObservedLayers(); ok {
		return l
	}
	return ProbeSandbox()
}

// SandboxStatus is Layers as status --json and /status.json show them.
type SandboxStatus struct {
	Landlock    bool `json:"landlock"`
	LandlockABI int  `json:"landlock_abi"`
	// LandlockNeeded is the ABI Landlock is counted at: 1 with
	// seccomp, 6 without.
	LandlockNeeded int      `json:"landlock_abi_needed"`
	Seccomp        bool     `json:"seccomp"`
	Missing        []string `json:"missing"`
	// Reader is the program readers run: the reader binary beside
	// fdl-mirror (ReaderProgram), or fdl-mirror's own, re-executed, for
	// the reason ReaderNote says.
	Reader     string `json:"reader"`
	ReaderNote string `json:"reader_note,omitempty"`
}

// Status is the layers as status shows them.
func (l Layers) Status() SandboxStatus {
	m := l.Missing()
	if m == nil {
		m = []string{}
	}
	path, note := ReaderNow()
	return SandboxStatus{Landlock: l.Landlock(), LandlockABI: l.LandlockABI, LandlockNeeded: l.LandlockNeeded(), Seccomp: l.Seccomp, Missing: m,
		Reader: path, ReaderNote: note}
}

// String says which layers a reader has, for logs and the status page.
func (l Layers) String() string {
	var have, lack []string
	if l.Landlock() {
		have = append(have, fmt.Sprintf("Landlock (ABI %d)", l.LandlockABI))
	} else if l.LandlockABI > 0 {
		lack = append(lack, fmt.Sprintf("Landlock at ABI %d, below the %d a reader needs without seccomp", l.LandlockABI, l.LandlockNeeded()))
	} else {
		lack = append(lack, "no Landlock")
	}
	if l.Seccomp {
		have = append(have, "seccomp")
	} else {
		lack = append(lack, "no seccomp")
	}
	switch {
	case len(lack) == 0:
		return "confined by " + have[0] + " and " + have[1]
	case len(have) == 1:
		return "confined by " + have[0] + " only: " + lack[0] + " on this kernel"
	}
	return "without Landlock or seccomp on this kernel (" + strings.Join(lack, ", ") + "; a process apart, with rlimits and an empty environment)"
}

// ObservedLayers is the layers of the last reader this process started;
// false before any.
func ObservedLayers() (Layers, bool) {
	if l := observed.Load(); l != nil {
		return *l, true
	}
	return Layers{}, false
}

// readerProc is a running reader.
type readerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *os.File
	in     *frameReader
	out    *frameWriter
	stderr *headBuffer
	layers Layers
	args   readerArgs
	reads  int // requests answered

	exited chan struct{} // closed once the reader has exited and been waited for
	mu     gosync.Mutex
	killed string // why the mirror killed it: CauseTimeout, "cancel"
	group  bool   // in a process group of its own
	// reaped is set as the reader is about to be reaped: its pid, and
	// its group's id, may then be another's.
	reaped atomic.Bool
}

// readerProcs is a reader's Go runtime setting: one processor. A
// reader's Go code serves one request at a time (DuckDB's threads are
// its own, not the runtime's); with GOMAXPROCS at the machine's cores its
// runtime started as many Ps and their idle threads, which spun and woke
// (sysmon, futexes, sched_yield) for nothing. Full copy of 10 versions x
// 30 files, 12 alternating runs: median 0.885 -> 0.755 s wall, 1.55 ->
// 1.37 s CPU; a million files' difference unchanged (1.27 s).
const readerProcs = "GOMAXPROCS=1"

// startReader starts a reader of root (a catalog, or a folder of them)
// that may read up to reads catalogs, and waits for its hello.
func startReader(ctx context.Context, root *os.File, lim Limits, reads int) (*readerProc, error) {
	nonDumpable.Do(func() { _ = makeNonDumpable() })
	readersStarted.Add(1)
	a := readerArgs{addressSpace: readerAddressSpace(lim), cpuSeconds: readerCPU(lim, reads), landlockABI: maxLandlockABI, noSeccomp: knobs.noSeccomp,
		keepFDs: knobs.keepFDs, keepCaps: knobs.keepCaps,
		memoryLimit: lim.MemoryLimit, threads: lim.Threads, reads: reads, nproc: readerNproc()}
	if knobs.landlockABI > 0 {
		a.landlockABI = knobs.landlockABI
	}
	if knobs.noLandlock {
		a.landlockABI = 0
	}
	exe := currentReaderExe()
	if knobs.exe != nil {
		exe = *knobs.exe
	}
	// The same arguments for either program: the reader binary's main
	// and any binary that links this package run them alike (child.go).
	cmd := exec.Command(exe.path)
	cmd.Args = append([]string{ReaderProgram}, a.argv()...)
	cmd.Env = readerEnv // nothing of the mirror's, credentials and all
	cmd.Dir = "/"
	if !knobs.noGroup {
		// A process group of its own, killed as one (killGroup): what
		// it may have forked dies with it. And Wait, which waits for
		// the end of stderr, gives up on it readerGrace after the
		// reader's end: whatever holds the pipe holds no sync.
		cmd.SysProcAttr = readerProcAttr()
		cmd.WaitDelay = readerGrace
	}
	cmd.ExtraFiles = []*os.File{root}
	// No Pdeathsig: it fires when the OS thread that started the reader
	// exits, which the Go runtime may do under a live mirror. A reader
	// outlives a killed mirror by one read at most: its stdin ends, and
	// its next write to stdout kills it (SIGPIPE).
	p := &readerProc{cmd: cmd, stderr: &headBuffer{}, args: a, exited: make(chan struct{}), group: !knobs.noGroup}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// Its stdout is a pipe of ours, not StdoutPipe's: Wait closes that
	// one as the reader exits, and what the reader wrote before it died
	// is still to be read.
	stdout, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		stdout.Close()
		return nil, fmt.Errorf("starting a catalog reader: %w", err)
	}
	p.stdin, p.stdout, p.in, p.out = stdin, stdout, newFrameReader(stdout), newFrameWriter(stdin)
	go func() {
		if p.group {
			// As the reader dies, and before it is reaped (so that its
			// pid, the group's id, is not reused meanwhile), its group
			// dies too.
			waitExited(cmd.Process.Pid)
			killGroup(cmd.Process.Pid)
			p.reaped.Store(true)
		}
		cmd.Wait()
		// What it wrote before it died is still to be read; a pipe that
		// something else still holds (a fork that left the group) ends
		// after a grace. The mirror closes it (wait).
		stdout.SetReadDeadline(time.Now().Add(readerGrace))
		close(p.exited)
	}()
	stop := p.watch(ctx, lim.Timeout+readerGrace)
	defer stop()
	typ, err := p.in.next()
	if err == nil && typ != frameHello {
		err = fmt.Errorf("%w: %q where a hello was due", errFrame, typ)
	}
	var version byte
	if err == nil {
		version = p.in.u8()
		p.layers.LandlockABI = int(p.in.u8())
		p.layers.Seccomp = p.in.u8() == 1
		err = p.in.done()
	}
	if err == nil && version != protocolVersion {
		err = fmt.Errorf("reader speaks protocol %d, the mirror %d", version, protocolVersion)
	}
	if err != nil {
		return nil, p.failed(ctx, "", err)
	}
	noteLayers(p.layers)
	if lim.RequireSandbox && len(p.layers.Missing()) > 0 {
		p.kill("failed")
		p.wait()
		return nil, &ReaderError{Cause: CauseNoSandbox, Detail: "no catalog is read without both layers (require_sandbox), and this kernel gives a reader no " + strings.Join(p.layers.Missing(), " and no ")}
	}
	return p, nil
}

// watch kills the reader when ctx is done or after d, until the returned
// stop is called.
func (p *readerProc) watch(ctx context.Context, d time.Duration) (stop func()) {
	if knobs.grace > 0 {
		d = d - readerGrace + knobs.grace
	}
	t := time.AfterFunc(d, func() { p.kill(CauseTimeout) })
	s := context.AfterFunc(ctx, func() { p.kill("cancel") })
	return func() {
		t.Stop()
		s()
	}
}

func (p *readerProc) kill(why string) {
	p.mu.Lock()
	if p.killed == "" {
		p.killed = why
	}
	p.mu.Unlock()
	// The group's id is the reader's pid, which may be another's once
	// the reader is reaped; its pidfd (Process.Kill) is not.
	if !p.group || p.reaped.Load() || !killGroup(p.cmd.Process.Pid) {
		p.cmd.Process.Kill()
	}
}

// close ends a reader that answered well: its stdin closed, it exits.
func (p *readerProc) close() {
	p.notePeak()
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(readerGrace):
		p.kill("closed")
	}
	p.wait()
}

// wait waits for the reader's end, and closes its stdout.
func (p *readerProc) wait() {
	<-p.exited
	p.stdout.Close()
}

// failed kills the reader after err (a broken pipe, a bad frame, an
// invalid row), waits for it and says why it failed: the way it died
// where it died, else err.
func (p *readerProc) failed(ctx context.Context, name string, err error) error {
	if errors.Is(err, errFrame) || errors.Is(err, errInvalid) {
		p.kill("failed")
	} else {
		// The pipe broke: the reader is dying, of its own cause.
		select {
		case <-p.exited:
		case <-time.After(readerGrace):
			p.kill("failed")
		}
	}
	p.wait()
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	if killed == "cancel" && ctx.Err() != nil {
		return ctx.Err()
	}
	re := &ReaderError{Catalog: name}
	st := p.cmd.ProcessState
	ws, _ := st.Sys().(syscall.WaitStatus)
	head := p.stderr.String()
	switch {
	case killed == CauseTimeout:
		re.Cause, re.Detail = CauseTimeout, "it did not answer within the catalog timeout and was killed (limit "+KeyTimeout+")"
	case ws.Signaled() && ws.Signal() == syscall.SIGSYS:
		re.Cause, re.Detail = CauseSeccomp, "killed by its seccomp filter (SIGSYS): it made a system call a reader may not make"
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL && killed != "failed" && cpuTime(st) >= time.Duration(p.args.cpuSeconds)*time.Second:
		re.Cause, re.Detail = CauseCPU, fmt.Sprintf("killed at its CPU time limit (RLIMIT_CPU %d s)", p.args.cpuSeconds)
	case ws.Signaled() && killed != "failed":
		re.Cause, re.Detail = CauseSignal, "killed by "+signalName(ws.Signal())
	case outOfMemory(head):
		re.Cause, re.Detail = CauseMemory, fmt.Sprintf("it ran out of memory (RLIMIT_AS %s): %s", FormatBytes(int64(min(p.args.addressSpace, math.MaxInt64))), firstLine(head))
	case crashSignal(head) != "":
		re.Cause, re.Detail = CauseSignal, "it crashed with "+crashSignal(head)+": "+firstLine(head)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) || killed == "failed" && !errors.Is(err, errFrame) && !errors.Is(err, errInvalid):
		if ws.Exited() && ws.ExitStatus() != 0 {
			re.Cause, re.Detail = CauseExit, fmt.Sprintf("it exited with status %d: %s", ws.ExitStatus(), firstLine(head))
		} else {
			re.Cause, re.Detail = CauseProtocol, fmt.Sprintf("it broke the protocol: %v", err)
		}
	default:
		re.Cause, re.Detail = CauseProtocol, fmt.Sprintf("it broke the protocol: %v", err)
	}
	return re
}

// errInvalid is a well-formed frame that says something no catalog can.
var errInvalid = errors.New("invalid")

func cpuTime(st *os.ProcessState) time.Duration {
	if st == nil {
		return 0
	}
	return st.UserTime() + st.SystemTime()
}

func signalName(s syscall.Signal) string {
	if n := map[syscall.Signal]string{syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS",
		syscall.SIGKILL: "SIGKILL", syscall.SIGILL: "SIGILL", syscall.SIGFPE: "SIGFPE", syscall.SIGTERM: "SIGTERM"}[s]; n != "" {
		return n
	}
	return fmt.Sprintf("signal %d (%s)", int(s), s)
}

// outOfMemory and crashSignal read what a reader's runtime printed as it
// died: a reader that crashes in DuckDB exits with status 2 after the Go
// runtime's report ("signal arrived during cgo execution"), not by the
// signal.
func outOfMemory(stderr string) bool {
	for _, s := range []string{"out of memory", "std::bad_alloc", "cannot allocate memory", "ThreadSanitizer failed to allocate"} {
		if strings.Contains(stderr, s) {
			return true
		}
	}
	return false
}

func crashSignal(stderr string) string {
	for _, s := range []string{"SIGSEGV", "SIGABRT", "SIGBUS", "SIGILL", "SIGFPE", "SIGTRAP"} {
		if strings.Contains(stderr, s) {
			return s
		}
	}
	return ""
}

// firstLine is the first line of a reader's stderr, cut and escaped: the
// rest is a goroutine dump.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if s == "" {
		return "(nothing on stderr)"
	}
	return Excerpt(s)
}

// headBuffer keeps the first stderrKept bytes written to it, and drops
// the rest: a reader may write without end.
type headBuffer struct {
	mu  gosync.Mutex
	buf []byte
}

func (h *headBuffer) Write(b []byte) (int, error) {
	h.mu.Lock()
	if room := stderrKept - len(h.buf); room > 0 {
		h.buf = append(h.buf, b[:min(room, len(b))]...)
	}
	h.mu.Unlock()
	return len(b), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.buf)
}

// Read reads the catalog at file (a local path) in a reader of its own,
// confined to that one file, and lists every file in ducklake_data_file
// and ducklake_delete_file, current and historical rows alike: a frozen
// catalog can time-travel to older snapshots. Rows of
// ducklake_files_scheduled_for_deletion are not read: those files are on
// their way out and may already be gone.
//
// name is the catalog's name in the repository (versions/<id>/
// ducklake.duckdb), which errors carry instead of the local path. A
// catalog that passes one of lim is refused with a *LimitError, one
// whose reader failed with a *ReaderError.
//
// The catalog is untrusted SQL: in the reader, DuckDB is locked down
// before it opens the file (no extensions, no file but this one, the
// configuration locked), and only base tables are read, so no view,
// macro or generated column of the catalog runs.
func Read(ctx context.Context, file, name string, lim Limits) (*Catalog, error) {
	s, err := readSortedAlone(ctx, file, name, lim, "")
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Catalog()
}

// readSortedAlone is Read with the files left in a Sorted, sorted in a
// folder made in sortIn (os.TempDir where empty).
func readSortedAlone(ctx context.Context, file, name string, lim Limits, sortIn string) (*Sorted, error) {
	if name == "" {
		name = file
	}
	lim = lim.WithDefaults()
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", name, err)
	}
	defer f.Close()
	p, err := startReader(ctx, f, lim, 1)
	if err != nil {
		return nil, rename(err, name)
	}
	sorter := newFileSorter(sortIn, name, sortBudgetOf(lim, file))
	defer sorter.close()
	c, err := p.readCatalog(ctx, request{name: name, lim: lim}, sorter)
	if err != nil {
		return nil, err
	}
	p.close()
	return sorter.finish(*c)
}

// rename names the catalog in a ReaderError that failed before it knew it.
func rename(err error, name string) error {
	var re *ReaderError
	if errors.As(err, &re) && re.Catalog == "" {
		re.Catalog = name
	}
	return err
}

// readCatalog asks the reader for one catalog and checks the answer
// frame by frame; each file row, once checked, goes to the sorter (which
// the caller finishes once the reader is let go). A reader that fails is
// killed and its catalog refused with a *ReaderError; one that refuses
// the catalog is killed too (its DuckDB may hold what it should not),
// and the refusal returned.
func (p *readerProc) readCatalog(ctx context.Context, q request, s *fileSorter) (*Catalog, error) {
	return p.request(ctx, q, s.add, nil)
}

// takeError is an error of the mirror's own while it took a file a
// reader sent (a sort that could not write its run): the reader is
// stopped, and the error is the mirror's, not the reader's failure.
type takeError struct{ error }

func (e takeError) Unwrap() error { return e.error }

// request asks the reader q and checks the answer; for a difference (q.diff), the
// counts the reader announces go to d.
func (p *readerProc) request(ctx context.Context, q request, each func(File) error, d *Difference) (*Catalog, error) {
	stop := p.watch(ctx, q.lim.Timeout+readerGrace)
	defer stop()
	if err := writeRequest(p.out, q); err != nil {
		return nil, p.failed(ctx, q.name, err)
	}
	c, refusal, err := p.answer(q, each, d)
	var te takeError
	switch {
	case errors.As(err, &te):
		p.kill("failed")
		p.wait()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, te.error
	case err != nil:
		return nil, p.failed(ctx, q.name, err)
	}
	if refusal != nil {
		p.notePeak()
		p.kill("refused")
		p.wait()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, refusal
	}
	p.reads++
	return c, nil
}

// answer reads one answer: the catalog, or the reader's refusal of it;
// err when the reader broke the protocol or said something no catalog
// can say.
func (p *readerProc) answer(q request, each func(File) error, d *Difference) (c *Catalog, refusal error, err error) {
	in := p.in
	typ, err := in.next()
	if err != nil {
		return nil, nil, err
	}
	meta := byte(frameMeta)
	if q.diff {
		meta = frameDiffMeta
	}
	switch typ {
	case frameRefusal:
		return p.refusal(q)
	case meta:
	default:
		return nil, nil, fmt.Errorf("%w: frame %q where a catalog or a refusal was due", errFrame, typ)
	}
	c = &Catalog{DuckLakeVersion: in.str(), DataPath: in.str()}
	if q.diff {
		d.ChildRows, d.ParentRows, d.SameRows, d.FoldedRows, d.RemovedRows = int64(in.u64()), int64(in.u64()), int64(in.u64()), int64(in.u64()), int64(in.u64())
	}
	count := in.u64()
	if err := in.done(); err != nil {
		return nil, nil, err
	}
	if err := checkString("ducklake version", c.DuckLakeVersion, 256); err != nil {
		return nil, nil, err
	}
	if err := checkString("data path", c.DataPath, maxDataPath); err != nil {
		return nil, nil, err
	}
	if !strings.HasSuffix(c.DataPath, "/") {
		return nil, nil, fmt.Errorf("%w: data path %s does not end in /", errInvalid, Excerpt(c.DataPath))
	}
	if count > uint64(q.lim.MaxFiles) {
		return nil, nil, fmt.Errorf("%w: %d files, more than the %d allowed", errInvalid, count, q.lim.MaxFiles)
	}
	if q.diff {
		if err := diffCounts(d, count, uint64(q.parentRows), q.lim); err != nil {
			return nil, nil, err
		}
	}
	var n, total, removed uint64
	var prev string
	for {
		typ, err := in.next()
		if err != nil {
			return nil, nil, err
		}
		if typ == frameEnd {
			break
		}
		if typ == frameRefusal {
			// A difference is refused where it goes wrong, among its
			// files as well as before them.
			return p.refusal(q)
		}
		if typ == frameRemoved && q.diff {
			// After the new files, the list's entries by their place in
			// it, in its order, as many as announced.
			at := int64(in.u64())
			if err := in.done(); err != nil {
				return nil, nil, err
			}
			if n != count {
				return nil, nil, fmt.Errorf("%w: a removed entry after %d of the %d files announced", errInvalid, n, count)
			}
			if removed++; removed > uint64(d.RemovedRows) {
				return nil, nil, fmt.Errorf("%w: more removed entries than the %d announced", errInvalid, d.RemovedRows)
			}
			if at < 0 || at >= q.parentRows || len(d.Removed) > 0 && at <= d.Removed[len(d.Removed)-1] {
				return nil, nil, fmt.Errorf("%w: removed entry %d of a list of %d, after %v", errInvalid, at, q.parentRows, d.Removed[max(0, len(d.Removed)-1):])
			}
			d.Removed = append(d.Removed, at)
			continue
		}
		if typ != frameFile {
			return nil, nil, fmt.Errorf("%w: frame %q among the files", errFrame, typ)
		}
		f := File{Path: in.str(), Size: int64(in.u64()), Footer: int64(in.u64())}
		flags := in.u8()
		if err := in.done(); err != nil {
			return nil, nil, err
		}
		if n++; n > count {
			return nil, nil, fmt.Errorf("%w: more files than the %d announced", errInvalid, count)
		}
		if !q.diff {
			// A catalog's rows come as read, a path once per row; a
			// difference's in path order, one per path.
			prev = ""
		}
		if err := checkFile(f, prev, flags); err != nil {
			return nil, nil, err
		}
		f.Delete, f.Puffin = flags&fileDelete != 0, flags&filePuffin != 0
		prev = f.Path
		if f.Size > 0 {
			total += uint64(f.Size)
		}
		if err := each(f); err != nil {
			return nil, nil, takeError{err}
		}
	}
	endCount, endTotal := in.u64(), in.u64()
	if err := in.done(); err != nil {
		return nil, nil, err
	}
	if q.diff && removed != uint64(d.RemovedRows) {
		return nil, nil, fmt.Errorf("%w: %d removed entries announced, %d came", errInvalid, d.RemovedRows, removed)
	}
	if endCount != n || n != count || endTotal != total {
		return nil, nil, fmt.Errorf("%w: the end says %d files of %d bytes, %d were announced, %d of %d bytes came", errInvalid, endCount, endTotal, count, n, total)
	}
	return c, nil, nil
}

// refusal reads a refusal frame: the reader's refusal of the catalog,
// or err where the frame says what no refusal can.
func (p *readerProc) refusal(q request) (c *Catalog, refusal error, err error) {
	in := p.in
	kind, key, msg := in.u8(), in.str(), in.str()
	if err := in.done(); err != nil {
		return nil, nil, err
	}
	if err := checkString("refusal", msg, maxMessage); err != nil {
		return nil, nil, err
	}
	msg = cleanMessage(msg)
	switch kind {
	case refusalLimit:
		switch key {
		case KeyMaxFiles, KeyTimeout, KeyMemoryLimit:
		default:
			return nil, nil, fmt.Errorf("%w: a refusal on limit %s", errInvalid, Excerpt(key))
		}
		return nil, &LimitError{Catalog: q.name, Key: key, Detail: msg}, nil
	case refusalList:
		if !q.diff {
			return nil, nil, fmt.Errorf("%w: a refusal of a list where no difference was asked", errInvalid)
		}
		return nil, fmt.Errorf("catalog %s: %w: %s", q.name, ErrParentList, msg), nil
	case refusalPlain:
		if !strings.HasPrefix(msg, "catalog "+q.name+": ") {
			msg = "catalog " + q.name + ": " + msg
		}
		return nil, errors.New(msg), nil
	}
	return nil, nil, fmt.Errorf("%w: a refusal of kind %d", errFrame, kind)
}

// checkFile checks a file as the reader's own read does (resolve): a
// clean path below the data path, no longer than MaxPathBytes, after the
// previous one where there is one (so none twice), sizes that are sizes.
func checkFile(f File, prev string, flags byte) error {
	switch {
	case len(f.Path) > MaxPathBytes:
		return fmt.Errorf("%w: a file path of %d bytes, more than %d", errInvalid, len(f.Path), MaxPathBytes)
	case backend.CheckName(f.Path) != nil:
		return fmt.Errorf("%w: file %s is not a clean relative path", errInvalid, Excerpt(f.Path))
	case prev != "" && f.Path <= prev:
		return fmt.Errorf("%w: file %s after %s: not in path order", errInvalid, Excerpt(f.Path), Excerpt(prev))
	case f.Size < -1 || f.Footer < -1:
		return fmt.Errorf("%w: file %s of size %d, footer %d", errInvalid, Excerpt(f.Path), f.Size, f.Footer)
	case flags&^(fileDelete|filePuffin) != 0:
		return fmt.Errorf("%w: file %s with flags %#x", errInvalid, Excerpt(f.Path), flags)
	}
	return nil
}
