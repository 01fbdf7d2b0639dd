package sync_test

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

// Signatures made by OpenSSH's own ssh-keygen, checked by the engine
// against the operator's allowed_signers, never the repository's.

// trustFrom is the engine's Trust for an allowed_signers file, as the
// command builds it from --trusted-signers, --require-signatures and
// --signature-namespace.
func trustFrom(t *testing.T, allowed string, require bool, namespace string) fdlsync.Trust {
	t.Helper()
	signers, err := verify.LoadAllowedSigners(allowed)
	if err != nil {
		t.Fatal(err)
	}
	return (&verify.Policy{Signers: signers, Require: require, Namespace: namespace}).AsTrust()
}

func TestVersionsSignedByTrustedKeysArePublished(t *testing.T) {
	for _, typ := range []string{"ed25519", "ecdsa", "rsa"} {
		t.Run(typ, func(t *testing.T) {
			_, up, mirror := fdltest.Layout(t)
			key := fdltest.NewSSHKey(t, typ, "publisher@example.org")
			r := fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 2, Signer: key.Signer(t, "fdl")})
			trusted := fdltest.AllowedSigners(t, `namespaces="fdl"`, key)
			rep := mustRunTrusting(t, up, mirror, trustFrom(t, trusted, true, ""), fdlsync.Options{})
			if !rep.OK() {
				t.Fatalf("refused: %+v", rep.Refused)
			}
			for _, id := range r.Versions {
				if _, err := os.Stat(filepath.Join(mirror, "versions", id, "version.json.sig")); err != nil {
					t.Errorf("version %s: signature not mirrored", id)
				}
			}
			fdltest.AssertMirrored(t, up, mirror, nil)
			signers, err := verify.LoadAllowedSigners(trusted)
			if err != nil {
				t.Fatal(err)
			}
			problems, err := verify.CheckRepository(t.Context(), source.New(mustOpen(t, mirror), (&verify.Policy{Signers: signers, Require: true}).AsTrust(), nil),
				verify.CheckOptions{})
			if err != nil || len(problems) > 0 {
				t.Errorf("verify with signatures: %v %+v", err, problems)
			}
		})
	}
}

// assertSignatureRefused checks that a run refused the version for a
// signature saying why, and published no version and no ref.
func assertSignatureRefused(t *testing.T, rep *fdlsync.Report, mirror, why string) {
	t.Helper()
	assertRefused(t, rep, fdlsync.ReasonSignature, why)
	if len(rep.VersionsPublished) != 0 || len(fdltest.Published(t, mirror)) != 0 || fdltest.ReadRef(t, mirror, "refs/heads/main") != "" {
		t.Errorf("published %v although refused", rep.VersionsPublished)
	}
}

func TestUnsignedVersionIsRefusedWhenSignaturesAreRequired(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	key := fdltest.NewSSHKey(t, "ed25519", "publisher@example.org")
	fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1})
	rep := mustRunTrusting(t, up, mirror, trustFrom(t, fdltest.AllowedSigners(t, "", key), true, ""), fdlsync.Options{})
	assertSignatureRefused(t, rep, mirror, "no signature")
}

func TestUnsignedVersionPassesWhenSignaturesAreNotRequired(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	key := fdltest.NewSSHKey(t, "ed25519", "publisher@example.org")
	fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1})
	if rep := mustRunTrusting(t, up, mirror, trustFrom(t, fdltest.AllowedSigners(t, "", key), false, ""), fdlsync.Options{}); !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
}

func TestBadSignatureIsRefusedEvenWhenNotRequired(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	key := fdltest.NewSSHKey(t, "ed25519", "publisher@example.org")
	r := fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 1, Signer: key.Signer(t, "fdl")})
	// The record changes after signing: the signature no longer covers it.
	fdltest.EditJSON(t, filepath.Join(up, "versions", r.Versions[0], "version.json"), func(doc map[string]any) {
		doc["message"] = "tampered"
	})
	rep := mustRunTrusting(t, up, mirror, trustFrom(t, fdltest.AllowedSigners(t, "", key), false, ""), fdlsync.Options{})
	assertSignatureRefused(t, rep, mirror, "bad signature")
}

func TestSignatureByAKeyListedOnlyInTheRepositoryIsRefused(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	trustedKey := fdltest.NewSSHKey(t, "ed25519", "publisher@example.org")
	intruder := fdltest.NewSSHKey(t, "ed25519", "intruder@example.org")
	fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 1, Signer: intruder.Signer(t, "fdl")})
	// Whoever can write the repository can list their own key in fdl.json.
	fdltest.EditJSON(t, filepath.Join(up, "fdl.json"), func(doc map[string]any) {
		doc["signers"] = []string{intruder.Principal + " " + intruder.Pub}
	})
	core, logs := observer.New(zap.WarnLevel)
	rep := mustRunTrusting(t, up, mirror, trustFrom(t, fdltest.AllowedSigners(t, "", trustedKey), false, ""), fdlsync.Options{Logger: zap.New(core)})
	assertSignatureRefused(t, rep, mirror, "untrusted key")
	if n := logs.FilterMessage("repository signers differ from the trusted signers").Len(); n != 1 {
		t.Errorf("%d warnings that the repository's signers differ from the trusted ones, want 1", n)
	}
}

func TestSignatureInTheWrongNamespaceIsRefused(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	key := fdltest.NewSSHKey(t, "ed25519", "publisher@example.org")
	fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 1, Signer: key.Signer(t, "other")})
	rep := mustRunTrusting(t, up, mirror, trustFrom(t, fdltest.AllowedSigners(t, "", key), false, ""), fdlsync.Options{})
	assertSignatureRefused(t, rep, mirror, "namespace")
}

func TestSignatureByAnExpiredKeyIsRefused(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	key := fdltest.NewSSHKey(t, "ecdsa", "publisher@example.org")
	fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 1, Signer: key.Signer(t, "fdl")})
	rep := mustRunTrusting(t, up, mirror, trustFrom(t, fdltest.AllowedSigners(t, `valid-before="20200101"`, key), false, ""), fdlsync.Options{})
	assertSignatureRefused(t, rep, mirror, "expired")
}

func TestCustomSignatureNamespace(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	key := fdltest.NewSSHKey(t, "ed25519", "publisher@example.org")
	fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 1, Signer: key.Signer(t, "towns")})
	if rep := mustRunTrusting(t, up, mirror, trustFrom(t, fdltest.AllowedSigners(t, "", key), true, "towns"), fdlsync.Options{}); !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
}
