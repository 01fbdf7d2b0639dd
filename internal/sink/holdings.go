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

// Holdings is the mirror as a prune reads it and removes from it: every
// object with its version token, the prune's candidates
// (candidates.go), and the fenced replace and removal (fence.go).
type Holdings struct{ s *Sink }

// Holdings is the mirror as a prune reads and removes it.
func (s *Sink) Holdings() Holdings { return Holdings{s} }

// Replace writes name only if it is still the version the prune read
// (see fence.go): refs.json, with the refs it removes left out.
func (h Holdings) Replace(ctx context.Context, name string, b []byte, version string) error {
	return h.s.replace(ctx, name, b, version)
}

// Remove removes name only if it is still the version the prune read or
// listed (version as for Replace; "" removes it whatever it holds). A
// removal made under WithoutSync is durable at the next Barrier.
func (h Holdings) Remove(ctx context.Context, name, version string) error {
	return h.s.remove(ctx, name, version)
}

// CanList says whether the mirror's store can list: a prune plans only
// from listings.
func (h Holdings) CanList() bool { return h.s.b.Properties().CanList }

// ReadSettings reads the mirror's fdl.json; the store's error (not
// found, backend.IsNotExist, where it has none) as it is.
func (h Holdings) ReadSettings(ctx context.Context) ([]byte, error) {
	return backend.ReadAll(ctx, h.s.b, repo.SettingsFile, repo.MaxSmallFile)
}

// ReadRefFiles lists the mirror's ref files and reads each (the store
// must list), with each file's version token into tokens where the store
// has conditional writes. Refs that break the rules are in bad; the
// error is for refs that cannot be read at all.
func (h Holdings) ReadRefFiles(ctx context.Context, tokens map[string]string) (refs repo.Refs, bad []*repo.RefError, err error) {
	files, err := repo.ListRefFiles(ctx, h.s.b)
	if err != nil {
		return nil, nil, err
	}
	if h.s.b.Properties().ConditionalWrite {
		for _, fi := range files {
			tokens[fi.Name] = fi.Version
		}
	}
	return repo.ReadRefFiles(ctx, h.s.b, files, nil)
}

// ReadRefsJSON reads the mirror's refs.json and its version token; the
// store's error as it is.
func (h Holdings) ReadRefsJSON(ctx context.Context) (raw []byte, version string, err error) {
	return backend.ReadAllVersion(ctx, h.s.b, repo.RefsFile, repo.MaxRefsJSON)
}

// ReadHead reads the mirror's HEAD and its version token; the store's
// error as it is.
func (h Holdings) ReadHead(ctx context.Context) (raw []byte, version string, err error) {
	return backend.ReadAllVersion(ctx, h.s.b, repo.HeadFile, repo.MaxSmallFile)
}

// ListVersions maps every version folder of the mirror to its files and
// their sizes (repo.ListVersions), with each file's version token into
// tokens.
func (h Holdings) ListVersions(ctx context.Context, tokens map[string]string) (map[string]map[string]int64, error) {
	return repo.ListVersions(ctx, h.s.b, tokens)
}

// ListDataFiles lists the mirror's dataDir, sorted, with each file's
// version token into tokens.
func (h Holdings) ListDataFiles(ctx context.Context, dataDir string, tokens map[string]string) ([]string, error) {
	var out []string
	err := h.s.b.List(ctx, dataDir, func(fi backend.FileInfo) error {
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
