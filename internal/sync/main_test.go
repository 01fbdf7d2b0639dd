package sync_test

import (
	"os"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
)

// TestMain removes the upstreams generated once for several tests
// (fdltest.GenerateCopy) when they have all run.
func TestMain(m *testing.M) {
	code := m.Run()
	fdltest.RemoveTemplates()
	os.Exit(code)
}
