package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// Signatures made by OpenSSH's own ssh-keygen, checked by the mirror
// against the operator's allowed_signers, never the repository's.

type sshKey struct {
	path, pub, principal string
}

func newKey(t *testing.T, typ, principal string) sshKey {
	t.Helper()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen not installed: signature tests skipped")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	args := []string{"-q", "-t", typ, "-N", "", "-C", principal, "-f", p}
	if typ == "rsa" {
		args = append(args, "-b", "2048")
	}
	if out, err := exec.Command("ssh-keygen", args...).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, _ := os.ReadFile(p + ".pub")
	return sshKey{p, strings.TrimSpace(string(pub)), principal}
}

// signer signs version records with ssh-keygen -Y sign.
func (k sshKey) signer(t *testing.T, namespace string) func([]byte) ([]byte, error) {
	return func(record []byte) ([]byte, error) {
		f := filepath.Join(t.TempDir(), "version.json")
		os.WriteFile(f, record, 0o644)
		out, err := exec.Command("ssh-keygen", "-Y", "sign", "-f", k.path, "-n", namespace, f).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh-keygen -Y sign: %v\n%s", err, out)
		}
		return os.ReadFile(f + ".sig")
	}
}

// allowedSigners writes an allowed_signers file trusting keys, with options.
func allowedSigners(t *testing.T, options string, keys ...sshKey) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# keys got from the publisher by another channel\n")
	for _, k := range keys {
		b.WriteString(k.principal + " ")
		if options != "" {
			b.WriteString(options + " ")
		}
		b.WriteString(k.pub + "\n")
	}
	p := filepath.Join(t.TempDir(), "allowed_signers")
	os.WriteFile(p, []byte(b.String()), 0o644)
	return p
}

func TestSyncPublishesVersionsSignedByTrustedKeys(t *testing.T) {
	for _, typ := range []string{"ed25519", "ecdsa", "rsa"} {
		t.Run(typ, func(t *testing.T) {
			_, up, sink := layout(t)
			key := newKey(t, typ, "publisher@example.org")
			repo := gen(t, up, generate.Options{Versions: 2, Signer: key.signer(t, "fdl")})
			trusted := allowedSigners(t, `namespaces="fdl"`, key)
			rep, res := syncJSON(t, "--trusted-signers", trusted, "--require-signatures", up, sink)
			if res.code != 0 {
				t.Fatalf("exit %d: %+v", res.code, rep.Refused)
			}
			for _, id := range repo.Versions {
				if _, err := os.Stat(filepath.Join(sink, "versions", id, "version.json.sig")); err != nil {
					t.Errorf("version %s: signature not mirrored", id)
				}
			}
			fdltest.AssertMirrored(t, up, sink, nil)
			if v := run(t, "verify", "--trusted-signers", trusted, "--require-signatures", sink); v.code != 0 {
				t.Errorf("verify with signatures: exit %d\n%s", v.code, v.stdout)
			}
		})
	}
}

// trustRefusal checks that a sync refused every version for reason and
// published no ref.
func trustRefusal(t *testing.T, up, sink string, reason string, args ...string) result {
	t.Helper()
	rep, res := syncJSON(t, append(args, up, sink)...)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1", res.code)
	}
	found := false
	for _, r := range rep.Refused {
		if r.Reason == "signature" && strings.Contains(r.Message, reason) {
			found = true
		}
	}
	if !found {
		t.Errorf("no signature refusal saying %q: %+v", reason, rep.Refused)
	}
	if len(rep.VersionsPublished) != 0 || len(published(t, sink)) != 0 || readRef(t, sink, "refs/heads/main") != "" {
		t.Errorf("published %v although refused", rep.VersionsPublished)
	}
	return res
}

func TestSyncRefusesAnUnsignedVersionWhenSignaturesAreRequired(t *testing.T) {
	_, up, sink := layout(t)
	key := newKey(t, "ed25519", "publisher@example.org")
	gen(t, up, generate.Options{Versions: 1})
	trustRefusal(t, up, sink, "no signature", "--trusted-signers", allowedSigners(t, "", key), "--require-signatures")
}

func TestSyncPassesAnUnsignedVersionWhenSignaturesAreNotRequired(t *testing.T) {
	_, up, sink := layout(t)
	key := newKey(t, "ed25519", "publisher@example.org")
	gen(t, up, generate.Options{Versions: 1})
	if _, res := syncJSON(t, "--trusted-signers", allowedSigners(t, "", key), up, sink); res.code != 0 {
		t.Fatalf("exit %d", res.code)
	}
}

