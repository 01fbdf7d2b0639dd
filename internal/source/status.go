package source

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Whether upstream keeps a version (Versions.Status).
const (
	Kept    = ""        // upstream has it, not expired
	Expired = "expired" // upstream marks it with expired.json
	Gone    = "gone"    // upstream no longer has its version.json
)

// Status says whether upstream expired a version, no longer has
// it, or keeps it. "No longer has" is always a GET of its version.json
// that answers 404 (or 410), never a listing or a HEAD alone (a host may
// answer HEAD 404 and GET with the file); a listing that lacks a
// version.json a GET reads is an upstream not consistent, an error as any
// other failure is: a broken upstream must never look like one that
// withdrew a version. The expired.json marker is read too, where the
// upstream does not list.
func (v Versions) Status(ctx context.Context, id string) (string, error) {
	s := v.s
	if s.versions != nil {
		files := s.versions[id]
		_, complete := files[repo.RecordFile]
		_, expired := files[repo.ExpiredFile]
		switch {
		case complete && expired:
			return Expired, nil
		case complete:
			return Kept, nil
		}
	}
	record := repo.VersionFile(id, repo.RecordFile)
	_, err := backend.ReadAll(ctx, s.r, record, repo.MaxRecordFile)
	switch {
	case backend.IsNotExist(err):
		return Gone, nil
	case err != nil:
		return "", s.errorf("%s: %w", record, err)
	case s.versions != nil:
		return "", s.errorf("%s reads but the listing of %s lacks it: the upstream is not consistent", record, repo.VersionsDir)
	}
	marker := repo.VersionFile(id, repo.ExpiredFile)
	if _, err := backend.ReadAll(ctx, s.r, marker, repo.MaxSmallFile); backend.IsNotExist(err) {
		return Kept, nil
	} else if err != nil {
		return "", s.errorf("%s: %w", marker, err)
	}
	return Expired, nil
}

// IsExpired says whether upstream marks a version expired: its listing
// says where it lists, else a request for the marker (an error counts as
// not expired: the version is then copied).
func (v Versions) IsExpired(ctx context.Context, id string) bool {
	s := v.s
	if s.versions != nil {
		_, ok := s.versions[id][repo.ExpiredFile]
		return ok
	}
	if expired, ok := s.shared.rememberedExpired(id); ok {
		return expired
	}
	_, err := s.r.Stat(ctx, repo.VersionFile(id, repo.ExpiredFile))
	s.shared.rememberExpired(id, err == nil)
	return err == nil
}
