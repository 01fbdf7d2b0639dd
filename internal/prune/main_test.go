package prune

import (
	"os"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
)

// TestMain removes the upstream generated once for the tests
// (withdrawnBranch), when they have all run.
func TestMain(m *testing.M) {
	code := m.Run()
	fdltest.RemoveTemplates()
	os.Exit(code)
}
