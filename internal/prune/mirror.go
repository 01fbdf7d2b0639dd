package prune

import (
	"context"
	"fmt"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// mirror is the state of the mirror a prune plans from.
type mirror struct {
	settings     *repo.Settings
	refs         repo.Refs // the ref files
	refsJSON     []byte    // nil when absent
	refsJSONRefs repo.Refs // what refs.json says
	head         string    // the ref HEAD names; "" without a readable HEAD
	versions     map[string]map[string]int64
	// versionOf is the version token (backend.FileInfo.Version) of every
	// object as the prune read or listed it, for removals conditional on
	// it: empty on a store without conditional writes.
	versionOf map[string]string
}

// readMirror reads, through the sink, the mirror's settings, refs,
// refs.json, HEAD and its versions/ listing. Refs it cannot read stop
// the prune: a version they point to could otherwise look unreferenced.
func readMirror(ctx context.Context, dst *sink.Sink) (*mirror, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("sink %s: "+format+"; nothing removed", append([]any{dst.Location()}, args...)...)
	}
	if !dst.Holdings().CanList() {
		return nil, fail("cannot list")
	}
	raw, err := dst.Holdings().ReadSettings(ctx)
	if backend.IsNotExist(err) {
		return nil, fail("no %s: not a mirror", repo.SettingsFile)
	}
	if err != nil {
		return nil, fail("%s: %w", repo.SettingsFile, err)
	}
	m := &mirror{versionOf: map[string]string{}}
	if m.settings, err = repo.ParseSettings(raw); err != nil {
		return nil, fail("%w", err)
	}
	refs, bad, err := dst.Holdings().ReadRefFiles(ctx, m.versionOf)
	if err != nil {
		return nil, fail("refs unreadable: %w", err)
	}
	if len(bad) > 0 {
		return nil, fail("ref %s breaks the rules, so the version it points to is unknown: %w", bad[0].Ref, bad[0].Err)
	}
	m.refs = refs
	var version string
	m.refsJSON, version, err = dst.Holdings().ReadRefsJSON(ctx)
	m.versionOf[repo.RefsFile] = version
	switch {
	case backend.IsNotExist(err):
		m.refsJSON, m.refsJSONRefs = nil, repo.Refs{}
	case err != nil:
		return nil, fail("%s: %w", repo.RefsFile, err)
	default:
		var bad []*repo.RefError
		if m.refsJSONRefs, bad, err = repo.ParseRefsJSON(m.refsJSON); err != nil {
			return nil, fail("%w", err)
		}
		if len(bad) > 0 {
			return nil, fail("%s: ref %s breaks the rules: %w", repo.RefsFile, bad[0].Ref, bad[0].Err)
		}
	}
	raw, version, err = dst.Holdings().ReadHead(ctx)
	m.versionOf[repo.HeadFile] = version
	switch {
	case err == nil:
		// An unreadable HEAD names no ref a prune removes: it stays.
		m.head, _ = repo.ParseHead(raw)
	case !backend.IsNotExist(err):
		return nil, fail("%s: %w", repo.HeadFile, err)
	}
	if m.versions, err = dst.Holdings().ListVersions(ctx, m.versionOf); err != nil {
		return nil, fail("%w", err)
	}
	return m, nil
}

// listData lists the mirror's data_dir, sorted, with each file's
// version token into versionOf.
func listData(ctx context.Context, dst *sink.Sink, dataDir string, versionOf map[string]string) ([]string, error) {
	out, err := dst.Holdings().ListDataFiles(ctx, dataDir, versionOf)
	if err != nil {
		return nil, fmt.Errorf("sink %s: %w; nothing removed", dst.Location(), err)
	}
	return out, nil
}

// readCatalog returns the paths, below data_dir, of every data and delete
// file a catalog in the mirror names: fetched through the sink, read by a
// confined reader under the limits a sync's are.
func readCatalog(ctx context.Context, dst *sink.Sink, name, tmpDir string, lim catalog.Limits) ([]string, error) {
	fetched, err := dst.FetchFile(ctx, name, tmpDir, lim.MaxSize)
	if err != nil {
		return nil, err
	}
	defer fetched.Remove()
	cat, err := catalog.Read(ctx, fetched.Path, name, lim)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(cat.Files))
	for i, f := range cat.Files {
		out[i] = f.Path
	}
	return out, nil
}
