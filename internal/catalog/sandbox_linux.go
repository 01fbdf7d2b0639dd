package catalog

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	gosync "sync"
	"syscall"
	"time"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// confine applies a reader's layers to the whole process, every thread
// of it (the Go runtime has several by now), before it reads a byte of a
// catalog:
//   - nothing inherited: every inherited descriptor but 0-2 and the
//     catalog (3) closed (the mirror may hold descriptors
//     without CLOEXEC, a socket among them: through one a reader could
//     write past its socket ban);
//   - rlimits: address space, CPU time, 64 open files, files of 0 bytes
//     (it writes nothing), no core dump, and no more processes of its
//     uid than run now and a reader's threads (RLIMIT_NPROC: the
//     backstop of seccomp's fork ban; a fork would start with a CPU
//     count of its own);
//   - no capability, none in the bounding set (a mirror run as root);
//   - no_new_privs;
//   - Landlock: no file but its root (descriptor 3), read-only, and the
//     few DuckDB reads as it starts (its cgroup's limits, the CPUs); no TCP
//     bind or connect; no signal or abstract socket out of its domain;
//   - seccomp (seccompPolicy): the calls that reach past the process
//     kill it; a call of another architecture kills it.
//
// A layer the kernel lacks is left out and reported in the Layers; an
// rlimit, no_new_privs or a capability that cannot be dropped is an
// error (every Linux has them).
func confine(a readerArgs) (Layers, error) {
	var l Layers
	if !a.keepFDs {
		if err := closeInherited(); err != nil {
			return l, err
		}
	}
	nproc := a.nproc
	if nproc == 0 {
		n, err := tasksOfUID(os.Getuid())
		if err != nil {
			return l, fmt.Errorf("counting the tasks of uid %d for RLIMIT_NPROC: %w", os.Getuid(), err)
		}
		nproc = n + readerThreads
	}
	for _, r := range []struct {
		name     string
		res      int
		cur, max uint64
	}{
		{"RLIMIT_AS", unix.RLIMIT_AS, a.addressSpace, a.addressSpace},
		{"RLIMIT_CPU", unix.RLIMIT_CPU, a.cpuSeconds, a.cpuSeconds + 1},
		{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, readerMaxFiles, readerMaxFiles},
		{"RLIMIT_FSIZE", unix.RLIMIT_FSIZE, 0, 0},
		{"RLIMIT_CORE", unix.RLIMIT_CORE, 0, 0},
		{"RLIMIT_NPROC", unix.RLIMIT_NPROC, nproc, nproc},
	} {
		if err := unix.Setrlimit(r.res, &unix.Rlimit{Cur: r.cur, Max: r.max}); err != nil {
			return l, fmt.Errorf("setting %s: %w", r.name, err)
		}
	}
	if !a.keepCaps {
		if err := dropCapabilities(); err != nil {
			return l, err
		}
	}
	if err := ll.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return l, fmt.Errorf("setting no_new_privs: %w", err)
	}
	if a.landlockABI > 0 {
		if abi, err := ll.LandlockGetABIVersion(); err == nil && abi > 0 {
			// BestEffort takes what an older kernel has of the
			// ruleset's ABI (a.landlockABI: the newest this build
			// knows, or an older one a test imitates), and Layers says
			// which ABI that was. No rule for TCP ports: none may be
			// bound or connected to where the ABI has network rules (4+).
			read := landlock.AccessFSSet(ll.AccessFSReadFile)
			rules := []landlock.Rule{
				landlock.PathAccess(read, readerRoot),
				// DuckDB sizes its memory and threads from these as it
				// starts (and crashes where it cannot open the first).
				landlock.PathAccess(read, "/proc/self/cgroup", "/sys/fs/cgroup", "/sys/devices/system/cpu").IgnoreIfMissing(),
			}
			if err := landlockConfigs[a.landlockABI].BestEffort().Restrict(rules...); err == nil {
				l.LandlockABI = min(abi, a.landlockABI)
			}
		}
	}
	if !a.noSeccomp && seccomp.Supported() {
		if prog, err := seccompProgram(os.Getpid()); err == nil && loadSeccomp(prog) == nil {
			l.Seccomp = true
		}
	}
	return l, nil
}

// landlockConfigs are the rulesets of each Landlock ABI this build
// knows, by number: a reader is confined with the newest
// (maxLandlockABI); the tests imitate an older kernel with an older one.
var landlockConfigs = []landlock.Config{1: landlock.V1, 2: landlock.V2, 3: landlock.V3, 4: landlock.V4, 5: landlock.V5, 6: landlock.V6, 7: landlock.V7}

// maxLandlockABI is the newest Landlock ABI a reader asks for.
const maxLandlockABI = 7

// readerMaxFiles is a reader's RLIMIT_NOFILE: DuckDB holds the catalog
// and a few of its own; the Go runtime a few more.
const readerMaxFiles = 64

// readerThreads is what RLIMIT_NPROC leaves a reader beyond the tasks
// its uid runs as it starts: the Go runtime's threads and DuckDB's (one
// worker, a few of its own), with room for the mirror's and other
// readers' threads that start meanwhile (the limit counts every task of
// the uid).
const readerThreads = 512

