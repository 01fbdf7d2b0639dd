package prune

import (
	"context"
	"fmt"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// The grace period (Options.Grace). On an object store the mirror's lock
// is a lease: a run paused past it (a frozen VM, a request held in
// flight) wakes after another run took the mirror over, and its removals
// are conditional only on each object's own version token, which a sync
// that relies on a file without rewriting it never changes. So a prune
// removes nothing it has not found unreferenced, unchanged, for longer
// than any run can pause: the first prune that finds an object
// unreferenced records it as a candidate (sink.CandidatesFile, with the
// time and the token it listed), and a later one removes it only if it
// is still unreferenced by every ref and catalog the mirror holds, read
// again under the lock, still holds that token, and has been a candidate
// for the grace. Iceberg's remove_orphan_files (older_than, 3 days),
// Delta Lake's VACUUM (7 days) and git's gc.pruneExpire (2 weeks) do the
// same. A local folder needs none: its lock is flock(2), which the kernel
// holds through any pause.
//
// A version goes whole or not at all: every object of its folder must be
// due. A data file goes only when due and named by no version that
// stays, candidates still in their grace included.
//
// A sync that needs a candidate makes it its own (sink/claims.go): it
// writes it again with a new token, and records it Rewritten. What a
// prune removed stays on the list as Removed, with the token removed,
// for the grace after; a listed or removed object found again with
// another token was rewritten by a run that did not get to record it,
// and counts as Rewritten from now. A Rewritten object is not listed
// again before the grace since: on S3, whose ETag is a digest of the
// bytes, a second rewrite could give back the token a prune paused
// since the first still holds, and the grace is longer than any pause.

// MinGrace is the shortest grace accepted on an object store: longer than
// S3's SigV4 request lifetime (15 minutes) and a GCS access token's (1
// hour), so that no request signed before the prune marked an object can
// land after it removes it, and far longer than any sane lock_ttl.
const MinGrace = time.Hour

// DefaultGrace is the grace of a prune that is given none: a day, so a
// daily prune removes what the one before marked.
const DefaultGrace = 24 * time.Hour

// GraceLockTTLs is how many lock_ttl a grace must span at least: a run
// paused past its lease by a few lease lengths is still far inside it.
const GraceLockTTLs = 10

// CheckGrace refuses a grace shorter than MinGrace or than GraceLockTTLs
// times the lock's lifetime (lockTTL).
func CheckGrace(grace, lockTTL time.Duration) error {
	if grace < MinGrace {
		return fmt.Errorf("prune grace %s is shorter than %s: a request signed before the prune marked an object could still land after it removes it", grace, MinGrace)
	}
	if lockTTL > 0 && grace < GraceLockTTLs*lockTTL {
		return fmt.Errorf("prune grace %s is shorter than %d times lock_ttl (%s): it must be far longer than any lease a paused run could outlive", grace, GraceLockTTLs, lockTTL)
	}
	return nil
}

// graceState is what applyGrace decided, for Run to write back.
type graceState struct {
	next    *sink.Candidates
	version string // the candidates file's token as read
	changed bool   // next differs from what was read
}

// applyGrace holds back every removal of the plan but the refs (a ref
// file's removal is conditional on the token the plan read, which any
// sync that moves it changes): what is due stays in the plan, the rest
// is recorded as candidates. Candidates the plan no longer lists (named
// again) leave the list; those removed leave it once removed (Run).
func (p *pruner) applyGrace(pl *plan) *graceState {
	now := p.opts.Now().UTC().Round(0)
	old := p.listed
	st := &graceState{next: &sink.Candidates{Objects: map[string]sink.Candidate{}}, version: p.listedVersion}
	st.next.Removed = keepUntil(old.Removed, now.Add(-p.opts.Grace))
	st.next.Rewritten = keepUntil(old.Rewritten, now.Add(-p.opts.Grace))
	// mark records name as a candidate and says whether it is due.
	mark := func(name string) bool {
		token := p.versionOf[name]
		if _, ok := st.next.Rewritten[name]; ok {
			return false // made a run's own within the grace: not listed
		}
		c, ok := old.Objects[name]
		fromRemoved := false
		if r, removed := st.next.Removed[name]; !ok && removed {
			// Removed, and there again (a version upstream brought
			// back, copied again): listed anew unless rewritten.
			c, ok, fromRemoved = r, true, true
		}
		switch {
		case ok && c.Version != token && c.Version != "" && token != "":
			// Written again since it was listed or removed, by a run
			// that did not record it: its own from now.
			if st.next.Rewritten == nil {
				st.next.Rewritten = map[string]sink.Candidate{}
			}
			st.next.Rewritten[name] = sink.Candidate{Since: now, Version: c.Version}
			delete(st.next.Removed, name)
			return false
		case !ok || c.Version != token || fromRemoved:
			c = sink.Candidate{Since: now, Version: token}
		}
		delete(st.next.Removed, name)
		st.next.Objects[name] = c
		if due := c.Since.Add(p.opts.Grace); !due.After(now) {
			return true
		} else if p.report.NextDue == nil || due.Before(*p.report.NextDue) {
			p.report.NextDue = &due
		}
		return false
	}
	var versions []*versionPlan
	staying := map[string]bool{} // data files named by versions held back
	for _, v := range pl.versions {
		due := true
		for _, name := range v.objects() {
			due = mark(name) && due
		}
		if due {
			versions = append(versions, v)
			continue
		}
		for _, name := range v.names {
			staying[name] = true
		}
	}
	var dataFiles []string
	for _, name := range pl.dataFiles {
		if mark(name) && !staying[name] {
			dataFiles = append(dataFiles, name)
		}
	}
	pl.versions, pl.dataFiles = versions, dataFiles
	for _, name := range pl.objects() {
		delete(st.next.Objects, name)
	}
	p.report.Candidates = len(st.next.Objects)
	p.report.Rewritten = len(st.next.Rewritten)
	st.changed = !old.Equal(st.next)
	p.report.candidatesChanged = st.changed
	return st
}

// keepUntil is the entries of m from after cutoff.
func keepUntil(m map[string]sink.Candidate, cutoff time.Time) map[string]sink.Candidate {
	var out map[string]sink.Candidate
	for name, c := range m {
		if c.Since.After(cutoff) {
			if out == nil {
				out = map[string]sink.Candidate{}
			}
			out[name] = c
		}
	}
	return out
}

// recordRemoved lists what the prune removed of its candidates as
// Removed, with the token it removed, for the grace after.
func (p *pruner) recordRemoved(st *graceState, pl *plan) {
	planned := map[string]bool{}
	for _, v := range pl.versions {
		for _, name := range v.objects() {
			planned[name] = true
		}
	}
	for _, name := range pl.dataFiles {
		planned[name] = true
	}
	now := p.opts.Now().UTC().Round(0)
	for _, name := range p.report.Removed {
		if !planned[name] || p.versionOf[name] == "" {
			continue
		}
		if st.next.Removed == nil {
			st.next.Removed = map[string]sink.Candidate{}
		}
		st.next.Removed[name] = sink.Candidate{Since: now, Version: p.versionOf[name]}
		st.changed = true
	}
}

// objects is every object of the version's folder the plan removes.
func (v *versionPlan) objects() []string {
	var out []string
	if v.complete {
		out = append(out, repo.VersionFile(v.id, repo.RecordFile))
	}
	out = append(out, v.files...)
	return append(out, v.catalogs...)
}

// forgetRemoved takes what a prune without grace removed off the list.
func (p *pruner) forgetRemoved(ctx context.Context) (*graceState, error) {
	old, version, err := p.sink.Holdings().ReadCandidates(ctx)
	if err != nil {
		return nil, err
	}
	st := &graceState{next: old.Clone(), version: version}
	for _, name := range p.report.Removed {
		if _, ok := st.next.Objects[name]; ok {
			delete(st.next.Objects, name)
			st.changed = true
		}
	}
	return st, nil
}
