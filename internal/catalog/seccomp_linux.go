package catalog

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// A reader's seccomp filter is a deny-list over an allow default, with
// argument conditions where a call is dangerous only toward others.
//
// Not an allow-list with an error default (Docker's model), for now:
// the reader runs DuckDB, C++ built by others with glibc under it, and
// the calls it makes change with each release, with its error paths and
// with the kernel (rseq, mseal, membarrier ...); the tests here would
// catch a missing call on the common paths only, and one missed on a
// rare path would fail catalogs nobody took over. The deny-list names
// every way out we know of: whatever reaches another process (fork,
// signals, limits, priorities, ptrace, process_vm_*, pidfds, F_SETOWN),
// the kernel (bpf, modules, io_uring, perf, keyrings), the network
// (socket), the filesystem beyond Landlock's reach (truncate, O_TRUNC,
// chmod, chown, times, xattrs, handles, mounts, inotify, fanotify) and
// shared state that outlives the reader (SysV IPC); and a call of any
// other architecture (i386 through IA-32 emulation, x32) kills the
// reader, so that no table but this one's applies.
//
// An unknown call of the build's architecture passes: that is the
// deny-list's weakness, and why Landlock and the process apart stay.

// The actions of the filter's groups.
var (
	actionKill   = seccomp.ActionKillProcess
	actionENOSYS = seccomp.Action(uint32(seccomp.ActionErrno) | uint32(unix.ENOSYS))
	actionEACCES = seccomp.Action(uint32(seccomp.ActionErrno) | uint32(unix.EACCES))
)

// killedSyscalls kill a reader that makes them, whatever their
// arguments: none is needed to read a catalog, each reaches past the
// process.
var killedSyscalls = []string{
	// run a program
	"execve", "execveat",
	// another process
	"fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "pidfd_send_signal",
	"kcmp", "process_madvise", "process_mrelease", "migrate_pages", "move_pages", "setsid", "setpgid",
	// the network (and abstract unix sockets)
	"socket", "socketpair",
	// the filesystem's view and what Landlock does not rule at every ABI
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_by_handle_at", "name_to_handle_at",
	"fsopen", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"truncate", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "fchownat", "lchown",
	"utime", "utimes", "utimensat", "futimesat",
	"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
	"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_init", "fanotify_mark",
	// shared memory and queues that outlive the reader (and escape RLIMIT_AS)
	"shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semtimedop", "semctl",
	"msgget", "msgsnd", "msgrcv", "msgctl",
	// the kernel
	"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"keyctl", "add_key", "request_key", "personality",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "syslog",
}

