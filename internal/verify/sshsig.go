package verify

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// The armored SSHSIG format of OpenSSH's PROTOCOL.sshsig, as written by
// `ssh-keygen -Y sign`.
const (
	sigBegin   = "-----BEGIN SSH SIGNATURE-----"
	sigEnd     = "-----END SSH SIGNATURE-----"
	sigMagic   = "SSHSIG"
	sigVersion = 1
)

// Signature is a parsed SSHSIG signature. Parsing checks the format only;
// Verify checks the signature over a message.
type Signature struct {
	PublicKey     ssh.PublicKey // the key that made the signature
	Namespace     string        // what the signature is for, "fdl" for versions
	HashAlgorithm string        // "sha256" or "sha512"
	Sig           *ssh.Signature
}

// ParseSignature parses an armored SSH signature (-----BEGIN SSH SIGNATURE-----).
func ParseSignature(armored []byte) (*Signature, error) {
	rest, ok := bytes.CutPrefix(armored, []byte(sigBegin))
	if !ok {
		return nil, errors.New("ssh signature: missing " + sigBegin + " header")
	}
	body, _, ok := bytes.Cut(rest, []byte(sigEnd))
	if !ok {
		return nil, errors.New("ssh signature: missing " + sigEnd + " footer")
	}
	blob, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(body)), ""))
	if err != nil {
		return nil, fmt.Errorf("ssh signature: %w", err)
	}

	blob, ok = bytes.CutPrefix(blob, []byte(sigMagic))
	if !ok {
		return nil, errors.New("ssh signature: bad magic, not an SSHSIG blob")
	}
	var wire struct {
		Version       uint32
		PublicKey     []byte
		Namespace     string
		Reserved      []byte
		HashAlgorithm string
		Signature     []byte
	}
	if err := ssh.Unmarshal(blob, &wire); err != nil {
		return nil, fmt.Errorf("ssh signature: %w", err)
	}
	if wire.Version != sigVersion {
		return nil, fmt.Errorf("ssh signature: unsupported version %d", wire.Version)
	}
	if strings.IndexByte(wire.Namespace, 0) >= 0 || strings.IndexByte(wire.HashAlgorithm, 0) >= 0 {
		return nil, errors.New("ssh signature: NUL byte in namespace or hash algorithm")
	}
	key, err := ssh.ParsePublicKey(wire.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("ssh signature: public key: %w", err)
	}
	sig := new(ssh.Signature)
	if err := ssh.Unmarshal(wire.Signature, sig); err != nil {
		return nil, fmt.Errorf("ssh signature: signature blob: %w", err)
	}
	return &Signature{PublicKey: key, Namespace: wire.Namespace, HashAlgorithm: wire.HashAlgorithm, Sig: sig}, nil
}

// signingKeyTypes are the key types accepted for signatures. Certificates,
// DSA and security-key types are refused.
var signingKeyTypes = map[string]bool{
	ssh.KeyAlgoED25519:  true,
	ssh.KeyAlgoECDSA256: true,
	ssh.KeyAlgoECDSA384: true,
	ssh.KeyAlgoECDSA521: true,
	ssh.KeyAlgoRSA:      true,
}

// Verify checks that s signs message for namespace, as `ssh-keygen -Y verify`
// does; it does not decide whether the key is trusted.
func (s *Signature) Verify(message []byte, namespace string) error {
	if s.Namespace != namespace {
		return fmt.Errorf("ssh signature: namespace %q, want %q", s.Namespace, namespace)
	}
	keyType := s.PublicKey.Type()
	if !signingKeyTypes[keyType] {
		return fmt.Errorf("ssh signature: unsupported key type %s", keyType)
	}
	// ssh-rsa signatures hash with SHA-1; OpenSSH refuses them in SSHSIG too.
	if keyType == ssh.KeyAlgoRSA && s.Sig.Format != ssh.KeyAlgoRSASHA256 && s.Sig.Format != ssh.KeyAlgoRSASHA512 {
		return fmt.Errorf("ssh signature: RSA signature format %s refused, want rsa-sha2-256 or rsa-sha2-512", s.Sig.Format)
	}
	// Only security-key signatures carry data after the blob.
	if len(s.Sig.Rest) != 0 {
		return errors.New("ssh signature: trailing data after the signature blob")
	}
	var digest []byte
	switch s.HashAlgorithm {
	case "sha256":
		h := sha256.Sum256(message)
		digest = h[:]
	case "sha512":
		h := sha512.Sum512(message)
		digest = h[:]
	default:
		return fmt.Errorf("ssh signature: unsupported hash algorithm %q", s.HashAlgorithm)
	}
	if err := s.PublicKey.Verify(signedData(namespace, s.HashAlgorithm, digest), s.Sig); err != nil {
		return fmt.Errorf("ssh signature: %w", err)
	}
	return nil
}

// signedData is what an SSHSIG signature signs (PROTOCOL.sshsig). The
// reserved field is always empty here whatever the blob carries, as in OpenSSH.
func signedData(namespace, hashAlgorithm string, digest []byte) []byte {
	return append([]byte(sigMagic), ssh.Marshal(struct {
		Namespace     string
		Reserved      []byte
		HashAlgorithm string
		Hash          []byte
	}{namespace, nil, hashAlgorithm, digest})...)
}
