package prune

import (
	"context"
	"fmt"

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

func readUpstream(ctx context.Context, src *source.Source) (*upstream, error) {
	fail := func(err error) error { return fmt.Errorf("%w; nothing removed", err) }
	u := &upstream{src: src, names: map[string]bool{}}
	var err error
	if u.settings, err = u.src.ReadSettings(ctx); err != nil {
		return nil, fail(err)
	}
	// The refs as sync reads and judges them (source.ReadRefs); a
	// refused ref still counts as one upstream holds.
	got := u.src.ReadRefsWithoutHead(ctx)
	if got.Unread {
		return nil, fail(fmt.Errorf("source %s: refs unreadable: %w", src.Location(), got.Err))
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
		return nil, fail(fmt.Errorf("source %s: upstream has no refs at all", src.Location()))
	}
	if err := u.src.Versions().List(ctx); err != nil {
		return nil, fail(err)
	}
	// Refs that name versions upstream does not hold: its absences
	// prove nothing.
	if err := u.src.CheckRefTargets(ctx, u.refs); err != nil {
		return nil, fail(fmt.Errorf("source %s: %w", src.Location(), err))
	}
	return u, nil
}

func (u *upstream) hasRef(name string) bool { return u.names[name] }

// versionStatus says whether upstream expired a version, no longer has it,
// or keeps it (source.Versions.Status); any failure stops the prune.
func (u *upstream) versionStatus(ctx context.Context, id string) (string, error) {
	status, err := u.src.Versions().Status(ctx, id)
	if err != nil {
		return "", fmt.Errorf("%w; nothing removed", err)
	}
	return status, nil
}
