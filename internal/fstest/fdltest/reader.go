package fdltest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
)

// UseReaderBinary builds cmd/fdl-mirror-catalog-reader (without -race:
// its Go code is a few hundred lines around DuckDB, and the race detector
// cannot see into DuckDB's C++) and makes this test process start its
// catalog readers from it (catalog.UseReaderBinary), as fdl-mirror does
// from the binary beside it. Without it a test binary re-executes itself
// for every catalog: built with -race and with every initializer of the
// packages it tests, it spends about 0.15 s of CPU starting where the
// reader binary spends 0.03 s, and the suites start thousands of readers.
// TestMain calls it before m.Run, and the returned func after.
func UseReaderBinary() (remove func(), err error) {
	dir, err := os.MkdirTemp("", "fdltest-reader-")
	if err != nil {
		return nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	build := exec.Command("go", "build", "-ldflags=-w", "-o", dir+string(filepath.Separator),
		"github.com/fdl-mirror/fdl-mirror/cmd/fdl-mirror-catalog-reader")
	if out, err := build.CombinedOutput(); err != nil {
		remove()
		return nil, fmt.Errorf("building the catalog reader: %v\n%s", err, out)
	}
	if err := catalog.UseReaderBinary(filepath.Join(dir, catalog.ReaderProgram)); err != nil {
		remove()
		return nil, err
	}
	return remove, nil
}

// Main is TestMain for a package whose tests read catalogs: its readers
// start from the reader binary (UseReaderBinary), and the upstreams
// generated once for several tests (GenerateCopy) are removed when they
// have all run. TestMain is then os.Exit(fdltest.Main(m)).
func Main(m *testing.M) int {
	removeReader, err := UseReaderBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer removeReader()
	defer RemoveTemplates()
	return m.Run()
}
