package sync

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// Options tune one run of the engine.
type Options struct {
	// Concurrency is how many files are copied at once (default 8).
	Concurrency int
	// DryRun plans and reports, and writes nothing.
	DryRun bool
	// Trust checks version signatures; nil checks none. *verify.Policy is
	// the implementation.
	Trust Trust
	// Logger receives structured logs; nil logs nothing.
	Logger *zap.Logger
	// Progress, when set, is told of every file copied (for a display).
	Progress func(files int64, bytes int64)
	// Lock, when set, takes the mirror's lock; the run calls it only once
	// it knows it has something to write, and calls unlock at its end.
	// Losing the lock (lost closed) stops the run at a safe point.
	Lock func(ctx context.Context) (unlock func(), lost <-chan struct{}, err error)
}

// Trust judges a version's signature against keys the operator trusts.
type Trust interface {
	// CheckVersion returns an error when the version must not be
	// published; sig is nil when the version carries no signature.
	CheckVersion(versionID string, record, sig []byte) (any, error)
	// CompareRepoSigners returns a warning when the keys the repository
	// lists differ from the trusted ones ("" when they agree).
	CompareRepoSigners(lines []string) string
}

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
)

// Refusal is one thing the run would not do, and why.
type Refusal struct {
	Ref     string `json:"ref,omitempty"`
	Version string `json:"version,omitempty"`
	File    string `json:"file,omitempty"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// RefMove is one ref written in the sink.
type RefMove struct {
	Ref  string `json:"ref"`
	From string `json:"from,omitempty"` // empty: the ref is new
	To   string `json:"to"`
}

// Report is what a run did.
type Report struct {
	Source            string        `json:"source"`
	Sink              string        `json:"sink"`
	DryRun            bool          `json:"dry_run,omitempty"`
	Started           time.Time     `json:"started"`
	Duration          time.Duration `json:"duration_ns"`
	FilesCopied       int64         `json:"files_copied"`
	BytesCopied       int64         `json:"bytes_copied"`
	VersionsPublished []string      `json:"versions_published"`
	// CatalogsRead counts catalogs fetched and opened: zero on a run with
	// nothing new.
	CatalogsRead int       `json:"catalogs_read"`
	RefsMoved    []RefMove `json:"refs_moved"`
	Refused      []Refusal `json:"refused"`
	// Planned lists the files a dry run would copy.
	Planned []string `json:"planned,omitempty"`
	// Lag counts upstream refs the sink does not match after the run.
	Lag int `json:"lag"`
}

// OK is true when nothing was refused or failed.
func (r *Report) OK() bool { return len(r.Refused) == 0 }
