package sync

import (
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// Refusal reasons, as source defines them: the Report's vocabulary.
const (
	ReasonBadRef       = source.ReasonBadRef
	ReasonTagMoved     = source.ReasonTagMoved
	ReasonRecord       = source.ReasonRecord
	ReasonSHA256       = source.ReasonSHA256
	ReasonCatalog      = source.ReasonCatalog
	ReasonMissingFile  = source.ReasonMissingFile
	ReasonSizeMismatch = source.ReasonSizeMismatch
	ReasonSignature    = source.ReasonSignature
	ReasonVersion      = source.ReasonVersion
	ReasonCopy         = source.ReasonCopy
	ReasonLimit        = source.ReasonLimit
	ReasonRewound      = source.ReasonRewound
	ReasonDiverged     = source.ReasonDiverged
	ReasonReplay       = source.ReasonReplay
	ReasonReaderFailed = source.ReasonReaderFailed
)

// PendingVersion is an ancestor the mirror keeps to retry (see
// sink.PendingVersion), as a Report lists it.
type PendingVersion = sink.PendingVersion

// Refusal is one thing the run would not do, and why (see source.Refusal).
type Refusal = source.Refusal

// RefMove is one ref written in the sink.
type RefMove struct {
	Ref  string `json:"ref"`
	From string `json:"from,omitempty"` // empty: the ref is new
	To   string `json:"to"`
	// Rewound is "rewound" or "diverged" for a branch that moved to a
	// version not descending from its value (followed by AllowRewind).
	Rewound string `json:"rewound,omitempty"`
}

// RefStatus compares one ref upstream and in the mirror.
type RefStatus struct {
	Ref      string `json:"ref"`
	Upstream string `json:"upstream"`
	Mirror   string `json:"mirror"`
	Behind   bool   `json:"behind"`
	// State is current, behind, rewound, diverged, refused or excluded.
	State string `json:"state"`
	// LastChange is when the mirror first saw the upstream value (zero
	// when it has not recorded it).
	LastChange time.Time `json:"last_change,omitzero"`
}

// Ref states (RefStatus.State).
const (
	RefCurrent  = "current"  // the mirror has upstream's value
	RefBehind   = "behind"   // not yet: the next run moves it
	RefRewound  = "rewound"  // upstream moved the branch back; the mirror keeps its value
	RefDiverged = "diverged" // upstream moved the branch to an unrelated history
	RefRefused  = "refused"  // the version upstream names was refused
	RefExcluded = "excluded" // not selected for this mirror
)

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
	// Planned lists the files a dry run would copy: its data files up
	// to maxPlannedListed, then only counted in PlannedMore (a catalog
	// may name 10,000,000), and every file of the mirror's own.
	Planned     []string `json:"planned,omitempty"`
	PlannedMore int      `json:"planned_more,omitempty"`
	// Lag counts upstream refs the sink does not match after the run.
	Lag int `json:"lag"`
	// Pending lists the ancestors not mirrored yet, kept in the mirror's
	// state and tried again by every run (see PendingVersion).
	Pending []PendingVersion `json:"pending"`
	// PendingMore counts the pending versions left out of Pending (it
	// keeps at most 1,000).
	PendingMore int `json:"pending_more,omitempty"`
	// Distrusted lists the files an earlier run was writing with no
	// barrier behind them when it stopped (a power cut, a kill): they may
	// hold wrong bytes, and were copied again before any version that
	// needs them was published (see .fdl-mirror/unsynced.json).
	Distrusted []string `json:"distrusted,omitempty"`
	// Claimed lists the objects a prune had listed as candidates for
	// removal (or removed, or seen claimed, within its grace) that this
	// run needed and wrote again with a new version token, so that no
	// late removal of the old one lands (see sink/claims.go).
	Claimed []string `json:"claimed,omitempty"`
	// Repaired lists the data files a repair copied back.
	Repaired []string `json:"repaired,omitempty"`
	// Unrepaired lists the data files a repair found missing or of
	// another size and could not copy back; each is refused too.
	Unrepaired []string `json:"unrepaired,omitempty"`
	// Refs compares every upstream ref with the sink after the run; empty
	// when the run stopped before publishing refs.
	Refs []RefStatus `json:"refs"`
	// Excluded lists the upstream refs the selection leaves out.
	Excluded []string `json:"excluded,omitempty"`
	// UpstreamLastChange is when the mirror last saw a selected upstream
	// ref change (zero when unknown: a dry run of a mirror never run).
	UpstreamLastChange time.Time `json:"upstream_last_change,omitzero"`
}

// OK is true when nothing was refused or failed.
func (r *Report) OK() bool { return len(r.Refused) == 0 }

func (l *ledger) addRefusal(r *refusal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.report.Refused = append(l.report.Refused, r.Refusal)
	l.log.Warn("refused", zap.String("reason", r.Reason), zap.String("ref", r.Ref),
		zap.String("version", r.Version), zap.String("file", r.File), zap.String("message", r.Message))
}

func (l *ledger) copied(n int64) {
	l.mu.Lock()
	l.report.FilesCopied++
	l.report.BytesCopied += n
	files, bytes := l.report.FilesCopied, l.report.BytesCopied
	l.mu.Unlock()
	if l.progress != nil {
		l.progress(files, bytes)
	}
}

func (l *ledger) plan(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.plannedData >= maxPlannedListed && strings.HasPrefix(name, l.src.Settings().DataDir) {
		l.report.PlannedMore++
		return
	}
	if strings.HasPrefix(name, l.src.Settings().DataDir) {
		l.plannedData++
	}
	l.report.Planned = append(l.report.Planned, name)
}

// maxPlannedListed is how many data files a dry run's report names.
const maxPlannedListed = 10_000

// FatalError stops a run as a whole: the source's settings are unreadable,
// or the sink holds another repository.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }

func fatalf(format string, args ...any) error {
	return &FatalError{fmt.Errorf(format, args...)}
}

// refusal is an error that carries its report entry.
type refusal = source.RefusalError

// refuse is source.Refuse: a refusal of version over file.
func refuse(reason, version, file string, format string, args ...any) *refusal {
	return source.Refuse(reason, version, file, format, args...)
}
