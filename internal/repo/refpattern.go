package repo

import (
	"fmt"
	"path"
	"strings"
)

// DefaultRefPatterns are the refs a mirror follows when the operator names
// none: branches and tags. refs/requests/ is the host's own workflow
// (changes awaiting approval, not published), mirrored only when named.
var DefaultRefPatterns = []string{"refs/heads/**", "refs/tags/**"}

// CheckRefPattern says whether p is a ref pattern: slash-separated
// segments, each `**` (any number of segments, none included) or a
// path.Match pattern within one segment (`*`, `?`, `[...]`).
func CheckRefPattern(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") {
		return fmt.Errorf("ref pattern %q: segments separated by single slashes, no leading or trailing slash", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "**" {
			continue
		}
		if strings.Contains(seg, "**") {
			return fmt.Errorf("ref pattern %q: ** must be a whole segment", p)
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("ref pattern %q: %v", p, err)
		}
	}
	return nil
}

// MatchRef says whether the full ref name matches pattern p (see
// CheckRefPattern); a malformed pattern matches nothing.
func MatchRef(p, name string) bool {
	return matchSegments(strings.Split(p, "/"), strings.Split(name, "/"))
}

func matchSegments(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchSegments(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], name[0]); err != nil || !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// RefSelection chooses the refs a mirror follows: those matching an
// include pattern (DefaultRefPatterns when none) and no exclude pattern.
type RefSelection struct {
	Include []string
	Exclude []string
}

// Check reports the first malformed pattern.
func (s RefSelection) Check() error {
	for _, p := range append(append([]string{}, s.Include...), s.Exclude...) {
		if err := CheckRefPattern(p); err != nil {
			return err
		}
	}
	return nil
}

// Selects says whether the mirror follows ref name.
func (s RefSelection) Selects(name string) bool {
	include := s.Include
	if len(include) == 0 {
		include = DefaultRefPatterns
	}
	if strings.HasPrefix(name, requestsPrefix) {
		// The host's workflow, not published state: a wildcard over all
		// refs (refs/**, **) does not take it, only a pattern that names it.
		include = namingRequests(include)
	}
	return matchAny(include, name) && !matchAny(s.Exclude, name)
}

// requestsPrefix is where a host keeps its changes awaiting approval.
const requestsPrefix = "refs/requests/"

// namingRequests keeps the patterns that name refs/requests/ literally.
func namingRequests(patterns []string) []string {
	var out []string
	for _, p := range patterns {
		if strings.HasPrefix(p, requestsPrefix) {
			out = append(out, p)
		}
	}
	return out
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if MatchRef(p, name) {
			return true
		}
	}
	return false
}
