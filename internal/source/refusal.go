package source

import (
	"errors"
	"fmt"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Refusal reasons: stable, short labels for summaries and metrics.
const (
	ReasonBadRef       = "bad-ref"         // ref name or content against the rules
	ReasonTagMoved     = "tag-moved"       // a tag in the sink with another value
	ReasonRecord       = "bad-record"      // version.json missing or malformed
	ReasonSHA256       = "sha256-mismatch" // catalog does not match its record
	ReasonCatalog      = "bad-catalog"     // catalog cannot be read or breaks a path rule
	ReasonMissingFile  = "missing-file"    // a file the version needs is not upstream
	ReasonSizeMismatch = "size-mismatch"   // a file's size differs from its record
	ReasonSignature    = "signature"       // signature missing, bad or untrusted
	ReasonVersion      = "version-refused" // ref not moved: its version was refused
	ReasonCopy         = "copy-failed"     // an I/O error that retries did not cure
	ReasonLimit        = "limit-exceeded"  // a catalog past one of the catalog limits
	ReasonRewound      = "rewound"         // a branch moved back to an ancestor upstream
	ReasonDiverged     = "diverged"        // a branch moved to an unrelated history upstream
	ReasonReplay       = "replayed-record" // a record whose "id" is another version's
	// ReasonReaderFailed: a catalog's reader crashed, was killed by a
	// limit or the timeout, or broke the protocol (catalog.ReaderError).
	ReasonReaderFailed = "catalog-reader-failed"
)

// Refusal is one thing a run would not do, and why.
type Refusal struct {
	Ref     string `json:"ref,omitempty"`
	Version string `json:"version,omitempty"`
	File    string `json:"file,omitempty"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// RefusalError is an error that carries its report entry.
type RefusalError struct{ Refusal }

func (r *RefusalError) Error() string { return r.Message }

// Permanent: a refusal is a verdict on the upstream's bytes, which a
// retry would only read again (backend.IsPermanent).
func (r *RefusalError) Permanent() bool { return true }

// Refuse is a refusal of version (or of no version: "") over file. Its
// message is bounded (repo.BoundText): upstream text (a table path, a
// record's field) can be megabytes, and a message is kept in the mirror's
// state, the report, the daemon's status page and logs.
func Refuse(reason, version, file string, format string, args ...any) *RefusalError {
	return &RefusalError{Refusal{Version: version, File: file, Reason: reason, Message: repo.BoundText(fmt.Sprintf(format, args...), repo.MaxMessage)}}
}

// RecordRefusal is the refusal of a record that does not parse: a replay
// where its "id" names another version.
func RecordRefusal(id string, err error) *RefusalError {
	name := repo.VersionFile(id, repo.RecordFile)
	if errors.Is(err, repo.ErrReplay) {
		return Refuse(ReasonReplay, id, name, "%v", err)
	}
	return Refuse(ReasonRecord, id, name, "%v", err)
}
