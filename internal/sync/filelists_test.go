package sync_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// mirrorSink opens a local mirror's sink, to read and write its state
// between runs.
func mirrorSink(t *testing.T, dir string) *sink.Sink {
	t.Helper()
	l, err := local.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return sink.New(l, sink.Options{})
}

// listedFiles is version id's file list in the mirror, of its epoch;
// nil where it has none.
func listedFiles(t *testing.T, mirror, id string) []catalog.File {
	t.Helper()
	s := mirrorSink(t, mirror)
	epoch, err := s.State().FileListEpoch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.State().FetchFileList(context.Background(), id, epoch, t.TempDir())
	if err != nil {
		t.Fatalf("the list of %s: %v", id, err)
	}
	if l == nil {
		return nil
	}
	defer l.Remove()
	var files []catalog.File
	if err := l.Each(func(f catalog.File) error { files = append(files, f); return nil }); err != nil {
		t.Fatal(err)
	}
	return files
}

// catalogFiles is version id's main catalog in dir read whole: its files
// in path order, one per path.
func catalogFiles(t *testing.T, dir, id string) []catalog.File {
	t.Helper()
	pool, err := catalog.NewPool(t.TempDir(), 1, catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := pool.ReadSorted(context.Background(), filepath.Join(dir, "versions", id, repo.CatalogFile), repo.VersionFile(id, repo.CatalogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var files []catalog.File
	if err := s.Each(func(f catalog.File) error { files = append(files, f); return nil }); err != nil {
		t.Fatal(err)
	}
	return files
}

// A version's list is what the mirror confirmed: written as it is
// published, its catalog's files whether read whole or as a difference.
// A child is read as its difference from its parent's list only where
// that list is whole and of the mirror's epoch. A list that claims the
// child's new files (as a lying reader's would have, were it trusted),
// trusted, publishes the child without them: the control, which shows
// the list is what the difference trusts. The same list damaged, of
// another epoch (written before a prune), or missing, is not read: the
// child is read whole and published complete, and its own list is its
// catalog's files, from which the next version's difference is taken.
func TestAChildIsReadWholeWhereItsParentsListIsNotWhole(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spoil   func(t *testing.T, mirror, parent string, forged []catalog.File)
		trusted bool
	}{
		{"whole (the control)", func(t *testing.T, mirror, parent string, forged []catalog.File) {
			writeForged(t, mirror, parent, "", forged)
		}, true},
		{"damaged", func(t *testing.T, mirror, parent string, forged []catalog.File) {
			writeForged(t, mirror, parent, "", forged)
			p := filepath.Join(mirror, backend.ReservedPrefix+sink.FileListsDir+parent+".tsv.gz")
			text := gunzipFile(t, p)
			i := strings.LastIndex(text, "\t")
			text = text[:i+1] + strings.Repeat("0", 64) + "\n"
			gzipFile(t, p, text)
		}, false},
		{"of another epoch", func(t *testing.T, mirror, parent string, forged []catalog.File) {
			writeForged(t, mirror, parent, strings.Repeat("ab", 16), forged)
		}, false},
		{"missing", func(t *testing.T, mirror, parent string, forged []catalog.File) {
			if err := os.Remove(filepath.Join(mirror, backend.ReservedPrefix+sink.FileListsDir+parent+".tsv.gz")); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, mirror, r := generated(t, generate.Options{Versions: 2, FilesPerVersion: 3})
			if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
				t.Fatalf("first run: %+v", rep.Refused)
			}
			parent := r.Versions[1]
			if got, want := listedFiles(t, mirror, parent), catalogFiles(t, mirror, parent); !equalFiles(got, want) {
				t.Fatalf("the published version's list\n%v\nits catalog's files\n%v", got, want)
			}
			child, err := generate.AddVersion(context.Background(), up, 1, generate.Options{FastParquet: true})
			if err != nil {
				t.Fatal(err)
			}
			// A list of the parent claiming every file of the child, its
			// new ones too, which the mirror does not have.
			tc.spoil(t, mirror, parent, catalogFiles(t, up, child))
			if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
				t.Fatalf("second run: %+v", rep.Refused)
			}
			if refIn(mirror, "refs/heads/main") != child {
				t.Fatal("main not moved")
			}
			problems := fdltest.Complete(t, mirror)
			if tc.trusted {
				if len(problems) == 0 {
					t.Fatal("the child is complete though its parent's list, trusted, claimed its new files")
				}
				return
			}
			if len(problems) > 0 {
				t.Fatalf("the child published without files: %v", problems[:min(3, len(problems))])
			}
			if got, want := listedFiles(t, mirror, child), catalogFiles(t, mirror, child); !equalFiles(got, want) {
				t.Fatalf("the child's list\n%v\nits catalog's files\n%v", got, want)
			}
			// And the version after: a difference from the child's list.
			next, err := generate.AddVersion(context.Background(), up, 1, generate.Options{FastParquet: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
				t.Fatalf("third run: %+v", rep.Refused)
			}
			if p := fdltest.Complete(t, mirror); len(p) > 0 {
				t.Fatalf("the version after published without files: %v", p[:min(3, len(p))])
			}
			if got, want := listedFiles(t, mirror, next), catalogFiles(t, mirror, next); !equalFiles(got, want) {
				t.Fatalf("the next version's list\n%v\nits catalog's files\n%v", got, want)
			}
		})
	}
}

// writeForged writes version id's list of files in mirror, of epoch
// ("": the mirror's).
func writeForged(t *testing.T, mirror, id, epoch string, files []catalog.File) {
	t.Helper()
	s := mirrorSink(t, mirror)
	if epoch == "" {
		var err error
		if epoch, err = s.State().FileListEpoch(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	w, err := sink.NewFileListWriter(t.TempDir(), id, epoch)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := w.Add(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.State().WriteFileList(context.Background(), w); err != nil {
		t.Fatal(err)
	}
}

func equalFiles(a, b []catalog.File) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func gunzipFile(t *testing.T, p string) string {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func gzipFile(t *testing.T, p, text string) {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write([]byte(text))
	w.Close()
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
