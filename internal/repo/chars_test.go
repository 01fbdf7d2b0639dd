package repo

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"testing"
)

// The byte tests that replaced the rules' regular expressions accept
// exactly what the expressions accept.
func TestCharacterRulesMatchTheirExpressions(t *testing.T) {
	cases := ruleCases()
	rules := []struct {
		name string
		re   *regexp.Regexp
		ok   func(byte) bool
	}{
		{"version ID", regexp.MustCompile(`^[0-9a-z-]+$`), isVersionIDByte},
		{"ref segment", regexp.MustCompile(`^[a-z0-9._-]+$`), isRefSegmentByte},
	}
	for _, r := range rules {
		for _, s := range cases {
			if got, want := allOf(s, r.ok), r.re.MatchString(s); got != want {
				t.Fatalf("%s %q: accepted %v, the expression says %v", r.name, s, got, want)
			}
		}
	}
}

// refs.json is written as json.Marshal would write each name and ID.
func TestRefsJSONStringsAreJSONMarshals(t *testing.T) {
	for _, s := range append(ruleCases(), "refs/tags/\u2028", "a\u2028b", "é", "<&>") {
		var b bytes.Buffer
		writeJSONString(&b, s)
		want, _ := json.Marshal(s)
		if !bytes.Equal(b.Bytes(), want) {
			t.Fatalf("%q written as %s, json.Marshal writes %s", s, b.Bytes(), want)
		}
	}
}

// ruleCases are every string of up to two bytes and random strings drawn
// mostly from the characters the rules allow.
func ruleCases() []string {
	var cases []string
	cases = append(cases, "")
	for a := 0; a < 256; a++ {
		cases = append(cases, string([]byte{byte(a)}))
		for b := 0; b < 256; b++ {
			cases = append(cases, string([]byte{byte(a), byte(b)}))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz-._/AZ \n\x00\xff"
	for range 20000 {
		b := make([]byte, 1+rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	return cases
}
