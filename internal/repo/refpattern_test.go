package repo

import "testing"

func TestMatchRef(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"refs/tags/*", "refs/tags/v1", true},
		{"refs/tags/*", "refs/tags/release/v1", false},
		{"refs/heads/release/**", "refs/heads/release/2026/q4", true},
		{"refs/heads/release/**", "refs/heads/release", true},
		{"refs/heads/release/**", "refs/heads/main", false},
		{"refs/heads/**", "refs/heads/a/b/c", true},
		{"refs/**", "refs/requests/42", true},
		{"refs/heads/m*", "refs/heads/main", true},
		{"refs/heads/m*", "refs/heads/dev", false},
		{"refs/**/v1", "refs/tags/v1", true},
		{"refs/**/v1", "refs/tags/x/v2", false},
		{"refs/heads/[", "refs/heads/[", false}, // malformed matches nothing
	}
	for _, c := range cases {
		if got := MatchRef(c.pattern, c.name); got != c.want {
			t.Errorf("MatchRef(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestRefSelectionDefault(t *testing.T) {
	var s RefSelection
	for name, want := range map[string]bool{
		"refs/heads/main":     true,
		"refs/heads/a/b":      true,
		"refs/tags/v1":        true,
		"refs/requests/17":    false, // the host's workflow: only when named
		"refs/requests/a/b/c": false,
	} {
		if got := s.Selects(name); got != want {
			t.Errorf("default selection of %s = %v, want %v", name, got, want)
		}
	}
	s = RefSelection{Include: []string{"refs/**"}, Exclude: []string{"refs/heads/wip/**"}}
	if s.Selects("refs/requests/17") || s.Selects("refs/heads/wip/x") || !s.Selects("refs/heads/main") {
		t.Errorf("include refs/** exclude wip: wrong selection")
	}
	// Only a pattern that names refs/requests/ takes it (README).
	for _, inc := range [][]string{{"**"}, {"refs/**"}, {"refs/*/17"}, {"refs/**/17"}} {
		if (RefSelection{Include: inc}).Selects("refs/requests/17") {
			t.Errorf("include %v takes refs/requests/17; only a pattern naming refs/requests/ may", inc)
		}
	}
	for _, inc := range [][]string{{"refs/requests/**"}, {"refs/requests/*"}, {"refs/heads/**", "refs/requests/17"}} {
		if !(RefSelection{Include: inc}).Selects("refs/requests/17") {
			t.Errorf("include %v does not take refs/requests/17", inc)
		}
	}
}

func TestCheckRefPattern(t *testing.T) {
	for _, p := range []string{"", "/refs/heads/*", "refs/heads/", "refs//x", "refs/heads/a**", "refs/heads/["} {
		if CheckRefPattern(p) == nil {
			t.Errorf("CheckRefPattern(%q) accepted", p)
		}
	}
	for _, p := range []string{"refs/heads/**", "refs/tags/*", "**", "refs/heads/release-?"} {
		if err := CheckRefPattern(p); err != nil {
			t.Errorf("CheckRefPattern(%q): %v", p, err)
		}
	}
}
