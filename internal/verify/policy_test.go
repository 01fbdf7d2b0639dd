package verify

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const versionID = "019a0000-0000-7000-8000-000000000001"

func signers(t *testing.T, lines ...string) *AllowedSigners {
	t.Helper()
	as, err := ParseAllowedSigners(strings.NewReader(strings.Join(lines, "\n")), "trusted_signers")
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// at is a clock stopped at t.
func at(t time.Time) func() time.Time { return func() time.Time { return t } }

// wantRefused checks that CheckVersion refused, and why.
func wantRefused(t *testing.T, res *SignatureResult, err error, reason string, key *testKey, principal string) *SignatureError {
	t.Helper()
	var se *SignatureError
	if !errors.As(err, &se) {
		t.Fatalf("got result %+v, error %v; want a %s refusal", res, err, reason)
	}
	if res != nil {
		t.Errorf("refusal came with a result %+v", res)
	}
	fp := ""
	if key != nil {
		fp = key.fingerprint
	}
	if se.Version != versionID || se.Reason != reason || se.Fingerprint != fp || se.Principal != principal {
		t.Errorf("refused %q %q by %q (%q), want %q %q by %q (%q): %v",
			se.Version, se.Reason, se.Fingerprint, se.Principal, versionID, reason, fp, principal, err)
	}
	return se
}

func wantAccepted(t *testing.T, res *SignatureResult, err error, key testKey, principal string) {
	t.Helper()
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	if res == nil || res.Fingerprint != key.fingerprint || res.Principal != principal {
		t.Fatalf("result %+v, want %s by %q", res, key.fingerprint, principal)
	}
}

func TestWithoutTrustedSignersNothingIsChecked(t *testing.T) {
	p := &Policy{Require: true}
	for _, sig := range [][]byte{nil, []byte("garbage")} {
		if res, err := p.CheckVersion(versionID, record, sig); res != nil || err != nil {
			t.Errorf("sig %q: got %v, %v; want nil, nil", sig, res, err)
		}
	}
}

func TestUnsignedVersionPassesUnlessSignaturesAreRequired(t *testing.T) {
	alice := newKey(t, "ed25519", 0)
	p := &Policy{Signers: signers(t, "alice@example.org "+alice.authorized)}
	if res, err := p.CheckVersion(versionID, record, nil); res != nil || err != nil {
		t.Fatalf("got %v, %v; want nil, nil", res, err)
	}
	p.Require = true
	res, err := p.CheckVersion(versionID, record, nil)
	se := wantRefused(t, res, err, SigNoSignature, nil, "")
	if want := "version " + versionID + ": refused: no signature (signatures are required)"; se.Error() != want {
		t.Errorf("message %q, want %q", se.Error(), want)
	}
}

func TestEachKeyTypeIsAccepted(t *testing.T) {
	for _, c := range []struct {
		typ  string
		bits int
	}{{"ed25519", 0}, {"ecdsa", 256}, {"ecdsa", 384}, {"ecdsa", 521}, {"rsa", 3072}} {
		k := newKey(t, c.typ, c.bits)
		p := &Policy{Signers: signers(t, "alice@example.org "+k.authorized), Require: true}
		res, err := p.CheckVersion(versionID, record, sign(t, k, "fdl", record))
		wantAccepted(t, res, err, k, "alice@example.org")
	}
}

func TestRSASHA256AndSHA512AreAcceptedAndSHA1Refused(t *testing.T) {
	k := newKey(t, "rsa", 2048)
	p := &Policy{Signers: signers(t, "alice@example.org "+k.authorized)}
	for _, format := range []string{"rsa-sha2-256", "rsa-sha2-512"} {
		res, err := p.CheckVersion(versionID, record, goSign(t, k, format, "fdl", "sha256", record).armor())
		wantAccepted(t, res, err, k, "alice@example.org")
	}
	res, err := p.CheckVersion(versionID, record, goSign(t, k, "ssh-rsa", "fdl", "sha256", record).armor())
	wantRefused(t, res, err, SigBadSignature, &k, "alice@example.org")
}

func TestTamperedRecordIsRefused(t *testing.T) {
	alice := newKey(t, "ed25519", 0)
	p := &Policy{Signers: signers(t, "alice@example.org "+alice.authorized)}
	sig := sign(t, alice, "fdl", record)
	tampered := bytes.Replace(record, []byte(`"00"`), []byte(`"ff"`), 1)
	res, err := p.CheckVersion(versionID, tampered, sig)
	wantRefused(t, res, err, SigBadSignature, &alice, "alice@example.org")
}

func TestUnparsableSignatureIsRefused(t *testing.T) {
	alice := newKey(t, "ed25519", 0)
	p := &Policy{Signers: signers(t, "alice@example.org "+alice.authorized)}
	res, err := p.CheckVersion(versionID, record, []byte("-----BEGIN SSH SIGNATURE-----\nAAAA\n"))
	se := wantRefused(t, res, err, SigBadSignature, nil, "")
	if !strings.HasPrefix(se.Error(), "version "+versionID+": signature refused: bad signature (") {
		t.Errorf("message %q", se.Error())
	}
}

func TestUntrustedKeyIsRefused(t *testing.T) {
	alice, mallory := newKey(t, "ed25519", 0), newKey(t, "ed25519", 0)
	p := &Policy{Signers: signers(t, "alice@example.org "+alice.authorized)}
	res, err := p.CheckVersion(versionID, record, sign(t, mallory, "fdl", record))
	wantRefused(t, res, err, SigUntrustedKey, &mallory, "")
}

// A mirror can rewrite fdl.json: a key it lists is reported, never trusted.
func TestKeyListedOnlyByTheRepositoryIsRefused(t *testing.T) {
	alice, newcomer := newKey(t, "ed25519", 0), newKey(t, "ecdsa", 256)
	p := &Policy{Signers: signers(t, "alice@example.org "+alice.authorized)}
	repoSigners := []string{"alice@example.org " + alice.authorized, "newcomer@example.org " + newcomer.authorized}

	warning := p.CompareRepoSigners(repoSigners)
	if !strings.Contains(warning, "listed by the repository but not trusted: "+newcomer.fingerprint+" (newcomer@example.org)") ||
		strings.Contains(warning, alice.fingerprint) {
		t.Errorf("warning %q, want one naming only %s", warning, newcomer.fingerprint)
	}
	res, err := p.CheckVersion(versionID, record, sign(t, newcomer, "fdl", record))
	wantRefused(t, res, err, SigUntrustedKey, &newcomer, "")
}

// newCert certifies user's key with ca's for principal, and returns the
// certificate as a key to sign with.
func newCert(t *testing.T, user, ca testKey, principal string) testKey {
	t.Helper()
	run(t, sshKeygen(t), "-q", "-s", ca.path, "-I", "test", "-n", principal, user.path+".pub")
	return testKey{path: user.path + "-cert.pub", fingerprint: user.fingerprint}
}

// cert-authority lines are refused when the file is read; a signature by a
// certificate is refused even when its key is trusted, as ssh-keygen does.
func TestSignatureByACertificateIsRefused(t *testing.T) {
	alice, ca := newKey(t, "ed25519", 0), newKey(t, "ed25519", 0)
	cert := newCert(t, alice, ca, "alice@example.org")
	p := &Policy{Signers: signers(t, "alice@example.org "+alice.authorized)}
	res, err := p.CheckVersion(versionID, record, sign(t, cert, "fdl", record))
	wantRefused(t, res, err, SigBadSignature, &alice, "")
}

func TestSignatureForAnotherNamespaceIsRefused(t *testing.T) {
	alice := newKey(t, "ed25519", 0)
	p := &Policy{Signers: signers(t, "alice@example.org "+alice.authorized)}
	res, err := p.CheckVersion(versionID, record, sign(t, alice, "git", record))
	wantRefused(t, res, err, SigWrongNamespace, &alice, "alice@example.org")

	p.Namespace = "git"
	res, err = p.CheckVersion(versionID, record, sign(t, alice, "git", record))
	wantAccepted(t, res, err, alice, "alice@example.org")
}

func TestNamespacesOptionExcludingFDLIsRefused(t *testing.T) {
	alice := newKey(t, "ed25519", 0)
	sig := sign(t, alice, "fdl", record)
	for _, c := range []struct {
		namespaces string
		ok         bool
	}{{"git,file", false}, {"!fdl,*", false}, {"git,f?l", true}, {"*", true}} {
		p := &Policy{Signers: signers(t, `alice@example.org namespaces="`+c.namespaces+`" `+alice.authorized)}
		res, err := p.CheckVersion(versionID, record, sig)
		if c.ok {
			wantAccepted(t, res, err, alice, "alice@example.org")
		} else {
			wantRefused(t, res, err, SigWrongNamespace, &alice, "alice@example.org")
		}
	}
}

func TestExpiredKeyIsRefused(t *testing.T) {
	alice := newKey(t, "ed25519", 0)
	sig := sign(t, alice, "fdl", record)
	p := &Policy{
		Signers: signers(t, `alice@example.org valid-before="20240101Z" `+alice.authorized),
		Now:     at(time.Date(2024, 1, 1, 0, 0, 1, 0, time.UTC)),
	}
	res, err := p.CheckVersion(versionID, record, sig)
	se := wantRefused(t, res, err, SigKeyExpired, &alice, "alice@example.org")
	want := fmt.Sprintf("version %s: signature by %s (alice@example.org) refused: key expired (valid-before 20240101Z)", versionID, alice.fingerprint)
	if se.Error() != want {
		t.Errorf("message\n %q, want\n %q", se.Error(), want)
	}

	// The bound itself is still valid, as in OpenSSH.
	p.Now = at(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	res, err = p.CheckVersion(versionID, record, sig)
	wantAccepted(t, res, err, alice, "alice@example.org")
}

func TestKeyNotYetValidIsRefused(t *testing.T) {
	alice := newKey(t, "ed25519", 0)
	sig := sign(t, alice, "fdl", record)
	p := &Policy{
		Signers: signers(t, `alice@example.org valid-after="203001010000Z" `+alice.authorized),
		Now:     at(time.Date(2029, 12, 31, 23, 59, 59, 0, time.UTC)),
	}
	res, err := p.CheckVersion(versionID, record, sig)
	wantRefused(t, res, err, SigKeyNotYetValid, &alice, "alice@example.org")

	p.Now = at(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	res, err = p.CheckVersion(versionID, record, sig)
	wantAccepted(t, res, err, alice, "alice@example.org")
}

// Any line holding the key counts; there is no identity to match.
func TestAnyLineWithTheKeyMayAccept(t *testing.T) {
	alice := newKey(t, "ed25519", 0)
	p := &Policy{Signers: signers(t,
		`old@example.org valid-before="20200101" `+alice.authorized,
		`*@example.org,!mallory@example.org namespaces="fdl" `+alice.authorized,
	)}
	res, err := p.CheckVersion(versionID, record, sign(t, alice, "fdl", record))
	wantAccepted(t, res, err, alice, "*@example.org,!mallory@example.org")
}

func TestCompareRepoSigners(t *testing.T) {
	alice, bob, carol := newKey(t, "ed25519", 0), newKey(t, "ed25519", 0), newKey(t, "ecdsa", 384)
	p := &Policy{Signers: signers(t, "alice@example.org "+alice.authorized, "bob@example.org "+bob.authorized)}

	same := []string{"# upstream", `bob namespaces="fdl" ` + bob.authorized, "alice " + alice.authorized}
	if w := p.CompareRepoSigners(same); w != "" {
		t.Errorf("same keys, other principals and options: warning %q", w)
	}
	if w := p.CompareRepoSigners(nil); w != "" {
		t.Errorf("no repository signers: warning %q", w)
	}
	if w := (&Policy{Signers: signers(t)}).CompareRepoSigners(same); w != "" {
		t.Errorf("no trusted signers: warning %q", w)
	}
	if w := (&Policy{}).CompareRepoSigners(same); w != "" {
		t.Errorf("signatures not checked: warning %q", w)
	}

	w := p.CompareRepoSigners([]string{"alice@example.org " + alice.authorized, "carol@example.org " + carol.authorized})
	want := "listed by the repository but not trusted: " + carol.fingerprint + " (carol@example.org); " +
		"trusted but not listed by the repository: " + bob.fingerprint + " (bob@example.org)"
	if !strings.HasSuffix(w, want) || strings.Contains(w, "\n") {
		t.Errorf("warning %q, want one line ending %q", w, want)
	}

	if w := p.CompareRepoSigners([]string{"carol@example.org"}); !strings.Contains(w, "fdl.json signers:1: missing key") {
		t.Errorf("unparsable repository signers: warning %q", w)
	}
}

// TestAgreesWithSSHKeygen runs each case through CheckVersion and through
// `ssh-keygen -Y find-principals` + `ssh-keygen -Y verify`, on the real
// clock, and wants the same verdict.
func TestAgreesWithSSHKeygen(t *testing.T) {
	kg := sshKeygen(t)
	alice, ecdsa, rsa, mallory := newKey(t, "ed25519", 0), newKey(t, "ecdsa", 384), newKey(t, "rsa", 2048), newKey(t, "ed25519", 0)
	cert := newCert(t, mallory, alice, "alice@example.org")
	tampered := bytes.Replace(record, []byte("sha256"), []byte("sha512"), 1)
	cases := []struct {
		name    string
		signers string
		sig     []byte
		msg     []byte
	}{
		{"ed25519", "alice@example.org " + alice.authorized, sign(t, alice, "fdl", record), record},
		{"ecdsa sha256", "e@example.org " + ecdsa.authorized, sign(t, ecdsa, "fdl", record, "-O", "hashalg=sha256"), record},
		{"rsa-sha2-512", "r@example.org " + rsa.authorized, sign(t, rsa, "fdl", record), record},
		{"rsa-sha2-256", "r@example.org " + rsa.authorized, goSign(t, rsa, "rsa-sha2-256", "fdl", "sha512", record).armor(), record},
		{"ssh-rsa", "r@example.org " + rsa.authorized, goSign(t, rsa, "ssh-rsa", "fdl", "sha512", record).armor(), record},
		{"tampered", "alice@example.org " + alice.authorized, sign(t, alice, "fdl", record), tampered},
		{"untrusted", "alice@example.org " + alice.authorized, sign(t, mallory, "fdl", record), record},
		{"other namespace", "alice@example.org " + alice.authorized, sign(t, alice, "git", record), record},
		{"namespaces excludes", `alice@example.org namespaces="git" ` + alice.authorized, sign(t, alice, "fdl", record), record},
		{"namespaces negated", `alice@example.org namespaces="!fdl,*" ` + alice.authorized, sign(t, alice, "fdl", record), record},
		{"namespaces pattern", `alice@example.org namespaces="git,f?l" ` + alice.authorized, sign(t, alice, "fdl", record), record},
		{"expired", `alice@example.org valid-before="20240101" ` + alice.authorized, sign(t, alice, "fdl", record), record},
		{"not yet valid", `alice@example.org valid-after="20990101Z" ` + alice.authorized, sign(t, alice, "fdl", record), record},
		{"valid window", `*@example.org,bob@* VALID-AFTER="20200101",valid-before="209912312359Z" ` + alice.authorized, sign(t, alice, "fdl", record), record},
		{"certificate", "alice@example.org " + mallory.authorized, sign(t, cert, "fdl", record), record},
		{"second line", "# two lines\nbob@example.org " + ecdsa.authorized + "\n\"alice smith\" " + alice.authorized, sign(t, alice, "fdl", record), record},
	}
	accepted, refused := 0, 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &Policy{Signers: signers(t, c.signers), Require: true}
			_, err := p.CheckVersion(versionID, c.msg, c.sig)
			goOK := err == nil
			kgOK, out := keygenVerify(t, kg, c.signers, c.sig, c.msg)
			if goOK != kgOK {
				t.Fatalf("Go verifier accepts: %v (%v); ssh-keygen accepts: %v\n%s", goOK, err, kgOK, out)
			}
			t.Logf("Go and ssh-keygen agree, accept=%v (%v)", goOK, err)
			if goOK {
				accepted++
			} else {
				refused++
			}
		})
	}
	if accepted < 5 || refused < 5 {
		t.Errorf("%d cases accepted, %d refused: the cross-check should cover both", accepted, refused)
	}
}

// keygenVerify asks ssh-keygen for the verdict, finding the identity first
// as the verifier has none of its own.
func keygenVerify(t *testing.T, kg, allowedSigners string, sig, msg []byte) (bool, string) {
	dir := t.TempDir()
	as, sigFile := filepath.Join(dir, "allowed_signers"), filepath.Join(dir, "version.json.sig")
	if err := os.WriteFile(as, []byte(allowedSigners+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sigFile, sig, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kg, "-Y", "find-principals", "-f", as, "-s", sigFile).CombinedOutput()
	if err != nil {
		return false, "find-principals: " + string(out)
	}
	principal, _, _ := strings.Cut(string(out), "\n")
	cmd := exec.Command(kg, "-Y", "verify", "-f", as, "-I", principal, "-n", "fdl", "-s", sigFile)
	cmd.Stdin = bytes.NewReader(msg)
	out, err = cmd.CombinedOutput()
	return err == nil, "verify -I " + principal + ": " + string(out)
}
