package prune

import (
	"context"
	"fmt"

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
		if u.versions, err = repo.ListVersions(ctx, src); err != nil {
			return nil, fail("%w", err)
		}
	}
	return u, nil
}

func (u *upstream) hasRef(name string) bool { return u.names[name] }

// versionStatus says whether upstream expired a version, no longer has it,
// or keeps it. Where the upstream lists, its one listing says; over HTTP,
// "no longer has" is a version.json that answers 404 (or 410), and any
// other failure stops the prune.
func (u *upstream) versionStatus(ctx context.Context, id string) (string, error) {
	if u.versions != nil {
		files, ok := u.versions[id]
		switch {
		case !ok || !hasKey(files, repo.RecordFile):
			return ReasonGone, nil
		case hasKey(files, expiredFile):
			return ReasonExpired, nil
		}
		return statusKept, nil
	}
	record := repo.VersionFile(id, repo.RecordFile)
	if _, err := u.src.Stat(ctx, record); backend.IsNotExist(err) {
		return ReasonGone, nil
	} else if err != nil {
		return "", fmt.Errorf("source %s: %s: %w; nothing removed", u.src.Location(), record, err)
	}
	marker := repo.VersionFile(id, expiredFile)
	if _, err := u.src.Stat(ctx, marker); backend.IsNotExist(err) {
		return statusKept, nil
	} else if err != nil {
		return "", fmt.Errorf("source %s: %s: %w; nothing removed", u.src.Location(), marker, err)
	}
	return ReasonExpired, nil
}

// expiredFile marks a version past its retention period (spec layout).
const expiredFile = "expired.json"
