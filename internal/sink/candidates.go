package sink

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// CandidatesFile is the prune's list of objects it found unreferenced
// and holds for the grace period before it removes them (see
// internal/prune): on an object store a lock is a lease, which a paused
// run can outlive, so a removal waits longer than any run can pause, as
// Iceberg's remove_orphan_files and git's gc.pruneExpire do.
const CandidatesFile = "prune-candidates.json"

// maxCandidatesFile bounds the state file read back: a prune's plan of
// tens of thousands of objects, names of a few hundred bytes each. A
// larger one is unusable and read as none: that only delays removals.
const maxCandidatesFile = 64 << 20

// Candidate is one object a prune found unreferenced.
type Candidate struct {
	// Since is when a prune first found it unreferenced.
	Since time.Time `json:"since"`
	// Version is its version token as that prune listed it ("" on a
	// store without tokens). A token that changed since means another
	// run wrote the object again: it is no longer the same candidate.
	Version string `json:"version,omitempty"`
}

// Candidates is CandidatesFile's content.
type Candidates struct {
	Objects map[string]Candidate `json:"objects"`
	// Removed are objects a prune removed, each with the token it removed
	// (Version) and when (Since), kept for the grace after: a sync that
	// writes one again (a version upstream brought back) writes it with
	// another token (backend.WithNewToken), so that a removal of the same
	// object by a prune paused since, conditional on that token, fails.
	// On S3 the same bytes written the same way would give it back.
	Removed map[string]Candidate `json:"removed,omitempty"`
	// Rewritten are objects a sync made its own while listed or removed
	// (claims.go): written again with another token than Version, at
	// Since. A prune lists none of them again before the grace has passed
	// since: S3 has two forms of token for the same bytes, and a second
	// rewrite within a prune's pause could give the first back.
	Rewritten map[string]Candidate `json:"rewritten,omitempty"`
}

// ReadCandidates reads the prune's candidates, and the file's version
// token for a write conditional on it (WriteCandidates). An absent or
// unusable file is an empty list: the mirror's own memory, whose loss
// only restarts the grace period.
func (h Holdings) ReadCandidates(ctx context.Context) (*Candidates, string, error) {
	s := h.s
	c := &Candidates{Objects: map[string]Candidate{}}
	var raw []byte
	var version string
	var err error
	if s.b.Properties().ConditionalWrite {
		raw, version, err = backend.ReadAllVersion(ctx, s.b, backend.ReservedPrefix+CandidatesFile, maxCandidatesFile)
		switch {
		case backend.IsNotExist(err):
			return c, "", nil
		case err != nil && !errors.Is(err, backend.ErrTooLarge):
			return nil, "", s.errorf("%s%s: %w", backend.ReservedPrefix, CandidatesFile, err)
		case err != nil:
			// Too large: replaced by the next write, whatever it holds.
			s.log.Warn("the prune's list of candidates is too large; read as empty", zapFile(CandidatesFile), zapErr(err))
			if rc, fi, err := backend.ConditionalOf(s.b).OpenVersion(ctx, backend.ReservedPrefix+CandidatesFile); err == nil {
				rc.Close()
				version = fi.Version
			}
			return c, version, nil
		}
	} else {
		raw, err = lock.ReadStateOrSetAside(ctx, s.b, CandidatesFile, maxCandidatesFile, !s.opts.DryRun, s.log)
		if err != nil {
			return nil, "", s.errorf("%s%s: %w", backend.ReservedPrefix, CandidatesFile, err)
		}
	}
	if raw == nil {
		return c, version, nil
	}
	var f Candidates
	if err := json.Unmarshal(raw, &f); err != nil {
		s.log.Warn("the prune's list of candidates is unreadable; starting a new one", zapFile(CandidatesFile), zapErr(err))
		return c, version, nil
	}
	for name, cand := range f.Objects {
		c.Objects[name] = cand
	}
	c.Removed, c.Rewritten = f.Removed, f.Rewritten
	return c, version, nil
}

// WriteCandidates replaces the list, conditional on the version
// ReadCandidates returned where the store can: a prune that lost its
// lock to another run that changed the list since writes nothing.
func (h Holdings) WriteCandidates(ctx context.Context, c *Candidates, version string) error {
	s := h.s
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	raw = append(raw, '\n')
	if s.b.Properties().ConditionalWrite {
		err = s.replace(ctx, backend.ReservedPrefix+CandidatesFile, raw, version)
	} else {
		err = lock.WriteState(ctx, s.b, CandidatesFile, raw)
	}
	if err != nil {
		return s.errorf("writing %s%s: %w", backend.ReservedPrefix, CandidatesFile, err)
	}
	return nil
}

// Equal says whether c and o list the same.
func (c *Candidates) Equal(o *Candidates) bool {
	same := func(a, b map[string]Candidate) bool {
		return maps.EqualFunc(a, b, func(x, y Candidate) bool { return x.Version == y.Version && x.Since.Equal(y.Since) })
	}
	return same(c.Objects, o.Objects) && same(c.Removed, o.Removed) && same(c.Rewritten, o.Rewritten)
}

// Clone is a copy of c that shares no map with it.
func (c *Candidates) Clone() *Candidates {
	out := &Candidates{Objects: maps.Clone(c.Objects), Removed: maps.Clone(c.Removed), Rewritten: maps.Clone(c.Rewritten)}
	if out.Objects == nil {
		out.Objects = map[string]Candidate{}
	}
	return out
}
