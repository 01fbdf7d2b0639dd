package local

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing f's dirty pages to the
// disk now, without waiting for them (sync_file_range(2) with
// SYNC_FILE_RANGE_WRITE only): the next Barrier then waits for what is
// left, not for every byte written since the last one. This is no
// durability by itself (no metadata, no disk cache flush); the Barrier
// still makes it so. Git's core.fsyncMethod=batch does the same.
func startWriteback(f *os.File) {
	unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
