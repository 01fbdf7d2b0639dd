package verify

// AllowedSigners is a parsed OpenSSH allowed_signers file.
// TODO(issue 4): parser and verifier.
type AllowedSigners struct{}
