package sink

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
)

// BenchmarkFetchFileList fetches the list of FDL_LIST_VERSION from the
// mirror folder FDL_LIST_MIRROR (such as a bench mirror of a million
// files), as a difference's parent's is fetched.
func BenchmarkFetchFileList(b *testing.B) {
	dir, id := os.Getenv("FDL_LIST_MIRROR"), os.Getenv("FDL_LIST_VERSION")
	if dir == "" || id == "" {
		b.Skip("FDL_LIST_MIRROR and FDL_LIST_VERSION not set")
	}
	st, err := local.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	s := New(st, Options{})
	raw, err := os.ReadFile(filepath.Join(dir, ".fdl-mirror", FileListsDir, "epoch"))
	if err != nil {
		b.Fatal(err)
	}
	epoch := strings.TrimSpace(string(raw))
	tmp := b.TempDir()
	for b.Loop() {
		l, err := s.State().FetchFileList(context.Background(), id, epoch, tmp)
		if err != nil || l == nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(l.members)), "members")
		l.Remove()
	}
}
