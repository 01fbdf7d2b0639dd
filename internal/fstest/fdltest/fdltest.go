// Package fdltest holds what tests of several packages need to judge a
// mirror: trees compared byte for byte, states compared before and after,
// and the check that every ref is complete.
package fdltest

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

// Files returns every regular file below dir, by slash path, outside the
// mirror's own .fdl-mirror/ folder.
func Files(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	walkFiles(t, dir, func(rel, p string) error {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = b
		return nil
	})
	return out
}

// Names is Files without the bytes, for a test that compares only which
// files there are: under -race every byte read into a new buffer costs
// its shadow memory, and a mirror of thousands of files read again in
// every round of a test costs more than the runs it tests.
func Names(t testing.TB, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	walkFiles(t, dir, func(rel, _ string) error {
		out[rel] = true
		return nil
	})
	return out
}

// walkFiles calls file with the slash path and the path on disk of every
// file below dir, outside the mirror's own .fdl-mirror/ folder.
func walkFiles(t testing.TB, dir string, file func(rel, p string) error) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel+"/" == backend.ReservedPrefix {
				return fs.SkipDir
			}
			return nil
		}
		return file(rel, p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// FileState is what changes when a file is rewritten, even with the same bytes.
type FileState struct {
	Size  int64
	Inode uint64
	MTime int64
}

// States records every file's state below dir.
func States(t testing.TB, dir string) map[string]FileState {
	t.Helper()
	out := map[string]FileState{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st := info.Sys().(*syscall.Stat_t)
		out[filepath.ToSlash(rel)] = FileState{info.Size(), st.Ino, info.ModTime().UnixNano()}
		return nil
	})
	return out
}

// AssertMirrored checks that dst holds every file of src byte for byte,
// except those skip says a mirror must not copy, and nothing else outside
// the mirror's own folder.
func AssertMirrored(t testing.TB, src, dst string, skip func(name string) bool) {
	t.Helper()
	want, got := Files(t, src), Files(t, dst)
	for name, b := range want {
		if skip != nil && skip(name) {
			if _, ok := got[name]; ok {
				t.Errorf("mirror has %s, which it must not copy", name)
			}
			continue
		}
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("mirror lacks %s", name)
		case !bytes.Equal(g, b) && name != "refs.json":
			t.Errorf("mirror's %s differs from upstream's", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("mirror has %s, which upstream does not", name)
		}
	}
}

// Complete returns the problems verify finds in a local repository: empty
// when every ref resolves to a complete, intact version.
func Complete(t testing.TB, dir string) []string {
	t.Helper()
	r, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	problems, err := verify.CheckRepository(context.Background(), source.New(r, nil, nil), verify.CheckOptions{})
	if err != nil {
		t.Fatalf("verify %s: %v", dir, err)
	}
	var out []string
	for _, p := range problems {
		out = append(out, p.Message)
	}
	sort.Strings(out)
	return out
}

// Outside lists what exists in parent besides the names allowed: a test
// that nothing was written outside the mirror.
func Outside(t testing.TB, parent string, allowed ...string) []string {
	t.Helper()
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var extra []string
next:
	for _, e := range entries {
		for _, a := range allowed {
			if e.Name() == a {
				continue next
			}
		}
		extra = append(extra, e.Name())
	}
	return extra
}

// SharedFixtures is ../shared/fixtures/ducklake beside the repository (or
// $FDL_SHARED/fixtures/ducklake); tests skip, saying so, when it is absent.
func SharedFixtures(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("FDL_SHARED")
	if dir == "" {
		wd, _ := os.Getwd()
		for d := wd; d != "/" && d != "."; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				dir = filepath.Join(filepath.Dir(d), "shared")
				break
			}
		}
	}
	fx := filepath.Join(dir, "fixtures", "ducklake")
	if _, err := os.Stat(fx); err != nil {
		t.Skipf("real DuckLake fixtures not found at %s: interop test skipped", fx)
	}
	return fx
}

// Contains reports whether any line of s contains all the parts.
func Contains(s string, parts ...string) bool {
	for _, line := range strings.Split(s, "\n") {
		ok := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
