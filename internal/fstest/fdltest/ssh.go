package fdltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SSHKey is a key pair OpenSSH's own ssh-keygen made, for signatures as
// publishers make them.
type SSHKey struct {
	Path, Pub, Principal string
}

// NewSSHKey makes a key of type typ (ed25519, ecdsa, rsa) for principal;
// the test skips, saying so, without ssh-keygen.
func NewSSHKey(t testing.TB, typ, principal string) SSHKey {
	t.Helper()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen not installed: signature tests skipped")
	}
	p := filepath.Join(t.TempDir(), "key")
	args := []string{"-q", "-t", typ, "-N", "", "-C", principal, "-f", p}
	if typ == "rsa" {
		args = append(args, "-b", "2048")
	}
	if out, err := exec.Command("ssh-keygen", args...).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(p + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return SSHKey{p, strings.TrimSpace(string(pub)), principal}
}

// Signer signs version records with ssh-keygen -Y sign in namespace: a
// generate.Options.Signer.
func (k SSHKey) Signer(t testing.TB, namespace string) func([]byte) ([]byte, error) {
	return func(record []byte) ([]byte, error) {
		f := filepath.Join(t.TempDir(), "version.json")
		if err := os.WriteFile(f, record, 0o644); err != nil {
			return nil, err
		}
		out, err := exec.Command("ssh-keygen", "-Y", "sign", "-f", k.Path, "-n", namespace, f).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh-keygen -Y sign: %v\n%s", err, out)
		}
		return os.ReadFile(f + ".sig")
	}
}

// AllowedSigners writes an allowed_signers file trusting keys, each with
// options (e.g. `namespaces="fdl"`, `valid-before="20200101"`).
func AllowedSigners(t testing.TB, options string, keys ...SSHKey) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# keys got from the publisher by another channel\n")
	for _, k := range keys {
		b.WriteString(k.Principal + " ")
		if options != "" {
			b.WriteString(options + " ")
		}
		b.WriteString(k.Pub + "\n")
	}
	p := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
