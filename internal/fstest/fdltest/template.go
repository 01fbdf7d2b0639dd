package fdltest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// Tests (or rounds of one test) that each start from a fresh upstream of
// the same shape can take a copy of one generated once per test process:
// DuckDB writing the catalogs again costs more CPU, under -race above
// all, than copying the few files they come to. Each copy is a folder of
// its own, which its test changes as it likes; the template is never
// handed out. Copies of one template share the repository's id and its
// versions' ids and data file names: a test that needs upstreams with
// ids of their own, or two upstreams that differ, generates them.

var templates = struct {
	sync.Mutex
	root string         // made at the first use; RemoveTemplates removes it
	made map[string]any // key → templateOf
}{made: map[string]any{}}

type templateOf[V any] struct {
	dir   string
	value V
}

// FromTemplate makes dst (which must not exist) a copy of the folder that
// generateInto wrote for key, running it on a new folder first if no test
// of the process has yet; it returns the value generateInto returned,
// which clone adapts to dst.
func FromTemplate[V any](t testing.TB, key, dst string, generateInto func(dir string) V, clone func(v V, dir string) V) V {
	t.Helper()
	templates.Lock()
	defer templates.Unlock()
	tpl, ok := templates.made[key].(templateOf[V])
	if !ok {
		if templates.root == "" {
			root, err := os.MkdirTemp("", "fdltest-templates-")
			if err != nil {
				t.Fatal(err)
			}
			templates.root = root
		}
		parent, err := os.MkdirTemp(templates.root, "template-")
		if err != nil {
			t.Fatal(err)
		}
		tpl = templateOf[V]{dir: filepath.Join(parent, "repo")}
		tpl.value = generateInto(tpl.dir)
		templates.made[key] = tpl
	}
	if err := os.CopyFS(dst, os.DirFS(tpl.dir)); err != nil {
		t.Fatalf("copying the template upstream %s: %v", key, err)
	}
	return clone(tpl.value, dst)
}

// RemoveTemplates removes every template; a package whose tests use them
// calls it from TestMain after m.Run.
func RemoveTemplates() {
	templates.Lock()
	defer templates.Unlock()
	if templates.root != "" {
		os.RemoveAll(templates.root)
	}
	templates.root, templates.made = "", map[string]any{}
}

// GenerateCopy is Generate for tests that start from the same upstream:
// a copy of one generated once per test process with opts (which must
// not sign: the template's key is opts printed).
func GenerateCopy(t testing.TB, dir string, opts generate.Options) *generate.Repo {
	t.Helper()
	if opts.Signer != nil {
		t.Fatal("GenerateCopy: a signed upstream is generated anew (Generate)")
	}
	return FromTemplate(t, fmt.Sprintf("generate %+v", opts), dir,
		func(dir string) *generate.Repo { return Generate(t, dir, opts) },
		func(r *generate.Repo, dir string) *generate.Repo {
			c := *r
			c.Dir = dir
			c.Versions = slices.Clone(r.Versions)
			c.Refs = maps.Clone(r.Refs)
			c.DataFiles = slices.Clone(r.DataFiles)
			c.Missing = slices.Clone(r.Missing)
			return &c
		})
}
