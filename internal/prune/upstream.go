package prune

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// Why a version is removed.
const (
	ReasonExpired = source.Expired // upstream marks it with expired.json
	ReasonGone    = source.Gone    // upstream no longer has its version.json
)

// upstream is what a prune knows of the upstream: every read of it must
// succeed, or nothing is removed. A broken upstream must never look like
// one that withdrew everything.
type upstream struct {
	src      *source.Source
	settings *repo.Settings
	refs     repo.Refs       // refs that follow the rules
	names    map[string]bool // every ref name upstream holds, refused ones too
}

func readUpstream(ctx context.Context, r backend.Reader, log *zap.Logger) (*upstream, error) {
	fail := func(err error) error { return fmt.Errorf("%w; nothing removed", err) }
	u := &upstream{src: source.New(r, nil, log), names: map[string]bool{}}
	var err error
	if u.settings, err = u.src.ReadSettings(ctx); err != nil {
		return nil, fail(err)
	}
	// The refs as sync reads and judges them (source.ReadRefs); a
	// refused ref still counts as one upstream holds.
	got := u.src.ReadRefsWithoutHead(ctx)
	if got.Unread {
		return nil, fail(fmt.Errorf("source %s: refs unreadable: %w", r.Location(), got.Err))
	}
	u.refs = got.Refs
	for name := range got.Refs {
		u.names[name] = true
	}
	for _, b := range got.Refused {
		if b.Ref != "" {
			u.names[b.Ref] = true
		}
	}
	if len(u.names) == 0 {
		// A repository with no ref at all is more likely a broken or
		// half-written upstream than one that withdrew everything.
		return nil, fail(fmt.Errorf("source %s: upstream has no refs at all", r.Location()))
	}
	if err := u.src.ListVersions(ctx); err != nil {
		return nil, fail(err)
	}
	if err := u.checkRefTargets(ctx); err != nil {
		return nil, fail(fmt.Errorf("source %s: %w", r.Location(), err))
	}
	return u, nil
}

// checkRefTargets confirms that every ref's version is upstream: in its
// listing where it lists, else by reading its version.json. An upstream
// whose refs name versions it does not hold is not consistent (a
// listing gone missing, a half-copied host): its absences prove nothing.
func (u *upstream) checkRefTargets(ctx context.Context) error {
	targets := map[string][]string{}
	for _, name := range u.refs.Names() {
		targets[u.refs[name]] = append(targets[u.refs[name]], name)
	}
	ids := sortedKeys(targets)
	versions := u.src.Versions()
	errs := make([]error, len(ids))
	var g errgroup.Group
	g.SetLimit(8)
	for i, id := range ids {
		if versions != nil && hasKey(versions[id], repo.RecordFile) {
			continue
		}
		g.Go(func() error {
			record := repo.VersionFile(id, repo.RecordFile)
			// A record that reads is there, whatever it says: a
			// refusal of its bytes is not an absence.
			_, err := u.src.ReadVersion(ctx, id)
			if unread := (*source.ReadError)(nil); errors.As(err, &unread) {
				err = unread.Err
			} else {
				err = nil
			}
			switch {
			case err == nil && versions != nil:
				errs[i] = fmt.Errorf("%s reads but the listing of %s lacks it (ref %s): the listing is not consistent", record, repo.VersionsDir, targets[id][0])
			case backend.IsNotExist(err):
				errs[i] = fmt.Errorf("ref %s points at version %s, which upstream does not have (%s: not found)", targets[id][0], id, record)
			case err != nil:
				errs[i] = fmt.Errorf("ref %s: %s: %w", targets[id][0], record, err)
			}
			return nil
		})
	}
	g.Wait()
	var found []error
	for _, err := range errs {
		if err != nil {
			found = append(found, err)
		}
	}
	if len(found) > 5 {
		found = append(found[:5], fmt.Errorf("and %d more refs", len(found)-5))
	}
	return errors.Join(found...)
}

func (u *upstream) hasRef(name string) bool { return u.names[name] }

// versionStatus says whether upstream expired a version, no longer has it,
// or keeps it (source.VersionStatus); any failure stops the prune.
func (u *upstream) versionStatus(ctx context.Context, id string) (string, error) {
	status, err := u.src.VersionStatus(ctx, id)
	if err != nil {
		return "", fmt.Errorf("%w; nothing removed", err)
	}
	return status, nil
}
