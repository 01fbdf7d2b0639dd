package catalog

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// confine applies a reader's layers to the whole process, every thread
// of it (the Go runtime has several by now), before it reads a byte of a
// catalog:
//   - rlimits: address space, CPU time, 64 open files, files of 0 bytes
//     (it writes nothing), no core dump;
//   - no_new_privs;
//   - Landlock: no file but its root (descriptor 3) and, for a
//     difference, the parent's catalog (descriptor 4), read-only, and the
//     few DuckDB reads as it starts (its cgroup's limits, the CPUs); no TCP
//     bind or connect; no signal or abstract socket out of its domain;
//   - seccomp: a deny-list over an allow default (see deniedSyscalls)
//     that kills the process on a denied call.
//
// A layer the kernel lacks is left out and reported in the Layers; an
// rlimit or no_new_privs that fails is an error (every Linux has them).
func confine(a readerArgs) (Layers, error) {
	var l Layers
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
	} {
		if err := unix.Setrlimit(r.res, &unix.Rlimit{Cur: r.cur, Max: r.max}); err != nil {
			return l, fmt.Errorf("setting %s: %w", r.name, err)
		}
	}
	if err := ll.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return l, fmt.Errorf("setting no_new_privs: %w", err)
	}
	if !a.noLandlock {
		if abi, err := ll.LandlockGetABIVersion(); err == nil && abi > 0 {
			// V7 is what this machine's kernel has; BestEffort takes
			// what an older kernel has of it, and Layers says which ABI
			// that was. No rule for TCP ports: none may be bound or
			// connected to where the ABI has network rules (4+).
			read := landlock.AccessFSSet(ll.AccessFSReadFile)
			files := []string{readerRoot}
			if a.parent {
				files = append(files, readerParent)
			}
			rules := []landlock.Rule{
				landlock.PathAccess(read, files...),
				// DuckDB sizes its memory and threads from these as it
				// starts (and crashes where it cannot open the first).
				landlock.PathAccess(read, "/proc/self/cgroup", "/sys/fs/cgroup", "/sys/devices/system/cpu").IgnoreIfMissing(),
			}
			if err := landlock.V7.BestEffort().Restrict(rules...); err == nil {
				l.LandlockABI = min(abi, 7)
			}
		}
	}
	if !a.noSeccomp && seccomp.Supported() {
		filter := seccomp.Filter{
			NoNewPrivs: true,
			Flag:       seccomp.FilterFlagTSync,
			Policy: seccomp.Policy{
				DefaultAction: seccomp.ActionAllow,
				Syscalls:      []seccomp.SyscallGroup{{Action: seccomp.ActionKillProcess, Names: deniedSyscalls}},
			},
		}
		if err := seccomp.LoadFilter(filter); err == nil {
			l.Seccomp = true
		}
	}
	return l, nil
}

// readerMaxFiles is a reader's RLIMIT_NOFILE: DuckDB holds the catalog
// and a few of its own; the Go runtime a few more.
const readerMaxFiles = 64

// deniedSyscalls kill a reader that makes them. A deny-list over an
// allow default, not an allow-list: DuckDB's and the Go runtime's needs
// change with their versions, and a call an allow-list missed would kill
// every read; these are the calls through which a reader taken over by a
// catalog could reach past its process (run a program, open a socket,
// attach to or read another process, change what it sees of the
// filesystem, load code into the kernel), none of which reading a catalog
// needs. io_uring is here because its operations (open, connect) pass
// around seccomp.
var deniedSyscalls = []string{
	"execve", "execveat",
	"socket", "socketpair",
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_by_handle_at",
	"fsopen", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"keyctl", "add_key", "request_key",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "syslog",
}

// ProbeSandbox says which layers a reader would get on this kernel,
// without starting one: the status command and the daemon's gauge show
// it before any catalog is read.
func ProbeSandbox() Layers {
	var l Layers
	if abi, err := ll.LandlockGetABIVersion(); err == nil && abi > 0 {
		l.LandlockABI = min(abi, 7)
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