func TestSyncRefusesABadSignatureEvenWhenNotRequired(t *testing.T) {
	_, up, sink := layout(t)
	key := newKey(t, "ed25519", "publisher@example.org")
	repo := gen(t, up, generate.Options{Versions: 1, Signer: key.signer(t, "fdl")})
	// The record changes after signing: the signature no longer covers it.
	rec := filepath.Join(up, "versions", repo.Versions[0], "version.json")
	var doc map[string]any
	raw, _ := os.ReadFile(rec)
	json.Unmarshal(raw, &doc)
	doc["message"] = "tampered"
	raw, _ = json.Marshal(doc)
	os.WriteFile(rec, raw, 0o644)
	trustRefusal(t, up, sink, "bad signature", "--trusted-signers", allowedSigners(t, "", key))
}

func TestSyncRefusesASignatureByAKeyListedOnlyInTheRepository(t *testing.T) {
	_, up, sink := layout(t)
	trustedKey := newKey(t, "ed25519", "publisher@example.org")
	intruder := newKey(t, "ed25519", "intruder@example.org")
	gen(t, up, generate.Options{Versions: 1, Signer: intruder.signer(t, "fdl")})
	// Whoever can write the repository can list their own key in fdl.json.
	settings := filepath.Join(up, "fdl.json")
	var doc map[string]any
	raw, _ := os.ReadFile(settings)
	json.Unmarshal(raw, &doc)
	doc["signers"] = []string{intruder.principal + " " + intruder.pub}
	raw, _ = json.Marshal(doc)
	os.WriteFile(settings, raw, 0o644)
	res := trustRefusal(t, up, sink, "untrusted key", "--trusted-signers", allowedSigners(t, "", trustedKey))
	if strings.Count(res.stderr, "repository signers differ from the trusted signers") != 1 {
		t.Errorf("no single warning that the repository's signers differ from the trusted ones:\n%s", res.stderr)
	}
}

func TestSyncRefusesASignatureInTheWrongNamespace(t *testing.T) {
	_, up, sink := layout(t)
	key := newKey(t, "ed25519", "publisher@example.org")
	gen(t, up, generate.Options{Versions: 1, Signer: key.signer(t, "other")})
	trustRefusal(t, up, sink, "namespace", "--trusted-signers", allowedSigners(t, "", key))
}

func TestSyncRefusesASignatureByAnExpiredKey(t *testing.T) {
	_, up, sink := layout(t)
	key := newKey(t, "ecdsa", "publisher@example.org")
	gen(t, up, generate.Options{Versions: 1, Signer: key.signer(t, "fdl")})
	trustRefusal(t, up, sink, "expired", "--trusted-signers", allowedSigners(t, `valid-before="20200101"`, key))
}

func TestSyncWithACustomSignatureNamespace(t *testing.T) {
	_, up, sink := layout(t)
	key := newKey(t, "ed25519", "publisher@example.org")
	gen(t, up, generate.Options{Versions: 1, Signer: key.signer(t, "towns")})
	if _, res := syncJSON(t, "--trusted-signers", allowedSigners(t, "", key), "--signature-namespace", "towns", "--require-signatures", up, sink); res.code != 0 {
		t.Fatalf("exit %d", res.code)
	}
}

func TestSyncRejectsAnUnparsableTrustedSignersFileAsUsage(t *testing.T) {
	_, up, sink := layout(t)
	gen(t, up, generate.Options{Versions: 1})
	bad := filepath.Join(t.TempDir(), "allowed_signers")
	os.WriteFile(bad, []byte("# ok\nalice@example.org not-a-key-type AAAA\n"), 0o644)
	res := run(t, "sync", "--trusted-signers", bad, up, sink)
	if res.code != 2 || !strings.Contains(res.stderr, bad+":2") {
		t.Errorf("exit %d, want 2 naming %s:2\n%s", res.code, bad, res.stderr)
	}
	if _, err := os.Stat(sink); err == nil {
		t.Error("the sink was created despite the configuration error")
	}
}

func TestVerifyRefusesUnsignedVersionsWhenSignaturesAreRequired(t *testing.T) {
	_, up, sink := layout(t)
	key := newKey(t, "ed25519", "publisher@example.org")
	repo := gen(t, up, generate.Options{Versions: 1})
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("sync: exit %d", res.code)
	}
	res := run(t, "verify", "--trusted-signers", allowedSigners(t, "", key), "--require-signatures", sink)
	if res.code != 1 || !fdltest.Contains(res.stdout, repo.Versions[0], "no signature") {
		t.Errorf("exit %d, want 1 naming the unsigned version\n%s", res.code, res.stdout)
	}
}
