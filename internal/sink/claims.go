package sink

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// A sync never relies on a prune's candidate without making it its own
// (internal/prune, grace.go). On an object store a prune removes a
// candidate after its grace, each removal conditional on the version
// token it listed; a prune paused past its lease may still send it after
// a sync took the mirror over. So the sync reads the list with its
// inventory, and:
//
//   - an object listed (Candidates.Objects) is absent to it: a data file,
//     or a version folder, it needs is copied again, with a token other
//     than the one listed (backend.WithNewToken), and any late removal
//     conditional on the listed token fails, held in flight or not;
//   - an object it writes that a prune removed within the grace
//     (Candidates.Removed), or that a run made its own within it
//     (Rewritten), is written with a token other than that one too: on S3
//     the same bytes written the same way give the same ETag back;
//   - before its refs move, it writes the list back, conditional on the
//     token it read, with what it made its own moved to Rewritten, which
//     no prune lists again before the grace has passed since (S3's two
//     forms of a token cannot then come round again within any pause).
//     That write also fails every prune that read the list before it:
//     whatever a prune lists after has its grace counted from after the
//     sync read, so it outlasts any pause of the sync before its refs.
//
// A store without version tokens (a local folder) needs none of this:
// its lock is flock(2), and a prune there removes at once.

// claims is the prune's list as this run read it, and what the run made
// its own since.
type claims struct {
	mu      sync.Mutex
	read    bool // the list was read (a store with tokens)
	list    *Candidates
	version string            // the list's token as read
	mine    map[string]string // object → the token it was written away from
}

// Claims is what a sync made its own of a prune's candidates (see
// above): read with the inventory, held by the Sink for the run's writes,
// settled before its refs move.
type Claims struct{ s *Sink }

// Claims is the run's claims on a prune's candidates.
func (s *Sink) Claims() Claims { return Claims{s} }

// read reads the prune's list for the run, on a store with version
// tokens; elsewhere the run claims nothing.
func (c Claims) read(ctx context.Context) error {
	s := c.s
	if !s.tokens {
		return nil
	}
	list, version, err := s.Holdings().ReadCandidates(ctx)
	if err != nil {
		return err
	}
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	s.claims.read, s.claims.list, s.claims.version, s.claims.mine = true, list, version, map[string]string{}
	return nil
}

// listed says whether a prune lists name as a candidate for removal: the
// run treats it as absent, and copies it again where it needs it.
func (cl *claims) listed(name string) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if !cl.read {
		return false
	}
	_, ok := cl.list.Objects[name]
	return ok
}

// claim is ctx for a write of name: where a prune listed or removed it,
// or a run made it its own, within the grace, the write must leave it
// with another token than that one, and the run records it as its own.
func (cl *claims) claim(ctx context.Context, name string) context.Context {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if !cl.read {
		return ctx
	}
	old := ""
	for _, m := range []map[string]Candidate{cl.list.Objects, cl.list.Removed, cl.list.Rewritten} {
		if c, ok := m[name]; ok && c.Version != "" {
			old = c.Version
			break
		}
	}
	if old == "" {
		return ctx
	}
	if _, ok := cl.mine[name]; !ok {
		cl.mine[name] = old
	}
	return backend.WithNewToken(ctx, old)
}

// Claimed lists, sorted, the objects the run made its own (written again
// with a new token), for its report.
func (c Claims) Claimed() []string {
	s := c.s
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	out := make([]string, 0, len(s.claims.mine))
	for name := range s.claims.mine {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Settle writes the prune's list back before the run's refs move,
// conditional on the token the inventory read: what the run made its own
// leaves the candidates and is recorded Rewritten at now. The caller
// calls it whenever refs move, even when the run made nothing its own,
// and it creates the list where there was none: a prune that read it
// before then fails to record what it planned, and plans again under its
// next lock (see the comment above). An error means another run changed
// the list: this run lost the lock, and moves no ref.
func (c Claims) Settle(ctx context.Context, now time.Time) error {
	s := c.s
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	if !s.claims.read || s.opts.DryRun {
		return nil
	}
	next := s.claims.list.Clone()
	if len(s.claims.mine) > 0 && next.Rewritten == nil {
		next.Rewritten = map[string]Candidate{}
	}
	now = now.UTC().Round(0)
	for name, old := range s.claims.mine {
		delete(next.Objects, name)
		delete(next.Removed, name)
		next.Rewritten[name] = Candidate{Since: now, Version: old}
	}
	raw, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return err
	}
	raw = append(raw, '\n')
	// Not counted as a file the run copied: a run that moves refs and
	// copies nothing still says it copied nothing.
	name := backend.ReservedPrefix + CandidatesFile
	if err := backend.ReplaceIfUnchanged(ctx, s.b, name, raw, s.claims.version); err != nil {
		if backend.IsPreconditionFailed(err) {
			err = fenced(name, err)
		}
		return s.errorf("writing %s: %w", name, err)
	}
	// The list's new token is not known without a read; a second settle
	// in the run would be refused, and none is made.
	s.claims.list = next
	s.claims.read = false
	return nil
}

// unlisted drops from the inventory's version folders the files a prune
// lists: a version whose version.json is listed is not complete to the
// run, which mirrors it again, every file of its folder made its own.
func (cl *claims) unlisted(versions map[string]map[string]int64) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if !cl.read || len(cl.list.Objects) == 0 {
		return
	}
	for name := range cl.list.Objects {
		rest, ok := strings.CutPrefix(name, repo.VersionsDir)
		if !ok {
			continue
		}
		id, file, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		if files := versions[id]; files != nil {
			if _, ok := files[file]; ok {
				files = maps.Clone(files)
				delete(files, file)
				versions[id] = files
			}
		}
	}
}
