package source

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// CheckRefTargets confirms that every ref's version is upstream: in its
// listing where it lists (after Versions().List), else by reading its
// version.json (Versions().Read). An upstream whose refs name versions it
// does not hold is not consistent (a listing gone missing, a half-copied
// host): its absences prove nothing, and a prune must not act on them.
// The error names at most five refs.
func (s *Source) CheckRefTargets(ctx context.Context, refs repo.Refs) error {
	targets := map[string][]string{}
	for _, name := range refs.Names() {
		targets[refs[name]] = append(targets[refs[name]], name)
	}
	ids := slices.Sorted(maps.Keys(targets))
	errs := make([]error, len(ids))
	var g errgroup.Group
	g.SetLimit(8)
	for i, id := range ids {
		if _, ok := s.versions[id][repo.RecordFile]; s.versions != nil && ok {
			continue
		}
		g.Go(func() error {
			record := repo.VersionFile(id, repo.RecordFile)
			// A record that reads is there, whatever it says: a
			// refusal of its bytes is not an absence.
			_, err := s.Versions().Read(ctx, id)
			if unread := (*ReadError)(nil); errors.As(err, &unread) {
				err = unread.Err
			} else {
				err = nil
			}
			switch {
			case err == nil && s.versions != nil:
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
