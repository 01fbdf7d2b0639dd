package local

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// syncfsFunc is syncfs(2) on the file system of f; errors.ErrUnsupported
// where the kernel (or a seccomp filter) refuses the call itself. A test
// replaces it to take the fallback.
var syncfsFunc = func(f *os.File) error {
	err := unix.Syncfs(int(f.Fd()))
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		return errors.ErrUnsupported
	}
	return err
}

func deviceOf(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev)
	}
	return 0
}
