package sink

import (
	"context"
	"fmt"
	"sort"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// What the mirror holds, read by a prune to plan its removals (see
// internal/prune): every object it may remove is read or listed with its
// version token (backend.FileInfo.Version) into tokens, for a removal
// conditional on it (Remove, Replace). The reads judge nothing: a ref
// that breaks the rules is returned apart, for the prune to refuse.
// Their errors name the file but not the mirror: the prune says which
// mirror, and that it removed nothing.

// CanList says whether the mirror's store can list: a prune plans only
// from listings.
func (s *Sink) CanList() bool { return s.b.Properties().CanList }

// ReadSettings reads the mirror's fdl.json; the store's error (not
// found, backend.IsNotExist, where it has none) as it is.
func (s *Sink) ReadSettings(ctx context.Context) ([]byte, error) {
	return backend.ReadAll(ctx, s.b, repo.SettingsFile, repo.MaxSmallFile)
}

// ReadRefFiles lists the mirror's ref files and reads each (the store
// must list), with each file's version token into tokens where the store
// has conditional writes. Refs that break the rules are in bad; the
// error is for refs that cannot be read at all.
func (s *Sink) ReadRefFiles(ctx context.Context, tokens map[string]string) (refs repo.Refs, bad []*repo.RefError, err error) {
	files, err := repo.ListRefFiles(ctx, s.b)
	if err != nil {
		return nil, nil, err
	}
	if s.b.Properties().ConditionalWrite {
		for _, fi := range files {
			tokens[fi.Name] = fi.Version
		}
	}
	return repo.ReadRefFiles(ctx, s.b, files, nil)
}

// ReadRefsJSON reads the mirror's refs.json and its version token; the
// store's error as it is.
func (s *Sink) ReadRefsJSON(ctx context.Context) (raw []byte, version string, err error) {
	return backend.ReadAllVersion(ctx, s.b, repo.RefsFile, repo.MaxRefsJSON)
}

// ReadHead reads the mirror's HEAD and its version token; the store's
// error as it is.
func (s *Sink) ReadHead(ctx context.Context) (raw []byte, version string, err error) {
	return backend.ReadAllVersion(ctx, s.b, repo.HeadFile, repo.MaxSmallFile)
}

// ListVersions maps every version folder of the mirror to its files and
// their sizes (repo.ListVersions), with each file's version token into
// tokens.
func (s *Sink) ListVersions(ctx context.Context, tokens map[string]string) (map[string]map[string]int64, error) {
	return repo.ListVersions(ctx, s.b, tokens)
}

// ListDataFiles lists the mirror's dataDir, sorted, with each file's
// version token into tokens.
func (s *Sink) ListDataFiles(ctx context.Context, dataDir string, tokens map[string]string) ([]string, error) {
	var out []string
	err := s.b.List(ctx, dataDir, func(fi backend.FileInfo) error {
		out = append(out, fi.Name)
		tokens[fi.Name] = fi.Version
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dataDir, err)
	}
	sort.Strings(out)
	return out, nil
}
