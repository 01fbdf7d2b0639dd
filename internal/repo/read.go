package repo

import (
	"context"
	"fmt"
	"sort"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// ReadRefs reads a repository's refs: the ref files under refs/ where the
// store can list, else refs.json (readers that cannot list rely on it).
// Refs that break the rules are returned apart, each with its reason, so
// that the caller can refuse them and go on with the rest. The error is
// for refs that cannot be read at all: a failed listing, a missing or
// malformed refs.json.
func ReadRefs(ctx context.Context, r backend.Reader) (Refs, []*RefError, error) {
	if !r.Properties().CanList {
		raw, err := backend.ReadAll(ctx, r, RefsFile, MaxRefsJSON)
		if err != nil {
			return nil, nil, fmt.Errorf("%s cannot list and has no readable %s: %w", r.Location(), RefsFile, err)
		}
		return ParseRefsJSON(raw)
	}
	var names []string
	err := r.List(ctx, RefsDir, func(fi backend.FileInfo) error {
		names = append(names, fi.Name)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s: %w", RefsDir, err)
	}
	sort.Strings(names)
	refs := Refs{}
	var bad []*RefError
	for _, name := range names {
		if _, err := CheckRefName(name); err != nil {
			bad = append(bad, &RefError{name, err})
			continue
		}
		raw, err := backend.ReadAll(ctx, r, name, MaxSmallFile)
		if err != nil {
			return nil, nil, err
		}
		id, err := ParseRefFile(name, raw)
		if err != nil {
			bad = append(bad, &RefError{name, err})
			continue
		}
		refs[name] = id
	}
	return refs, bad, nil
}
