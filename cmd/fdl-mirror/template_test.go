package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// Tests whose rounds (or subtests) each start from a fresh upstream of
// the same shape take a copy of one generated once per test process:
// DuckDB writing three or four catalogs again costs more CPU than
// copying the dozen files they come to. Each copy is a folder of its
// own, which its test changes as it likes; the template is never handed
// out. Copies of one template share the repository's id and its
// versions' ids, so a test that needs upstreams with ids of their own
// generates them (gen).
var templates = struct {
	sync.Mutex
	root string         // below the binary's folder, removed by TestMain
	made map[string]any // key → templateOf
}{made: map[string]any{}}

type templateOf[V any] struct {
	dir   string
	value V
}

// fromTemplate makes dst (which must not exist) a copy of the folder that
// generateInto wrote for key, running it on a new folder first if no test
// has yet; it returns the value generateInto returned, which clone adapts
// to dst.
func fromTemplate[V any](t *testing.T, key, dst string, generateInto func(dir string) V, clone func(v V, dir string) V) V {
	t.Helper()
	templates.Lock()
	defer templates.Unlock()
	tpl, ok := templates.made[key].(templateOf[V])
	if !ok {
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

// genCopy is gen for the rounds of a test: the same repository each time,
// generated once (opts must not sign: the key is opts printed).
func genCopy(t *testing.T, dir string, opts generate.Options) *generate.Repo {
	t.Helper()
	if opts.Signer != nil {
		t.Fatal("genCopy: a signed upstream is generated anew (gen)")
	}
	return fromTemplate(t, fmt.Sprintf("gen %+v", opts), dir,
		func(dir string) *generate.Repo { return gen(t, dir, opts) },
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

// newBranchedRepo is a copy of the branched upstream (makeBranchedRepo)
// of files files per branch and these branches, generated once.
func newBranchedRepo(t *testing.T, dir string, files int, branches ...string) *branchedRepo {
	t.Helper()
	return fromTemplate(t, fmt.Sprintf("branched %d %s", files, strings.Join(branches, ",")), dir,
		func(dir string) *branchedRepo { return makeBranchedRepo(t, dir, files, branches...) },
		func(r *branchedRepo, dir string) *branchedRepo {
			c := &branchedRepo{dir: dir, chain: slices.Clone(r.chain), branches: maps.Clone(r.branches), only: map[string][]string{}}
			for id, files := range r.only {
				c.only[id] = slices.Clone(files)
			}
			return c
		})
}
