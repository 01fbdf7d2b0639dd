package local

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// failingReader gives n bytes, then an error: a source that breaks
// mid-copy.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("source broke")
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	sort.Strings(names)
	return names
}

// A write is an unnamed file until it is whole: one that breaks leaves no
// name in its folder nor in the temporary folder, and one that ends is
// the only new name. Replacing a file, and refusing to create one that
// exists, leave nothing behind either.
//
// Both ways of naming an unnamed file are held to it: by its descriptor
// (AT_EMPTY_PATH, where the process may, as the tests here usually can)
// and through /proc/self/fd (where it may not: a service run as its own
// user).
func TestWritesLeaveNoNameBeforeTheyAreWhole(t *testing.T) {
	if !procFdOnce() {
		t.Skip("no /proc/self/fd: writes go through the temporary folder")
	}
	refused := emptyPathRefused.Load()
	defer emptyPathRefused.Store(refused)
	for _, way := range []struct {
		name    string
		viaProc bool
	}{{"by descriptor", false}, {"through proc", true}} {
		emptyPathRefused.Store(way.viaProc)
		t.Run(way.name, writesLeaveNoNameBeforeTheyAreWhole)
	}
}

func writesLeaveNoNameBeforeTheyAreWhole(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	folder, tmp := filepath.Join(dir, "data"), filepath.Join(dir, TempDir)

	for _, c := range []context.Context{ctx, backend.WithoutSync(ctx)} {
		if err := l.Put(c, "data/a", &failingReader{n: 100_000}, 200_000); err == nil {
			t.Fatal("a write whose source broke succeeded")
		}
		if got := entries(t, folder); len(got) != 0 {
			t.Fatalf("a broken write left %v in its folder", got)
		}
	}
	if err := l.Put(ctx, "data/a", strings.NewReader("first"), 5); err != nil {
		t.Fatal(err)
	}
	if err := l.Put(ctx, "data/a", strings.NewReader("second"), 6); err != nil {
		t.Fatal(err)
	}
	if err := l.Create(ctx, "data/a", strings.NewReader("third"), 5); !errors.Is(err, backend.ErrExist) {
		t.Fatalf("Create over an existing file: %v, want ErrExist", err)
	}
	if err := l.Create(ctx, "data/b", strings.NewReader("made"), 4); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "second", "b": "made"} {
		if raw, err := os.ReadFile(filepath.Join(folder, name)); err != nil || string(raw) != want {
			t.Errorf("data/%s holds %q (%v), want %q", name, raw, err, want)
		}
	}
	if got := entries(t, folder); strings.Join(got, " ") != "a b" {
		t.Errorf("the folder holds %v, want [a b]", got)
	}
	if got := entries(t, tmp); len(got) != 0 {
		t.Errorf("the temporary folder holds %v, want nothing", got)
	}
}

// A symbolic link planted at a name is replaced by the write, never
// written through: the file it points at, outside the store, is left
// alone.
func TestPutReplacesAPlantedLinkInsteadOfWritingThroughIt(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "data", "a")); err != nil {
		t.Fatal(err)
	}
	if err := l.Put(context.Background(), "data/a", strings.NewReader("new"), 3); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(outside); string(raw) != "keep" {
		t.Fatalf("the file outside the store now holds %q", raw)
	}
	st, err := os.Lstat(filepath.Join(dir, "data", "a"))
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("data/a is %v (%v), want a plain file", st.Mode(), err)
	}
	rc, err := l.Open(context.Background(), "data/a")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if raw, _ := io.ReadAll(rc); string(raw) != "new" {
		t.Errorf("data/a holds %q, want %q", raw, "new")
	}
}
