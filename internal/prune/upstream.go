package prune

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Why a version is removed.
const (
	ReasonExpired = "expired" // upstream marks it with expired.json
	ReasonGone    = "gone"    // upstream no longer has its version.json
	statusKept    = ""
)

// upstream is what a prune knows of the upstream: every read of it must
// succeed, or nothing is removed. A broken upstream must never look like
// one that withdrew everything.
type upstream struct {
	src      backend.Reader
	settings *repo.Settings
	refs     repo.Refs       // refs that follow the rules
	names    map[string]bool // every ref name upstream holds, refused ones too
	versions map[string]map[string]int64
}

func readUpstream(ctx context.Context, src backend.Reader) (*upstream, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("source %s: "+format+"; nothing removed", append([]any{src.Location()}, args...)...)
	}
	raw, err := backend.ReadAll(ctx, src, repo.SettingsFile, repo.MaxSmallFile)
	if err != nil {
		return nil, fail("%s: %w", repo.SettingsFile, err)
	}
	u := &upstream{src: src, names: map[string]bool{}}
	if u.settings, err = repo.ParseSettings(raw); err != nil {
		return nil, fail("%w", err)
	}
	refs, bad, err := repo.ReadRefs(ctx, src)
	if err != nil {
		return nil, fail("refs unreadable: %w", err)
	}
	u.refs = refs
	for name := range refs {
		u.names[name] = true
	}
	for _, b := range bad {
		u.names[b.Ref] = true
	}
	if len(u.names) == 0 {
		// A repository with no ref at all is more likely a broken or
		// half-written upstream than one that withdrew everything.
		return nil, fail("upstream has no refs at all")
	}
	if src.Properties().CanList {
		if u.versions, err = versionListing(ctx, src, nil); err != nil {
			return nil, fail("%w", err)
		}
	}
	if err := u.checkRefTargets(ctx); err != nil {
		return nil, fail("%w", err)
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
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	slots := make(chan struct{}, 8)
	for i, id := range ids {
		if u.versions != nil && hasKey(u.versions[id], repo.RecordFile) {
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			record := repo.VersionFile(id, repo.RecordFile)
			_, err := backend.ReadAll(ctx, u.src, record, repo.MaxRecordFile)
			switch {
			case err == nil && u.versions != nil:
				errs[i] = fmt.Errorf("%s reads but the listing of %s lacks it (ref %s): the listing is not consistent", record, repo.VersionsDir, targets[id][0])
			case backend.IsNotExist(err):
				errs[i] = fmt.Errorf("ref %s points at version %s, which upstream does not have (%s: not found)", targets[id][0], id, record)
			case err != nil:
				errs[i] = fmt.Errorf("ref %s: %s: %w", targets[id][0], record, err)
			}
		}()
	}
	wg.Wait()
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
// or keeps it. "No longer has" is always a GET of its version.json that
// answers 404 (or 410), never a listing or a HEAD alone (a host may
// answer HEAD 404 and GET with the file); a listing that lacks a
// version.json a GET reads is an upstream not consistent, and stops the
// prune as any other failure does. The expired.json marker is read
// too, where the upstream does not list.
func (u *upstream) versionStatus(ctx context.Context, id string) (string, error) {
	if u.versions != nil {
		files := u.versions[id]
		switch {
		case hasKey(files, repo.RecordFile) && hasKey(files, expiredFile):
			return ReasonExpired, nil
		case hasKey(files, repo.RecordFile):
			return statusKept, nil
		}
	}
	record := repo.VersionFile(id, repo.RecordFile)
	_, err := backend.ReadAll(ctx, u.src, record, repo.MaxRecordFile)
	switch {
	case backend.IsNotExist(err):
		return ReasonGone, nil
	case err != nil:
		return "", fmt.Errorf("source %s: %s: %w; nothing removed", u.src.Location(), record, err)
	case u.versions != nil:
		return "", fmt.Errorf("source %s: %s reads but the listing of %s lacks it: the upstream is not consistent; nothing removed", u.src.Location(), record, repo.VersionsDir)
	}
	marker := repo.VersionFile(id, expiredFile)
	if _, err := backend.ReadAll(ctx, u.src, marker, repo.MaxSmallFile); backend.IsNotExist(err) {
		return statusKept, nil
	} else if err != nil {
		return "", fmt.Errorf("source %s: %s: %w; nothing removed", u.src.Location(), marker, err)
	}
	return ReasonExpired, nil
}

// expiredFile marks a version past its retention period (spec layout).
const expiredFile = "expired.json"
