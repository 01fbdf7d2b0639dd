package prune

import "time"

// RemovedRef is a ref removed from the mirror, with the version it named.
type RemovedRef struct {
	Ref     string `json:"ref"`
	Version string `json:"version"`
}

// RemovedVersion is a version removed from the mirror, and why.
type RemovedVersion struct {
	Version string `json:"version"`
	Reason  string `json:"reason"` // ReasonExpired or ReasonGone
	// Complete is false for a folder without version.json that an
	// earlier, interrupted prune (or sync) left.
	Complete bool `json:"complete"`
}

// Report is what a prune removed or, in a dry run, would remove.
type Report struct {
	Source           string           `json:"source"`
	Sink             string           `json:"sink"`
	DryRun           bool             `json:"dry_run,omitempty"`
	Started          time.Time        `json:"started"`
	Duration         time.Duration    `json:"duration_ns"`
	RefsRemoved      []RemovedRef     `json:"refs_removed"`
	HeadRemoved      string           `json:"head_removed,omitempty"` // the ref HEAD named, when HEAD goes with it
	VersionsRemoved  []RemovedVersion `json:"versions_removed"`
	DataFilesRemoved []string         `json:"data_files_removed"`
	// Deletions counts the objects the plan removes, which --max-delete bounds.
	Deletions int `json:"deletions"`
	// Removed lists every object removed, in order; in a dry run, every
	// object that would be.
	Removed []string `json:"removed"`
	// Unnamed lists data files that no catalog in the mirror names: left
	// alone (listed only when the prune looked at data files).
	Unnamed []string `json:"unnamed"`
	// MaybeRemoved lists objects whose removal was sent when the run was
	// stopped (the lock lost, a signal) before the store's answer came
	// in: the store may have carried it out. The next prune finds out.
	MaybeRemoved []string `json:"maybe_removed,omitempty"`
	// LockLost: the prune lost the mirror's lock (another run took it
	// over, or its lease ran out by its own clock) and stopped; Removed
	// lists what it removed before it noticed, MaybeRemoved what was in
	// flight then.
	LockLost bool `json:"lock_lost,omitempty"`
	// Grace is the grace period the prune held removals for (0: it
	// removed at once; see Options.Grace).
	Grace time.Duration `json:"grace_ns,omitempty"`
	// Candidates counts the objects found unreferenced and held for the
	// grace, not removed by this run; NextDue is when the first may go.
	Candidates int        `json:"candidates"`
	NextDue    *time.Time `json:"next_due,omitempty"`
	// Rewritten counts the objects a run made its own within the grace
	// (written again with a new token): none is listed before the grace
	// has passed since (see grace.go).
	Rewritten int `json:"rewritten,omitempty"`
	// candidatesChanged: the list of candidates is to be written.
	candidatesChanged bool
}

// Writes says whether the prune writes anything: removals, or its list
// of candidates (a run that does takes the lock).
func (r *Report) Writes() bool { return r.Deletions > 0 || r.candidatesChanged }