// seccompPolicy is the filter of a reader whose pid is self.
func seccompPolicy(self int) seccomp.Policy {
	s := uint64(self)
	notSelf := func(arg uint32) seccomp.ArgumentConditions {
		return seccomp.ArgumentConditions{{Argument: arg, Operation: seccomp.NotEqual, Value: 0}, {Argument: arg, Operation: seccomp.NotEqual, Value: s}}
	}
	not := func(arg uint32, v uint64) seccomp.ArgumentConditions {
		return seccomp.ArgumentConditions{{Argument: arg, Operation: seccomp.NotEqual, Value: v}}
	}
	const namespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	conditional := []struct {
		name string
		when []seccomp.ArgumentConditions // any of them
	}{
		// Threads only, in the reader's own namespaces.
		{"clone", []seccomp.ArgumentConditions{
			{{Argument: 0, Operation: seccomp.BitsNotSet, Value: unix.CLONE_THREAD}},
			{{Argument: 0, Operation: seccomp.BitsSet, Value: namespaces}},
		}},
		// Limits, priorities and CPUs of the reader alone (pid or tid 0,
		// or its own pid).
		{"prlimit64", []seccomp.ArgumentConditions{notSelf(0)}},
		{"setpriority", []seccomp.ArgumentConditions{not(0, unix.PRIO_PROCESS), notSelf(1)}},
		{"sched_setaffinity", []seccomp.ArgumentConditions{notSelf(0)}},
		{"sched_setscheduler", []seccomp.ArgumentConditions{notSelf(0)}},
		{"sched_setparam", []seccomp.ArgumentConditions{notSelf(0)}},
		{"sched_setattr", []seccomp.ArgumentConditions{notSelf(0)}},
		{"ioprio_set", []seccomp.ArgumentConditions{not(0, 1 /* IOPRIO_WHO_PROCESS */), notSelf(1)}},
		// Signals to itself only (the Go runtime signals its own
		// threads with tgkill), whatever Landlock's ABI; kill(0) would
		// reach its process group, the mirror's where it has none.
		{"kill", []seccomp.ArgumentConditions{not(0, s)}},
		{"tgkill", []seccomp.ArgumentConditions{not(0, s)}},
		{"tkill", []seccomp.ArgumentConditions{not(0, s)}},
		{"rt_sigqueueinfo", []seccomp.ArgumentConditions{not(0, s)}},
		{"rt_tgsigqueueinfo", []seccomp.ArgumentConditions{not(0, s)}},
		{"pidfd_open", []seccomp.ArgumentConditions{not(0, s)}},
		// SIGIO to itself only: a command with bits above 32 (which the
		// kernel drops) is refused as it cannot be compared.
		{"fcntl", []seccomp.ArgumentConditions{
			{{Argument: 1, Operation: seccomp.GreaterThan, Value: 0xffffffff}},
			{{Argument: 1, Operation: seccomp.Equal, Value: unix.F_SETOWN}, {Argument: 2, Operation: seccomp.NotEqual, Value: 0}, {Argument: 2, Operation: seccomp.NotEqual, Value: s}},
			{{Argument: 1, Operation: seccomp.Equal, Value: unix.F_SETOWN_EX}},
		}},
	}
	a, _ := buildArch()
	has := func(name string) bool { _, ok := a.SyscallNames[name]; return ok }
	kill := seccomp.SyscallGroup{Action: actionKill}
	for _, n := range killedSyscalls {
		if has(n) {
			kill.Names = append(kill.Names, n)
		}
	}
	for _, c := range conditional {
		if !has(c.name) {
			continue
		}
		for _, w := range c.when {
			kill.NamesWithCondtions = append(kill.NamesWithCondtions, seccomp.NameWithConditions{Name: c.name, Conditions: w})
		}
	}
	// clone3's arguments are behind a pointer the filter cannot read:
	// ENOSYS, on which glibc and the Go runtime fall back to clone.
	// openat2's flags too.
	enosys := seccomp.SyscallGroup{Action: actionENOSYS}
	for _, n := range []string{"clone3", "openat2"} {
		if has(n) {
			enosys.Names = append(enosys.Names, n)
		}
	}
	// An open that truncates, which Landlock rules from ABI 3 only:
	// refused as Landlock refuses it.
	eacces := seccomp.SyscallGroup{Action: actionEACCES}
	for _, c := range []struct {
		name string
		arg  uint32
	}{{"open", 1}, {"openat", 2}} {
		if has(c.name) {
			eacces.NamesWithCondtions = append(eacces.NamesWithCondtions, seccomp.NameWithConditions{Name: c.name, Conditions: seccomp.ArgumentConditions{{Argument: c.arg, Operation: seccomp.BitsSet, Value: unix.O_TRUNC}}})
		}
	}
	if has("creat") {
		eacces.Names = append(eacces.Names, "creat")
	}
	groups := []seccomp.SyscallGroup{kill}
	for _, g := range []seccomp.SyscallGroup{enosys, eacces} {
		if len(g.Names)+len(g.NamesWithCondtions) > 0 {
			groups = append(groups, g)
		}
	}
	return seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
}

// seccompProgram assembles the filter of a reader whose pid is self,
// its first instructions replaced: the library's jump to its default
// action (allow) on a foreign architecture, and its ENOSYS for x32
// calls, both become a kill. Nothing else of the program jumps across
// them.
func seccompProgram(self int) ([]bpf.Instruction, error) {
	a, err := buildArch()
	if err != nil {
		return nil, err
	}
	policy := seccompPolicy(self)
	insts, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	// The library's program: load arch; jump to the end if not ours (one
	// instruction, or two for a long jump); load nr; on x86_64 its x32
	// check (two); then the groups.
	body := -1
	for i, in := range insts[:min(len(insts), 4)] {
		if la, ok := in.(bpf.LoadAbsolute); ok && la.Off == 0 && i > 0 {
			body = i + 1
			break
		}
	}
	if _, ok := insts[0].(bpf.LoadAbsolute); !ok || body < 0 {
		return nil, fmt.Errorf("seccomp: the library's program starts %v, not as this code expects", insts[:min(len(insts), 4)])
	}
	kill := bpf.RetConstant{Val: uint32(actionKill)}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.ID), SkipTrue: 1},
		kill,
		bpf.LoadAbsolute{Off: 0, Size: 4}, // nr
	}
	if a.ID == arch.X86_64.ID {
		if len(insts) < body+2 {
			return nil, fmt.Errorf("seccomp: no x32 check in the library's program")
		}
		if j, ok := insts[body].(bpf.JumpIf); !ok || j.Val != uint32(arch.X32.SeccompMask) {
			return nil, fmt.Errorf("seccomp: the library's x32 check is %v", insts[body])
		}
		body += 2
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: uint32(arch.X32.SeccompMask), SkipFalse: 1}, kill)
	}
	return append(prog, insts[body:]...), nil
}
