package sync_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// A run after one new version checks only the files the new version adds
// to its parent's, one by one, instead of listing the sink's whole
// data_dir: what an incremental run costs follows what is new, not the
// size of the repository (issue 6).

// recorder is a sink that records the names it is asked to Stat and the
// prefixes it is asked to List.
type recorder struct {
	backend.Backend
	mu    sync.Mutex
	stats []string
	lists []string
}

func (r *recorder) Stat(ctx context.Context, name string) (backend.FileInfo, error) {
	r.mu.Lock()
	r.stats = append(r.stats, name)
	r.mu.Unlock()
	return r.Backend.Stat(ctx, name)
}

func (r *recorder) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	r.mu.Lock()
	r.lists = append(r.lists, prefix)
	r.mu.Unlock()
	return r.Backend.List(ctx, prefix, fn)
}

func (r *recorder) Unwrap() backend.Reader { return r.Backend }

// dataFilesIn returns the repo-relative paths of the files under dir/data.
func dataFilesIn(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	root := filepath.Join(dir, "data")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func syncInto(t *testing.T, up, mirror string) (*fdlsync.Report, *recorder) {
	t.Helper()
	var rec *recorder
	rep, err := runLocalThrough(t, up, mirror, fdlsync.Options{Concurrency: 4}, func(b backend.Backend) backend.Backend {
		rec = &recorder{Backend: b}
		return rec
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep, rec
}

// grown generates a repository, mirrors it, and adds one version of three
// files upstream; it returns the folders and the new files.
func grown(t *testing.T) (up, mirror string, added []string) {
	t.Helper()
	up, mirror = filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	ctx := context.Background()
	if _, err := generate.Generate(ctx, up, generate.Options{Versions: 3, FilesPerVersion: 4, FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	if rep, _ := syncInto(t, up, mirror); !rep.OK() {
		t.Fatalf("first run refused: %+v", rep.Refused)
	}
	before := dataFilesIn(t, up)
	if _, err := generate.AddVersion(ctx, up, 3, generate.Options{FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	for f := range dataFilesIn(t, up) {
		if !before[f] {
			added = append(added, f)
		}
	}
	sort.Strings(added)
	if len(added) != 3 {
		t.Fatalf("AddVersion added %d data files, want 3: %v", len(added), added)
	}
	return up, mirror, added
}

func mainOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "refs", "heads", "main"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestIncrementalRunChecksOnlyTheNewFiles(t *testing.T) {
	up, mirror, added := grown(t)
	rep, rec := syncInto(t, up, mirror)
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	for _, p := range rec.lists {
		if strings.HasPrefix(p, repo.DefaultDataDir) || p == "" {
			t.Errorf("the sink was listed under %q; want only the new files asked for", p)
		}
	}
	var statted []string
	for _, n := range rec.stats {
		if strings.HasPrefix(n, repo.DefaultDataDir) {
			statted = append(statted, n)
		}
	}
	// The files it shares with its parent are confirmed too (issue 10: a
	// file removed from the mirror is noticed); on a local sink by a stat
	// each, a system call, and no listing.
	asked := map[string]bool{}
	for _, n := range statted {
		asked[n] = true
	}
	for _, f := range added {
		if !asked[f] {
			t.Errorf("new data file %s not asked of the sink (asked: %v)", f, statted)
		}
	}

	for _, f := range added {
		want, err := os.ReadFile(filepath.Join(up, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(mirror, f))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s in the mirror: %d bytes, err %v; want its %d upstream bytes", f, len(got), err, len(want))
		}
	}
	if mainOf(t, mirror) != mainOf(t, up) {
		t.Errorf("main in the mirror is %q, upstream %q", mainOf(t, mirror), mainOf(t, up))
	}
}

func TestIncrementalRunRefusesANewFileOfAnotherSizeInTheSink(t *testing.T) {
	up, mirror, added := grown(t)
	oldMain := mainOf(t, mirror)
	// A file of the new version is already in the mirror, with other
	// bytes: immutable, so it is left alone and the version refused.
	squatter := filepath.Join(mirror, added[1])
	if err := os.WriteFile(squatter, []byte("not the parquet file"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, _ := syncInto(t, up, mirror)
	var sizeRefusals []fdlsync.Refusal
	for _, r := range rep.Refused {
		if r.Reason == fdlsync.ReasonSizeMismatch {
			sizeRefusals = append(sizeRefusals, r)
		}
	}
	if len(sizeRefusals) != 1 || sizeRefusals[0].File != added[1] {
		t.Fatalf("refusals %+v; want one %s for %s", rep.Refused, fdlsync.ReasonSizeMismatch, added[1])
	}
	newID := strings.TrimSpace(mainOf(t, up))
	if _, err := os.Stat(filepath.Join(mirror, repo.VersionFile(newID, repo.RecordFile))); !os.IsNotExist(err) {
		t.Errorf("the refused version's %s is in the mirror (err %v)", repo.RecordFile, err)
	}
	if mainOf(t, mirror) != oldMain {
		t.Errorf("main moved to %q for a refused version", mainOf(t, mirror))
	}
	if b, _ := os.ReadFile(squatter); string(b) != "not the parquet file" {
		t.Errorf("the file already in the mirror was overwritten")
	}
}

// With no parent's file list nor catalog to go by, every file of the new
// version is checked in the mirror: on a disk by a stat each, never a
// listing (a listing there stats every file of data_dir anyway).
func TestIncrementalRunChecksEveryFileWhenTheParentsCatalogIsUnreadable(t *testing.T) {
	up, mirror, added := grown(t)
	refs, _, err := repo.ReadRefs(context.Background(), mustOpen(t, mirror))
	if err != nil {
		t.Fatal(err)
	}
	parent := refs["refs/heads/main"]
	if err := os.WriteFile(filepath.Join(mirror, repo.VersionFile(parent, repo.CatalogFile)), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mirror, backend.ReservedPrefix+sink.FileListsDir+parent+".tsv.gz")); err != nil {
		t.Fatal(err)
	}
	rep, rec := syncInto(t, up, mirror)
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	for _, p := range rec.lists {
		if strings.HasPrefix(p, repo.DefaultDataDir) || p == "" {
			t.Errorf("the sink was listed under %q; want each file asked for", p)
		}
	}
	asked := map[string]bool{}
	for _, n := range rec.stats {
		asked[n] = true
	}
	for f := range dataFilesIn(t, up) {
		if !asked[f] {
			t.Errorf("data file %s not checked in the sink; with no parent catalog every file must be", f)
		}
	}
	for _, f := range added {
		if _, err := os.Stat(filepath.Join(mirror, f)); err != nil {
			t.Errorf("new file %s not mirrored: %v", f, err)
		}
	}
	if mainOf(t, mirror) != mainOf(t, up) {
		t.Errorf("main not moved")
	}
}

func mustOpen(t *testing.T, dir string) backend.Reader {
	t.Helper()
	l, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
