package verify

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func TestParseAllowedSignersReadsEveryField(t *testing.T) {
	alice, bob := newKey(t, "ed25519", 0), newKey(t, "ecdsa", 256)
	file := strings.Join([]string{
		"# trusted publishers",
		"",
		"alice@example.org " + alice.authorized + " alice's laptop",
		"   *@example.org,!mallory@example.org NAMESPACES=\"fdl,git\",valid-after=\"20240101\",Valid-Before=\"203001021530Z\" " + bob.authorized,
		"\t# indented comment",
		`"bob the builder" namespaces="a\"b",valid-before="20300102153045UTC" ` + bob.authorized,
		"carol@example.org valid-after=\"202401021530\" " + alice.authorized + "\r",
	}, "\n")
	path := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	as, err := LoadAllowedSigners(path)
	if err != nil {
		t.Fatal(err)
	}
	if as.Name != path || len(as.Signers) != 4 {
		t.Fatalf("name %q, %d signers, want %q and 4", as.Name, len(as.Signers), path)
	}
	want := []struct {
		line                    int
		principals              string
		key                     testKey
		namespaces              []string
		validAfter, validBefore time.Time
	}{
		{3, "alice@example.org", alice, nil, time.Time{}, time.Time{}},
		{4, "*@example.org,!mallory@example.org", bob, []string{"fdl", "git"},
			time.Date(2024, 1, 1, 0, 0, 0, 0, time.Local), time.Date(2030, 1, 2, 15, 30, 0, 0, time.UTC)},
		{6, "bob the builder", bob, []string{`a"b`}, time.Time{}, time.Date(2030, 1, 2, 15, 30, 45, 0, time.UTC)},
		{7, "carol@example.org", alice, nil, time.Date(2024, 1, 2, 15, 30, 0, 0, time.Local), time.Time{}},
	}
	for i, w := range want {
		s := as.Signers[i]
		if s.Line != w.line || s.Principals != w.principals || ssh.FingerprintSHA256(s.Key) != w.key.fingerprint {
			t.Errorf("signer %d: line %d %q %s, want line %d %q %s", i, s.Line, s.Principals,
				ssh.FingerprintSHA256(s.Key), w.line, w.principals, w.key.fingerprint)
		}
		if strings.Join(s.Namespaces, "|") != strings.Join(w.namespaces, "|") || (s.Namespaces == nil) != (w.namespaces == nil) {
			t.Errorf("line %d: namespaces %q, want %q", w.line, s.Namespaces, w.namespaces)
		}
		if !s.ValidAfter.Equal(w.validAfter) || !s.ValidBefore.Equal(w.validBefore) {
			t.Errorf("line %d: valid %v..%v, want %v..%v", w.line, s.ValidAfter, s.ValidBefore, w.validAfter, w.validBefore)
		}
	}
}

func TestMalformedAllowedSignersLinesAreErrorsNamingTheLine(t *testing.T) {
	k := newKey(t, "ed25519", 0)
	rsa := newKey(t, "rsa", 2048)
	keyBlob := strings.Fields(k.authorized)[1]
	for _, c := range []struct{ line, want string }{
		{"alice@example.org", "missing key"},
		{"alice@example.org ", "missing key"},
		{`"alice@example.org ` + k.authorized, "missing end quote"},
		{"alice@example.org namespaces=\"fdl\"", "missing key"},
		{"alice@example.org ssh-ed25519", "invalid key"},
		{"alice@example.org ssh-ed25519 !!!notbase64", "invalid ssh-ed25519 key"},
		{"alice@example.org ssh-ed25519 AAAA", "invalid ssh-ed25519 key"},
		{"alice@example.org ssh-rsa " + keyBlob, "key type mismatch"},
		{"alice@example.org ssh-dss " + keyBlob, `unsupported key type "ssh-dss"`},
		{"alice@example.org cert-authority " + k.authorized, "cert-authority is not supported"},
		{"alice@example.org restrict " + k.authorized, `unknown option "restrict"`},
		{"alice@example.org namespaces " + k.authorized, `unknown option "namespaces"`},
		{"alice@example.org namespaces=fdl " + k.authorized, "namespaces: value must be double-quoted"},
		{`alice@example.org namespaces="fdl ` + k.authorized, "options: missing end quote"},
		{`alice@example.org namespaces="fdl",namespaces="git" ` + k.authorized, `multiple "namespaces"`},
		{`alice@example.org namespaces="fdl", ` + rsa.authorized, "options end with a comma"},
		{`alice@example.org namespaces="fdl"x ` + k.authorized, `unexpected "x"`},
		{"alice@example.org valid-after=20240101 " + k.authorized, "valid-after: value must be double-quoted"},
		{`alice@example.org valid-after="2024-01-01" ` + k.authorized, "valid-after: invalid time"},
		{`alice@example.org valid-before="20241301" ` + k.authorized, "valid-before: invalid time"},
		{`alice@example.org valid-before="19700101Z" ` + k.authorized, "not after 1970"},
		{`alice@example.org valid-before="20240101",valid-before="20250101" ` + k.authorized, `multiple "valid-before"`},
	} {
		file := "# comment\n" + "bob@example.org " + k.authorized + "\n" + c.line + "\n"
		_, err := ParseAllowedSigners(strings.NewReader(file), "trusted_signers")
		if err == nil || !strings.HasPrefix(err.Error(), "trusted_signers:3: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s\n  error %v, want trusted_signers:3: ...%s", c.line, err, c.want)
		}
	}
}

func TestEmptyAllowedSignersHasNoSigners(t *testing.T) {
	as, err := ParseAllowedSigners(strings.NewReader("# nobody yet\n\n"), "empty")
	if err != nil || len(as.Signers) != 0 {
		t.Fatalf("got %v, %v; want no signers and no error", as, err)
	}
}

func TestLoadAllowedSignersNamesAMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope")
	if _, err := LoadAllowedSigners(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v, want an error naming %s", err, path)
	}
}

// Patterns as ssh_config(5) PATTERNS describes them.
func TestMatchPatternList(t *testing.T) {
	for _, c := range []struct {
		s, patterns string
		want        bool
	}{
		{"fdl", "fdl", true},
		{"fdl", "git", false},
		{"fdl", "git,fdl", true},
		{"fdl", "f*", true},
		{"fdl", "*", true},
		{"fdl", "?dl", true},
		{"fdl", "??", false},
		{"fdl", "*l*", true},
		{"fdl", "f*x", false},
		{"fdl", "!fdl,*", false},
		{"fdl", "*,!fdl", false},
		{"fdl", "!git", false}, // a negation alone matches nothing
		{"fdl", "!git,*", true},
		{"fdl", "", false},
		{"", "", true},
		{"alice@example.org", "*@example.org", true},
		{"alice@example.org", "*@example.org,!alice@*", false},
	} {
		if got := matchPatternList(c.s, strings.Split(c.patterns, ",")); got != c.want {
			t.Errorf("matchPatternList(%q, %q) = %v, want %v", c.s, c.patterns, got, c.want)
		}
	}
}

// FuzzParseAllowedSigners feeds the parser anything: it must not panic, an
// error names the file and a line, and what parses can be used.
func FuzzParseAllowedSigners(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		as, err := ParseAllowedSigners(bytes.NewReader(data), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Fatalf("error does not name the file and line: %v", err)
			}
			return
		}
		for _, s := range as.Signers {
			if s.Key == nil || s.Line < 1 {
				t.Fatalf("signer without key or line: %+v", s)
			}
			_ = ssh.FingerprintSHA256(s.Key)
			_, _ = s.refusal("fdl", time.Now())
		}
	})
}
