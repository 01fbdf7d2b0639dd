package local

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// willNeed asks the kernel to start reading f into the page cache
// (posix_fadvise WILLNEED), without waiting for its bytes.
func willNeed(f *os.File) { unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_WILLNEED) }

// uncached says whether f's first byte is known not to be in the page
// cache: a read of it that must not wait for the disk (preadv2
// RWF_NOWAIT) says it would have to. A file system that cannot say,
// or a file of no bytes, is taken as cached.
func uncached(f *os.File) bool {
	var b [1]byte
	_, err := unix.Preadv2(int(f.Fd()), [][]byte{b[:]}, 0, unix.RWF_NOWAIT)
	return errors.Is(err, unix.EAGAIN)
}
