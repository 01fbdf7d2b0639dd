package sync

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// ReadRefs reads a repository's valid refs: the ref files where the store
// can list, else refs.json. Refs against the rules are left out.
func ReadRefs(ctx context.Context, r backend.Reader) (repo.Refs, error) {
	refs := repo.Refs{}
	if !r.Properties().CanList {
		raw, err := backend.ReadAll(ctx, r, repo.RefsFile, repo.MaxRefsJSON)
		if err != nil {
			return nil, err
		}
		refs, _, err = repo.ParseRefsJSON(raw)
		return refs, err
	}
	err := r.List(ctx, repo.RefsDir, func(fi backend.FileInfo) error {
		if _, err := repo.CheckRefName(fi.Name); err != nil {
			return nil
		}
		raw, err := backend.ReadAll(ctx, r, fi.Name, repo.MaxSmallFile)
		if err != nil {
			return err
		}
		if id, err := repo.ParseRefFile(fi.Name, raw); err == nil {
			refs[fi.Name] = id
		}
		return nil
	})
	return refs, err
}
