package local

import (
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// renameInto moves tmp, in the temporary folder, to name, whose folder d
// is open: one renameat(2) between two open folders, with no path walked.
// A rename never follows a symbolic link in its last component, and the
// folders were opened through the root.
func (l *Local) renameInto(tmp string, d *os.File, name string) error {
	return syscall.Renameat(l.tmpFd, tmp, int(d.Fd()), path.Base(name))
}

// openIn opens name, one component, in the open folder dirfd: one
// openat(2) with O_NOFOLLOW, so that it cannot leave the folder. The file
// is made with os.NewFile, which does not try (and fail) to register a
// regular file with the poller: os.OpenFile spends four fcntl(2) and an
// epoll_ctl(2) per file doing so. A symbolic link is refused here (ELOOP)
// and left to the caller's walk through the root. full names the file
// in messages.
func openIn(_ *os.Root, dirfd int, name string, flag int, perm os.FileMode, full string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), full), nil
}
