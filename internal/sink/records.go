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
func (s *Sink) ReadRecord(ctx context.Context, id string) ([]byte, error) {
	return backend.ReadAll(ctx, s.b, repo.VersionFile(id, repo.RecordFile), repo.MaxRecordFile)
}

// ReadSignature reads the signature of version id in the mirror; nil
// where it has none.
func (s *Sink) ReadSignature(ctx context.Context, id string) ([]byte, error) {
	sig, err := backend.ReadAll(ctx, s.b, repo.VersionFile(id, repo.SignatureFile), repo.MaxSmallFile)
	if backend.IsNotExist(err) {
		return nil, nil
	}
	return sig, err
}

// ReadRefs reads the refs of the mirror as a reader of it finds them
// (repo.ReadRefs: its ref files, or refs.json where its store cannot
// list): refs that break the rules are left out, with their reasons in
// bad; the error is for refs that cannot be read at all.
func (s *Sink) ReadRefs(ctx context.Context) (refs repo.Refs, bad []*repo.RefError, err error) {
	return repo.ReadRefs(ctx, s.b)
}
