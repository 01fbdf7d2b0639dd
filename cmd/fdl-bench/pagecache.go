package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// evictFromPageCache drops the binaries' pages from the page cache before
// any is measured. A binary's peak RSS counts the pages of its file that
// it maps, and how many a fault maps depends on how the file came into
// the page cache: a binary the linker has just written sits there in
// large folios, mapped whole, and a no-op of the same fdl-mirror measured
// 56, 63 and 73 MiB for three builds of it, but 42-44 MiB each once read
// back from the disk, as an installed binary is. Each is written back
// first (only clean pages can be dropped).
func evictFromPageCache(paths ...string) {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			logf("page cache: %v", err)
			continue
		}
		if err := f.Sync(); err != nil {
			logf("page cache: %s: %v", p, err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			logf("page cache: %s: %v", p, err)
		}
		f.Close()
	}
}
