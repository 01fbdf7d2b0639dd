package sync_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
)

// TestMain starts the package's catalog readers from the reader binary
// (fdltest.UseReaderBinary), and removes the upstreams generated once
// for several tests (fdltest.GenerateCopy) when they have all run.
func TestMain(m *testing.M) {
	removeReader, err := fdltest.UseReaderBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	fdltest.RemoveTemplates()
	removeReader()
	os.Exit(code)
}
