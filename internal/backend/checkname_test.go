package backend

import (
	"path"
	"strings"
	"testing"
)

// checkNameByRules is CheckName as the rules say it, with path.Clean
// asked as well: the one-pass cleanName must give the same answers.
func checkNameByRules(name string) bool {
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsAny(name, "\\\x00") {
		return false
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return path.Clean(name) == name
}

var checkNameSeeds = []string{
	"", "/", "a", "a/b", "/a", "a/", "a//b", "./a", "a/.", "a/./b", "../a", "a/..", "a/../b",
	"..", ".", "...", "a/...", ".a/b.", "a\\b", "a\x00b", "data/main/t/ducklake-01.parquet",
	"a/b/", "//", "a/b/c/d/e", "é/ü", "a/.b/..c",
}

func TestCheckNameAgreesWithTheRules(t *testing.T) {
	for _, name := range checkNameSeeds {
		if got, want := CheckName(name) == nil, checkNameByRules(name); got != want {
			t.Errorf("CheckName(%q) accepts: %v, the rules: %v", name, got, want)
		}
	}
}

func FuzzCheckName(f *testing.F) {
	for _, name := range checkNameSeeds {
		f.Add(name)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if got, want := CheckName(name) == nil, checkNameByRules(name); got != want {
			t.Errorf("CheckName(%q) accepts: %v, the rules: %v", name, got, want)
		}
	})
}