// closeInherited closes every descriptor above 3 (the catalog) that the
// reader inherited:
// those without FD_CLOEXEC, which alone outlive an exec. Not a blanket
// close_range: by now the Go runtime (its epoll and eventfd) and the
// inits of the binary's packages may hold descriptors of their own,
// all opened with CLOEXEC as Go opens every descriptor, and closing
// the runtime's crashes it.
func closeInherited() error {
	const first = 4
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("closing inherited descriptors: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < first {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // the listing's own, closed meanwhile, or this process's
		}
		if err := unix.Close(fd); err != nil {
			return fmt.Errorf("closing inherited descriptor %d: %w", fd, err)
		}
	}
	return nil
}

// readerNproc is a reader's RLIMIT_NPROC, counted by the mirror (which
// runs as the reader's uid) and kept for a second: counting reads the
// status of every process, 7 to 11 ms of a reader's start on the test
// machine, and a run starts its readers in bursts. Those started within
// the second (a few threads each) fit in readerThreads. 0 where the
// tasks cannot be counted: the reader counts them itself, and says why
// it cannot.
func readerNproc() uint64 {
	nprocCount.Lock()
	defer nprocCount.Unlock()
	if time.Since(nprocCount.at) > time.Second {
		n, err := tasksOfUID(os.Getuid())
		if err != nil {
			return 0
		}
		nprocCount.n, nprocCount.at = n+readerThreads, time.Now()
	}
	return nprocCount.n
}

var nprocCount struct {
	gosync.Mutex
	at time.Time
	n  uint64
}

// tasksOfUID counts the tasks (threads) whose real uid is uid, as
// RLIMIT_NPROC counts them.
func tasksOfUID(uid int) (uint64, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var n uint64
	want := "\nUid:\t" + strconv.Itoa(uid) + "\t"
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil || !strings.Contains(string(b), want) {
			continue // gone meanwhile, or another uid's
		}
		_, v, ok := strings.Cut(string(b), "\nThreads:\t")
		if !ok {
			continue
		}
		v, _, _ = strings.Cut(v, "\n")
		if t, err := strconv.ParseUint(v, 10, 32); err == nil {
			n += t
		}
	}
	return n, nil
}

// dropCapabilities empties the bounding set, the ambient set and every
// capability of every thread. A mirror run as root starts its readers
// as root: CAP_DAC_OVERRIDE alone would open any file Landlock leaves
// out of its rules (none), CAP_SYS_RESOURCE lift its rlimits, CAP_KILL
// reach any process. A reader without capabilities (the usual case)
// cannot drop the bounding set, and needs not: no_new_privs and the
// exec ban keep it from ever gaining one.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		// A unit's system call filter may refuse capget: a reader that
		// is not root holds nothing to drop.
		if os.Geteuid() != 0 {
			return nil
		}
		return fmt.Errorf("reading capabilities: %w", err)
	}
	held := data[0].Permitted|data[1].Permitted|data[0].Effective|data[1].Effective != 0
	if !held && data[0].Inheritable|data[1].Inheritable == 0 {
		// Nothing held (a reader not run as root, or one whose
		// capabilities caps_linux.go dropped as it was loaded, before
		// any other thread was): no ambient capability either, as the
		// kernel keeps those within the permitted ones.
		return nil
	}
	if err := ll.AllThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	if held {
		for c := 0; c <= unix.CAP_LAST_CAP; c++ {
			if err := ll.AllThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
			}
		}
		// capset changes its own thread's: psx makes every thread call
		// it. On the heap, which does not move.
		hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		none := new([2]unix.CapUserData)
		_, _, e := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&none[0])), 0)
		runtime.KeepAlive(hdr)
		runtime.KeepAlive(none)
		if e != 0 {
			return fmt.Errorf("dropping capabilities: %w", e)
		}
	}
	return nil
}

// ProbeSandbox says which layers a reader would get on this kernel,
// without starting one: the status command and the daemon's gauge show
// it before any catalog is read.
func ProbeSandbox() Layers {
	var l Layers
	if abi, err := ll.LandlockGetABIVersion(); err == nil && abi > 0 {
		l.LandlockABI = min(abi, maxLandlockABI)
	}
	l.Seccomp = seccomp.Supported()
	return l
}

// makeNonDumpable keeps a reader (or anything else running as the same
// user) from attaching to the mirror or reading its memory through /proc:
// the mirror holds the stores' credentials.
func makeNonDumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

// loadSeccomp loads a filter on every thread (TSYNC); no_new_privs is
// set already.
func loadSeccomp(prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return err
	}
	f := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(f)
	if e != 0 {
		return e
	}
	return nil
}

// buildArch is the seccomp architecture of this build.
func buildArch() (*arch.Info, error) { return arch.GetInfo("") }

// readerProcAttr starts a reader in a process group of its own.
func readerProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// waitExited returns once the process pid has exited, without reaping
// it.
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// killGroup kills the process group of the reader pid, which leads it:
// false where there is none.
func killGroup(pid int) bool {
	return unix.Kill(-pid, unix.SIGKILL) == nil
}

// keepForExec keeps the reader binary f open for the life of the
// mirror, and names it as exec runs it: /proc/self/fd/N. N is high
// enough that forkExec's shuffle of a child's descriptors (0 to 4, and
// scratch ones just above) never lands on it; CLOEXEC, as the kernel
// opens the file before it closes those.
func keepForExec(f *os.File) (string, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 100)
	if err != nil {
		return "", fmt.Errorf("keeping it open: %w", err)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd), nil
}
