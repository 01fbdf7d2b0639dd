//go:build linux

package local_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
)

// resident says whether the first page of the file at p is in the page
// cache (mincore of a mapping of it).
func resident(t *testing.T, p string) bool {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, 1)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	return vec[0]&1 == 1
}

// ReadAhead brings files that are not in the page cache into it, without
// the caller reading them, and passes over what is not a regular file
// (a FIFO, which a plain open would wait on) or not there.
func TestReadAheadBringsFilesIntoThePageCache(t *testing.T) {
	dir := t.TempDir()
	var names []string
	for _, n := range []string{"data/a.parquet", "data/b.parquet", "data/c.parquet"} {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Repeat(n, 1000)), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		// Written back, then dropped from the page cache.
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
		if resident(t, p) {
			t.Skipf("%s stays in the page cache after POSIX_FADV_DONTNEED (a tmpfs?)", dir)
		}
		names = append(names, n)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "data", "fifo.parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ra, ok := backend.As[backend.ReadAheader](l)
	if !ok {
		t.Fatal("a local folder takes no read-ahead")
	}
	done := make(chan struct{})
	go func() {
		ra.ReadAhead(context.Background(), []string{"data/fifo.parquet", "data/gone.parquet", names[0], names[1], names[2]})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("ReadAhead still waits after 30 s (on the FIFO?)")
	}
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		deadline := time.Now().Add(10 * time.Second)
		for !resident(t, p) {
			if time.Now().After(deadline) {
				t.Fatalf("%s is not in the page cache 10 s after ReadAhead", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
