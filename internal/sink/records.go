package sink

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// The mirror's copy of a version's record and signature, read as bytes:
// the sink judges nothing, and internal/source judges them
// (source.JudgeRecord, source.JudgeSignature) as it judges upstream's.

// ReadRecord reads the record of version id in the mirror.
func (v Versions) ReadRecord(ctx context.Context, id string) ([]byte, error) {
	return backend.ReadAll(ctx, v.s.b, repo.VersionFile(id, repo.RecordFile), repo.MaxRecordFile)
}

// ReadSignature reads the signature of version id in the mirror; nil
// where it has none.
func (v Versions) ReadSignature(ctx context.Context, id string) ([]byte, error) {
	sig, err := backend.ReadAll(ctx, v.s.b, repo.VersionFile(id, repo.SignatureFile), repo.MaxSmallFile)
	if backend.IsNotExist(err) {
		return nil, nil
	}
	return sig, err
}
