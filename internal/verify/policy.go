package verify

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Policy is what the operator trusts: an allowed_signers file they got from
// the publisher by another channel. Keys listed in the repository's own
// fdl.json are never part of it.
type Policy struct {
	// Signers are the trusted keys; nil means signatures are not checked.
	Signers *AllowedSigners
	// Require refuses versions that carry no signature.
	Require bool
	// Namespace is the SSHSIG namespace, "fdl" when empty.
	Namespace string
	// Now is the clock for valid-after/valid-before; time.Now when nil.
	Now func() time.Time
}

// Why a version's signature was refused: SignatureError.Reason.
const (
	SigNoSignature    = "no-signature"
	SigBadSignature   = "bad-signature"
	SigUntrustedKey   = "untrusted-key"
	SigWrongNamespace = "wrong-namespace"
	SigKeyExpired     = "key-expired"
	SigKeyNotYetValid = "key-not-yet-valid"
)

var sigReasonText = map[string]string{
	SigNoSignature:    "no signature",
	SigBadSignature:   "bad signature",
	SigUntrustedKey:   "untrusted key",
	SigWrongNamespace: "wrong namespace",
	SigKeyExpired:     "key expired",
	SigKeyNotYetValid: "key not yet valid",
}

// SignatureResult says who signed an accepted version.
type SignatureResult struct {
	Principal   string // principals of the allowed_signers line, as written
	Fingerprint string // SHA256:... of the signing key
}

// SignatureError is a version refused by the signature policy.
type SignatureError struct {
	Version     string
	Reason      string // one of the Sig* constants
	Fingerprint string // of the signing key, when the signature parsed
	Principal   string // of the key's allowed_signers line, when it has one
	Err         error  // the detail or cause
}

func (e *SignatureError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "version %s: ", e.Version)
	switch {
	case e.Fingerprint != "":
		fmt.Fprintf(&b, "signature by %s", e.Fingerprint)
		if e.Principal != "" {
			fmt.Fprintf(&b, " (%s)", e.Principal)
		}
		b.WriteString(" refused: ")
	case e.Reason == SigNoSignature:
		b.WriteString("refused: ")
	default:
		b.WriteString("signature refused: ")
	}
	b.WriteString(sigReasonText[e.Reason])
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	return b.String()
}

func (e *SignatureError) Unwrap() error { return e.Err }

// CheckVersion decides whether a version may be published: record is the
// exact bytes of its version.json, sig those of its version.json.sig or nil
// if it has none. Like `ssh-keygen -Y find-principals` there is no identity
// to match: any line holding the key counts if it allows the namespace and
// is valid now. It returns (nil, nil) when signatures are not checked or an
// unsigned version is allowed; a refusal is a *SignatureError.
func (p *Policy) CheckVersion(versionID string, record, sig []byte) (*SignatureResult, error) {
	if p.Signers == nil {
		return nil, nil
	}
	if sig == nil {
		if p.Require {
			return nil, &SignatureError{Version: versionID, Reason: SigNoSignature, Err: errors.New("signatures are required")}
		}
		return nil, nil
	}
	refuse := func(reason, fp, principal string, err error) (*SignatureResult, error) {
		return nil, &SignatureError{Version: versionID, Reason: reason, Fingerprint: fp, Principal: principal, Err: err}
	}
	s, err := ParseSignature(sig)
	if err != nil {
		return refuse(SigBadSignature, "", "", err)
	}
	fp := ssh.FingerprintSHA256(s.PublicKey)
	if cert, ok := s.PublicKey.(*ssh.Certificate); ok {
		fp = ssh.FingerprintSHA256(cert.Key) // as ssh-keygen shows it
	}
	lines := p.Signers.withKey(s.PublicKey)
	principal := ""
	if len(lines) > 0 {
		principal = lines[0].Principals
	}
	ns := p.namespace()
	if s.Namespace != ns {
		return refuse(SigWrongNamespace, fp, principal, fmt.Errorf("signed for %q, want %q", s.Namespace, ns))
	}
	if err := s.Verify(record, ns); err != nil {
		return refuse(SigBadSignature, fp, principal, err)
	}
	if len(lines) == 0 {
		return refuse(SigUntrustedKey, fp, "", fmt.Errorf("not in %s", p.Signers.Name))
	}
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	// Several lines may hold the key: one that accepts is enough; otherwise
	// the first line's objection is the reason.
	var firstReason string
	var firstErr error
	for _, l := range lines {
		reason, detail := l.refusal(ns, now)
		if reason == "" {
			return &SignatureResult{Principal: l.Principals, Fingerprint: fp}, nil
		}
		if firstReason == "" {
			firstReason, firstErr = reason, detail
		}
	}
	return refuse(firstReason, fp, principal, firstErr)
}

func (p *Policy) namespace() string {
	if p.Namespace == "" {
		return "fdl"
	}
	return p.Namespace
}

// withKey returns the lines that list key, in file order.
func (as *AllowedSigners) withKey(key ssh.PublicKey) []*AllowedSigner {
	var lines []*AllowedSigner
	for _, s := range as.Signers {
		if bytes.Equal(s.Key.Marshal(), key.Marshal()) {
			lines = append(lines, s)
		}
	}
	return lines
}

// CompareRepoSigners compares the keys a repository's fdl.json lists in
// "signers" (allowed_signers lines) with the trusted ones and returns a
// one-line warning when they differ, "" when they are the same or either is
// empty. It only informs the operator: the repository's keys are never
// trusted.
func (p *Policy) CompareRepoSigners(lines []string) string {
	if p.Signers == nil || len(p.Signers.Signers) == 0 || len(lines) == 0 {
		return ""
	}
	repo, err := ParseAllowedSigners(strings.NewReader(strings.Join(lines, "\n")), "fdl.json signers")
	if err != nil {
		return fmt.Sprintf("cannot compare the repository's signers with the trusted ones: %v", err)
	}
	if len(repo.Signers) == 0 {
		return ""
	}
	onlyRepo, onlyTrusted := keysMissing(repo, p.Signers), keysMissing(p.Signers, repo)
	if len(onlyRepo) == 0 && len(onlyTrusted) == 0 {
		return ""
	}
	var parts []string
	if len(onlyRepo) > 0 {
		parts = append(parts, "listed by the repository but not trusted: "+strings.Join(onlyRepo, ", "))
	}
	if len(onlyTrusted) > 0 {
		parts = append(parts, "trusted but not listed by the repository: "+strings.Join(onlyTrusted, ", "))
	}
	return "fdl.json signers differ from the trusted signers (new keys may need to be trusted): " + strings.Join(parts, "; ")
}

// keysMissing lists the keys of a that b does not hold, once each, as
// "fingerprint (principals)".
func keysMissing(a, b *AllowedSigners) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range a.Signers {
		fp := ssh.FingerprintSHA256(s.Key)
		if seen[fp] || len(b.withKey(s.Key)) > 0 {
			continue
		}
		seen[fp] = true
		out = append(out, fmt.Sprintf("%s (%s)", fp, s.Principals))
	}
	return out
}
