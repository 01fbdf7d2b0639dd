package source

import (
	"context"
	"fmt"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Whether upstream keeps a version (VersionStatus).
const (
	Kept    = ""        // upstream has it, not expired
	Expired = "expired" // upstream marks it with expired.json
	Gone    = "gone"    // upstream no longer has its version.json
)

// ExpiredFile marks a version past its retention period (spec layout).
const ExpiredFile = "expired.json"

// VersionStatus says whether upstream expired a version, no longer has
// it, or keeps it. Where the upstream lists (ListVersions), its one
// listing says; otherwise "no longer has" is a version.json that answers
// 404 (or 410), and any other failure is an error: a broken upstream must
// never look like one that withdrew a version.
func (s *Source) VersionStatus(ctx context.Context, id string) (string, error) {
	if s.versions != nil {
		files, ok := s.versions[id]
		if _, complete := files[repo.RecordFile]; !ok || !complete {
			return Gone, nil
		}
		if _, expired := files[ExpiredFile]; expired {
			return Expired, nil
		}
		return Kept, nil
	}
	record := repo.VersionFile(id, repo.RecordFile)
	if _, err := s.r.Stat(ctx, record); backend.IsNotExist(err) {
		return Gone, nil
	} else if err != nil {
		return "", fmt.Errorf("source %s: %s: %w", s.r.Location(), record, err)
	}
	marker := repo.VersionFile(id, ExpiredFile)
	if _, err := s.r.Stat(ctx, marker); backend.IsNotExist(err) {
		return Kept, nil
	} else if err != nil {
		return "", fmt.Errorf("source %s: %s: %w", s.r.Location(), marker, err)
	}
	return Expired, nil
}
