package prune

import (
	"context"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// A prune that removes data files makes every version's file list one of
// another epoch (a list says what the mirror had when it was written: a
// child's difference must not trust one that may name a file gone since),
// and removes the removed versions' lists; a prune that removes no data
// file leaves the lists as they are.
func TestAPruneThatRemovesDataFilesRetiresTheFileLists(t *testing.T) {
	ctx := context.Background()
	up, mirror, side := withdrawnBranch(t)
	main := strings.TrimSpace(string(readObject(t, mirror, "refs/heads/main")))
	s := sink.New(mirror, sink.Options{})
	epoch, err := s.State().FileListEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{main, side} {
		w, err := sink.NewFileListWriter(t.TempDir(), id, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Add(catalog.File{Path: "main/t/f.parquet", Size: 1, Footer: -1}); err != nil {
			t.Fatal(err)
		}
		if err := s.State().WriteFileList(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(id, epoch string) (*sink.FileList, error) {
		l, err := s.State().FetchFileList(ctx, id, epoch, t.TempDir())
		l.Remove()
		return l, err
	}
	// Nothing removed: the lists stand.
	if _, err := runStores(ctx, up, mirror, Options{Selected: func(ref string) bool { return ref != "refs/heads/side" }}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{main, side} {
		if l, err := fetch(id, epoch); l == nil || err != nil {
			t.Fatalf("the list of %s after a prune that removed nothing: %v, %v", id, l, err)
		}
	}
	rep, err := runStores(ctx, up, mirror, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.DataFilesRemoved) == 0 {
		t.Fatalf("the prune removed no data file: %+v", rep)
	}
	now, err := s.State().FileListEpoch(ctx)
	if err != nil || now == epoch {
		t.Fatalf("the epoch after a prune that removed data files: %q, %v (was %q)", now, err, epoch)
	}
	if l, err := fetch(main, now); l != nil || err == nil || !strings.Contains(err.Error(), "another epoch") {
		t.Fatalf("the remaining version's list from before the prune: %v, %v; want one of another epoch", l, err)
	}
	if l, err := fetch(side, now); l != nil || err != nil {
		t.Fatalf("the removed version's list: %v, %v; want none", l, err)
	}
}

func readObject(t *testing.T, b backend.Reader, name string) []byte {
	t.Helper()
	raw, err := backend.ReadAll(context.Background(), b, name, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
