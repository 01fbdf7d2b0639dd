package verify

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// Keys and signatures in these tests come from the real ssh-keygen.

func sshKeygen(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skipf("ssh-keygen (OpenSSH) is not installed: %v", err)
	}
	return path
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

type testKey struct {
	path        string // private key file; path+".pub" is the public key
	authorized  string // "keytype base64", as in an allowed_signers line
	fingerprint string // as ssh-keygen -l prints it
}

// newKey makes a key with ssh-keygen: typ is ed25519, ecdsa or rsa.
func newKey(t *testing.T, typ string, bits int) testKey {
	t.Helper()
	kg := sshKeygen(t)
	path := filepath.Join(t.TempDir(), "id_"+typ)
	args := []string{"-q", "-t", typ, "-N", "", "-C", "test", "-f", path}
	if bits != 0 {
		args = append(args, "-b", strconv.Itoa(bits))
	}
	run(t, kg, args...)
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(pub))
	// "256 SHA256:... test (ED25519)"
	fp := strings.Fields(run(t, kg, "-l", "-E", "sha256", "-f", path+".pub"))[1]
	return testKey{path: path, authorized: f[0] + " " + f[1], fingerprint: fp}
}

// sign signs msg with ssh-keygen -Y sign and returns the armored signature.
func sign(t *testing.T, k testKey, namespace string, msg []byte, opts ...string) []byte {
	t.Helper()
	file := filepath.Join(t.TempDir(), "version.json")
	if err := os.WriteFile(file, msg, 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-Y", "sign", "-f", k.path, "-n", namespace}, opts...)
	run(t, sshKeygen(t), append(args, file)...)
	sig, err := os.ReadFile(file + ".sig")
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// rawSig is an SSHSIG blob built field by field, to make signatures
// ssh-keygen will not make (rsa-sha2-256, ssh-rsa) and malformed ones.
type rawSig struct {
	Version       uint32
	PublicKey     []byte
	Namespace     string
	Reserved      []byte
	HashAlgorithm string
	Signature     []byte
}

// goSign signs msg as PROTOCOL.sshsig describes, with the given signature
// algorithm, written here independently of the code under test.
func goSign(t *testing.T, k testKey, algorithm, namespace, hashAlgorithm string, msg []byte) rawSig {
	t.Helper()
	pem, err := os.ReadFile(k.path)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	var digest []byte
	if hashAlgorithm == "sha256" {
		h := sha256.Sum256(msg)
		digest = h[:]
	} else {
		h := sha512.Sum512(msg)
		digest = h[:]
	}
	toSign := append([]byte("SSHSIG"), ssh.Marshal(struct {
		N, R, H string
		D       []byte
	}{namespace, "", hashAlgorithm, digest})...)
	sig, err := signer.(ssh.AlgorithmSigner).SignWithAlgorithm(rand.Reader, toSign, algorithm)
	if err != nil {
		t.Fatal(err)
	}
	return rawSig{1, signer.PublicKey().Marshal(), namespace, nil, hashAlgorithm, ssh.Marshal(sig)}
}

func (r rawSig) armor(trailing ...byte) []byte {
	blob := append(append([]byte("SSHSIG"), ssh.Marshal(r)...), trailing...)
	return armor(blob)
}

func armor(blob []byte) []byte {
	b64 := base64.StdEncoding.EncodeToString(blob)
	var out bytes.Buffer
	out.WriteString("-----BEGIN SSH SIGNATURE-----\n")
	for len(b64) > 70 {
		out.WriteString(b64[:70] + "\n")
		b64 = b64[70:]
	}
	out.WriteString(b64 + "\n-----END SSH SIGNATURE-----\n")
	return out.Bytes()
}

var record = []byte(`{"id":"019a0000-0000-7000-8000-000000000001","catalog":{"sha256":"00"}}` + "\n")

func TestSignaturesOfEachKeyTypeVerify(t *testing.T) {
	for _, c := range []struct {
		typ  string
		bits int
	}{{"ed25519", 0}, {"ecdsa", 256}, {"ecdsa", 384}, {"ecdsa", 521}, {"rsa", 2048}} {
		t.Run(strings.TrimSuffix(c.typ+"-"+strconv.Itoa(c.bits), "-0"), func(t *testing.T) {
			k := newKey(t, c.typ, c.bits)
			s, err := ParseSignature(sign(t, k, "fdl", record))
			if err != nil {
				t.Fatal(err)
			}
			if got := ssh.FingerprintSHA256(s.PublicKey); got != k.fingerprint {
				t.Errorf("key %s, want %s", got, k.fingerprint)
			}
			if s.Namespace != "fdl" || s.HashAlgorithm != "sha512" {
				t.Errorf("namespace %q hash %q, want fdl sha512 (ssh-keygen's default)", s.Namespace, s.HashAlgorithm)
			}
			if err := s.Verify(record, "fdl"); err != nil {
				t.Errorf("good signature: %v", err)
			}
			tampered := bytes.Replace(record, []byte(`"00"`), []byte(`"01"`), 1)
			if err := s.Verify(tampered, "fdl"); err == nil {
				t.Error("signature verified over a tampered record")
			}
			if err := s.Verify(record, "git"); err == nil {
				t.Error("signature verified for another namespace")
			}
		})
	}
}

func TestSHA256SignatureVerifies(t *testing.T) {
	k := newKey(t, "ed25519", 0)
	s, err := ParseSignature(sign(t, k, "fdl", record, "-O", "hashalg=sha256"))
	if err != nil {
		t.Fatal(err)
	}
	if s.HashAlgorithm != "sha256" {
		t.Fatalf("hash %q, want sha256", s.HashAlgorithm)
	}
	if err := s.Verify(record, "fdl"); err != nil {
		t.Fatal(err)
	}
}

func TestRSASignatureFormats(t *testing.T) {
	k := newKey(t, "rsa", 2048)
	for _, c := range []struct {
		format string
		ok     bool
	}{{"rsa-sha2-256", true}, {"rsa-sha2-512", true}, {"ssh-rsa", false}} {
		s, err := ParseSignature(goSign(t, k, c.format, "fdl", "sha512", record).armor())
		if err != nil {
			t.Fatal(err)
		}
		err = s.Verify(record, "fdl")
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.format, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "ssh-rsa refused")) {
			t.Errorf("%s: got %v, want refusal of SHA-1 signatures", c.format, err)
		}
	}
}

