package verify

import "time"

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
