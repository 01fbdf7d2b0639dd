package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
)

// genCopy is gen for tests whose rounds or subtests start from the same
// upstream: a copy of one generated once (fdltest.GenerateCopy).
var genCopy = fdltest.GenerateCopy

// newBranchedRepo is a copy of the branched upstream (makeBranchedRepo)
// of files files per branch and these branches, generated once per test
// process (fdltest.FromTemplate).
func newBranchedRepo(t *testing.T, dir string, files int, branches ...string) *branchedRepo {
	t.Helper()
	return fdltest.FromTemplate(t, fmt.Sprintf("branched %d %s", files, strings.Join(branches, ",")), dir,
		func(dir string) *branchedRepo { return makeBranchedRepo(t, dir, files, branches...) },
		func(r *branchedRepo, dir string) *branchedRepo {
			c := &branchedRepo{dir: dir, chain: slices.Clone(r.chain), branches: maps.Clone(r.branches), only: map[string][]string{}}
			for id, files := range r.only {
				c.only[id] = slices.Clone(files)
			}
			return c
		})
}
