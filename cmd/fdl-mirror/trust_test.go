package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// The signature flags as users pass them. Which signatures the engine
// accepts and refuses is specified in internal/sync/trust_test.go.

var (
	newKey         = fdltest.NewSSHKey
	allowedSigners = fdltest.AllowedSigners
)

// --trusted-signers, --require-signatures and --signature-namespace reach
// the engine and verify: a version signed in the named namespace passes
// both, an unsigned one is refused with exit 1, naming the version.
func TestSyncAndVerifyTakeTheSignatureFlags(t *testing.T) {
	key := newKey(t, "ed25519", "publisher@example.org")
	trusted := allowedSigners(t, `namespaces="towns"`, key)
	flags := []string{"--trusted-signers", trusted, "--require-signatures", "--signature-namespace", "towns"}

	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 2, Signer: key.Signer(t, "towns")})
	rep, res := syncJSON(t, append(flags, up, sink)...)
	if res.code != 0 {
		t.Fatalf("exit %d: %+v", res.code, rep.Refused)
	}
	for _, id := range repo.Versions {
		if _, err := os.Stat(filepath.Join(sink, "versions", id, "version.json.sig")); err != nil {
			t.Errorf("version %s: signature not mirrored", id)
		}
	}
	if v := run(t, append(append([]string{"verify"}, flags...), sink)...); v.code != 0 {
		t.Errorf("verify with signatures: exit %d\n%s", v.code, v.stdout)
	}

	_, up, sink = layout(t)
	unsigned := gen(t, up, generate.Options{Versions: 1})
	res = run(t, append(append([]string{"sync"}, flags...), up, sink)...)
	if res.code != 1 || !fdltest.Contains(res.stdout, fdlsync.ReasonSignature, unsigned.Versions[0], "no signature") {
		t.Errorf("unsigned version under --require-signatures: exit %d, want 1 naming it\n%s", res.code, res.stdout)
	}
}

// The warning that the repository lists other keys than the operator's
// is printed once, on stderr.
func TestSyncWarnsOnceThatTheRepositorysSignersDiffer(t *testing.T) {
	_, up, sink := layout(t)
	trustedKey := newKey(t, "ed25519", "publisher@example.org")
	intruder := newKey(t, "ed25519", "intruder@example.org")
	gen(t, up, generate.Options{Versions: 1, Signer: intruder.Signer(t, "fdl")})
	fdltest.EditJSON(t, filepath.Join(up, "fdl.json"), func(doc map[string]any) {
		doc["signers"] = []string{intruder.Principal + " " + intruder.Pub}
	})
	res := run(t, "sync", "--trusted-signers", allowedSigners(t, "", trustedKey), up, sink)
	if res.code != 1 {
		t.Errorf("exit %d, want 1 (the intruder's signature refused)", res.code)
	}
	if strings.Count(res.stderr, "repository signers differ from the trusted signers") != 1 {
		t.Errorf("no single warning that the repository's signers differ from the trusted ones:\n%s", res.stderr)
	}
}

func TestSyncRejectsAnUnparsableTrustedSignersFileAsUsage(t *testing.T) {
	_, up, sink := layout(t)
	genCopy(t, up, generate.Options{Versions: 1})
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
	repo := genCopy(t, up, generate.Options{Versions: 1})
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("sync: exit %d", res.code)
	}
	res := run(t, "verify", "--trusted-signers", allowedSigners(t, "", key), "--require-signatures", sink)
	if res.code != 1 || !fdltest.Contains(res.stdout, repo.Versions[0], "no signature") {
		t.Errorf("exit %d, want 1 naming the unsigned version\n%s", res.code, res.stdout)
	}
}