func TestMalformedSignaturesAreRefused(t *testing.T) {
	k := newKey(t, "ed25519", 0)
	good := goSign(t, k, ssh.KeyAlgoED25519, "fdl", "sha512", record)
	if _, err := ParseSignature(good.armor()); err != nil {
		t.Fatalf("the unmodified signature must parse: %v", err)
	}
	version2, md5, badKey := good, good, good
	version2.Version = 2
	md5.HashAlgorithm = "md5"
	badKey.PublicKey = []byte("not a key")
	blob := append([]byte("SSHSIG"), ssh.Marshal(good)...)

	for name, c := range map[string]struct {
		armored   []byte
		parseFail string // substring of the parse error, or "" if it parses and Verify must fail
	}{
		"no header":     {bytes.TrimPrefix(good.armor(), []byte("-----BEGIN SSH SIGNATURE-----")), "header"},
		"no footer":     {bytes.TrimSuffix(good.armor(), []byte("-----END SSH SIGNATURE-----\n")), "footer"},
		"bad base64":    {[]byte("-----BEGIN SSH SIGNATURE-----\n!!!!\n-----END SSH SIGNATURE-----\n"), "illegal base64"},
		"bad magic":     {armor(append([]byte("SSHSIH"), blob[6:]...)), "magic"},
		"version 2":     {version2.armor(), "version 2"},
		"trailing data": {good.armor(0), "ssh:"},
		"truncated":     {armor(blob[:len(blob)-10]), "ssh:"},
		"bad key":       {badKey.armor(), "public key"},
		"md5":           {md5.armor(), ""},
	} {
		s, err := ParseSignature(c.armored)
		switch {
		case c.parseFail != "" && (err == nil || !strings.Contains(err.Error(), c.parseFail)):
			t.Errorf("%s: parse error %v, want one about %q", name, err, c.parseFail)
		case c.parseFail == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.parseFail == "" && s.Verify(record, "fdl") == nil:
			t.Errorf("%s: verified", name)
		}
	}
}

// FuzzParseSignature feeds the SSHSIG parser anything; what parses is then
// verified. Neither may panic. The seeds in testdata/fuzz were made by
// ssh-keygen -Y sign -n fdl over fuzzMessage.
func FuzzParseSignature(f *testing.F) {
	fuzzMessage := []byte(`{"id":"019a"}` + "\n")
	f.Fuzz(func(t *testing.T, armored []byte) {
		s, err := ParseSignature(armored)
		if err != nil {
			return
		}
		_ = ssh.FingerprintSHA256(s.PublicKey)
		_ = s.Verify(fuzzMessage, s.Namespace)
	})
}
