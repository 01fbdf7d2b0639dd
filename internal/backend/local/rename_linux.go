package local

import (
	"io/fs"
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

// openRegularIn opens name, one component, in the open folder dirfd for
// reading, if it is a regular file (see Local.openRegular): openat(2)
// with O_NONBLOCK, fstat(2), and one fcntl(2) clearing the flag, on the
// descriptor before it becomes an *os.File.
func openRegularIn(_ *os.Root, dirfd int, name string, full string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	var st unix.Stat_t
	if err = unix.Fstat(fd, &st); err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0) // O_RDONLY, no O_NONBLOCK
		case unix.S_IFDIR:
			err = fs.ErrNotExist
		case unix.S_IFIFO:
			err = &notRegularError{fs.ModeNamedPipe}
		case unix.S_IFSOCK:
			err = &notRegularError{fs.ModeSocket}
		case unix.S_IFCHR:
			err = &notRegularError{fs.ModeDevice | fs.ModeCharDevice}
		case unix.S_IFBLK:
			err = &notRegularError{fs.ModeDevice}
		default:
			err = &notRegularError{fs.ModeIrregular}
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), full), nil
}
