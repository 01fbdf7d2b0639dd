package catalog

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the repository generatedCatalog generated once, when
// every test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	if oneVersion.dir != "" {
		os.RemoveAll(filepath.Dir(oneVersion.dir))
	}
	os.Exit(code)
}
