package verify

import "github.com/fdl-mirror/fdl-mirror/internal/source"

// AsTrust is p as the judge of signatures that internal/source uses
// (source.Trust); nil for a nil p, which checks no signature.
func (p *Policy) AsTrust() source.Trust {
	if p == nil {
		return nil
	}
	return policyTrust{p}
}

type policyTrust struct{ p *Policy }

func (t policyTrust) CheckVersion(id string, record, sig []byte) error {
	_, err := t.p.CheckVersion(id, record, sig)
	return err
}

func (t policyTrust) CompareRepoSigners(lines []string) string { return t.p.CompareRepoSigners(lines) }
