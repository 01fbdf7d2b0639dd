package source

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Trust judges a version's signature against keys the operator trusts;
// *verify.Policy is the implementation (through its AsTrust).
type Trust interface {
	// CheckVersion returns an error when the version must not be
	// published; sig is nil when the version carries no signature.
	CheckVersion(versionID string, record, sig []byte) error
	// CompareRepoSigners returns a warning when the keys the repository
	// lists differ from the trusted ones ("" when they agree).
	CompareRepoSigners(lines []string) string
}

// A version's record and signature are judged here and nowhere else:
// JudgeRecord is the one parse of a version.json, JudgeSignature the one
// check of a signature, whoever read the bytes (the upstream through a
// Source, the mirror through internal/sink, a repository verify checks).

// JudgeRecord parses a version's record, as read from wherever: the
// record of version id, or the refusal of one that breaks the rules (a
// replay where its "id" names another version).
func JudgeRecord(id string, raw []byte) (*repo.Record, *RefusalError) {
	rec, err := repo.ParseRecord(id, raw)
	if err != nil {
		return nil, RecordRefusal(id, err)
	}
	return rec, nil
}

// JudgeSignature judges a version's record and signature (nil: none) by
// the trusted keys: the refusal of a version they do not let through;
// nil without a Trust.
func JudgeSignature(trust Trust, id string, record, sig []byte) *RefusalError {
	if trust == nil {
		return nil
	}
	if err := trust.CheckVersion(id, record, sig); err != nil {
		return Refuse(ReasonSignature, id, repo.VersionFile(id, repo.SignatureFile), "%v", err)
	}
	return nil
}

// Versions is the upstream's versions: their folders listed, their
// records and signatures read and judged, and whether upstream still
// keeps them. A concern of its own, as the sink's Versions is, so that
// every read of a version passes the same judgement (and, in a fan-out,
// is served to the later sinks as the first read it).
type Versions struct{ s *Source }

// Versions is the upstream's versions.
func (s *Source) Versions() Versions { return Versions{s} }

// ChecksSignatures says whether the source judges signatures: it was
// given a Trust.
func (v Versions) ChecksSignatures() bool { return v.s.trust != nil }

// JudgeSignature is JudgeSignature by the source's Trust: for the
// mirror's copy of a version, judged as the upstream's is.
func (v Versions) JudgeSignature(id string, record, sig []byte) *RefusalError {
	return JudgeSignature(v.s.trust, id, record, sig)
}

// Version is a version's record and signature, read and judged.
type Version struct {
	Record *repo.Record // parsed by JudgeRecord; Record.Raw is the bytes read
	// Signature is version.json.sig; nil where the version has none, or
	// where no Trust judges it (it is then not read).
	Signature []byte
	// Verdict is JudgeSignature's: nil where the Trust lets the version
	// through, or where there is no Trust.
	Verdict *RefusalError
}

// Passes says whether the version passed every judgement made of it.
func (v *Version) Passes() bool { return v != nil && v.Verdict == nil }

// ReadError is a file of the upstream that could not be read at all (a
// failure of the store, or a file that is not there): no verdict on its
// bytes.
type ReadError struct {
	File string
	Err  error
}

func (e *ReadError) Error() string { return fmt.Sprintf("%s: %v", e.File, e.Err) }
func (e *ReadError) Unwrap() error { return e.Err }

// Read reads and judges a version upstream: its record, and where
// the Source has a Trust, its signature. The error is a *ReadError where
// the record (then v is nil) or the signature (then v has the record, and
// no verdict) could not be read, and a *RefusalError where the record
// breaks the rules. Used where any version may be asked for (the parents
// ancestry follows, a repository verify checks); a run's versions are
// read with ReadRecord and ReadSignature, which use what the run listed.
func (v Versions) Read(ctx context.Context, id string) (*Version, error) {
	s := v.s
	name := repo.VersionFile(id, repo.RecordFile)
	raw, err := v.readRecordBytes(ctx, name, id)
	if err != nil {
		return nil, &ReadError{name, err}
	}
	rec, bad := JudgeRecord(id, raw)
	if bad != nil {
		return nil, bad
	}
	out := &Version{Record: rec}
	if s.trust == nil {
		return out, nil
	}
	sigName := repo.VersionFile(id, repo.SignatureFile)
	sig, err := v.readSignatureBytes(ctx, sigName, id)
	if backend.IsNotExist(err) {
		sig, err = nil, nil
	}
	if err != nil {
		return out, &ReadError{sigName, err}
	}
	out.Signature = sig
	out.Verdict = JudgeSignature(s.trust, id, raw, sig)
	return out, nil
}

// ReadRecord fetches and parses a version's record. A version that a ref
// names (isRoot) and that upstream lacks is refused; an ancestor that it
// lacks is left out: raw and rec nil, no error.
func (v Versions) ReadRecord(ctx context.Context, id string, isRoot bool) (raw []byte, rec *repo.Record, err error) {
	s := v.s
	name := repo.VersionFile(id, repo.RecordFile)
	raw, err = v.readRecordBytes(ctx, name, id)
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
	rec, bad := JudgeRecord(id, raw)
	if bad != nil {
		return raw, nil, bad
	}
	return raw, rec, nil
}

// ReadSignature reads a version's signature where its folder (files, as
// Files gives them) has one, and judges it with the record raw
// (JudgeSignature): the signature (nil where there is none), or the error
// of a read that failed or the refusal of a version the Trust does not let
// through.
func (v Versions) ReadSignature(ctx context.Context, id string, files map[string]int64, raw []byte) ([]byte, error) {
	var sig []byte
	if _, ok := files[repo.SignatureFile]; ok {
		var err error
		if sig, err = v.readSignatureBytes(ctx, repo.VersionFile(id, repo.SignatureFile), id); err != nil {
			return nil, err
		}
	}
	if r := JudgeSignature(v.s.trust, id, raw, sig); r != nil {
		return nil, r
	}
	return sig, nil
}
