package source

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Trust judges a version's signature against keys the operator trusts;
// *verify.Policy is the implementation (through mirror.TrustOf).
type Trust interface {
	// CheckVersion returns an error when the version must not be
	// published; sig is nil when the version carries no signature.
	CheckVersion(versionID string, record, sig []byte) error
	// CompareRepoSigners returns a warning when the keys the repository
	// lists differ from the trusted ones ("" when they agree).
	CompareRepoSigners(lines []string) string
}

// ReadRecord fetches and parses a version's record. A version that a ref
// names (isRoot) and that upstream lacks is refused; an ancestor that it
// lacks is left out: raw and rec nil, no error.
func (s *Source) ReadRecord(ctx context.Context, id string, isRoot bool) (raw []byte, rec *repo.Record, err error) {
	name := repo.VersionFile(id, repo.RecordFile)
	raw, err = backend.ReadAll(ctx, s.r, name, repo.MaxRecordFile)
	switch {
	case backend.IsNotExist(err) && !isRoot:
		s.log.Info("ancestor version absent upstream; skipped", zap.String("version", id))
		return nil, nil, nil
	case backend.IsNotExist(err):
		return nil, nil, Refuse(ReasonMissingFile, id, name, "version %s: %s is missing upstream", id, name)
	case errors.Is(err, backend.ErrTooLarge):
		return nil, nil, Refuse(ReasonRecord, id, name, "version %s: %s is larger than the %d bytes a record may have", id, name, repo.MaxRecordFile)
	case err != nil:
		return nil, nil, err
	}
	if rec, err = repo.ParseRecord(id, raw); err != nil {
		return raw, nil, RecordRefusal(id, err)
	}
	return raw, rec, nil
}

// ReadSignature reads a version's signature where its folder (files, as
// VersionFiles gives them) has one; nil where it has none.
func (s *Source) ReadSignature(ctx context.Context, id string, files map[string]int64) ([]byte, error) {
	if _, ok := files[repo.SignatureFile]; !ok {
		return nil, nil
	}
	return backend.ReadAll(ctx, s.r, repo.VersionFile(id, repo.SignatureFile), repo.MaxSmallFile)
}

// CheckSignature judges a version's record and signature (nil: none) by
// the trusted keys; nil without a Trust.
func (s *Source) CheckSignature(id string, record, sig []byte) error {
	if s.trust == nil {
		return nil
	}
	if err := s.trust.CheckVersion(id, record, sig); err != nil {
		return Refuse(ReasonSignature, id, repo.VersionFile(id, repo.SignatureFile), "%v", err)
	}
	return nil
}
