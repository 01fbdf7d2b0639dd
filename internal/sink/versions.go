package sink

import (
	"context"
	"fmt"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// FileError is a write to the mirror that failed, naming the file.
type FileError struct {
	File string
	Err  error
}

func (e *FileError) Error() string { return fmt.Sprintf("%s: %v", e.File, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// PublishVersion writes version.json.sig (sig nil: none), then, once a
// barrier has made every file the version needs durable, version.json
// (durable when it returns), created only where there is none (see
// createRecord): from this moment the version is complete.
// Every other file of its folder, and every data file it needs, must be
// written before.
func (s *Sink) PublishVersion(ctx context.Context, id string, record, sig []byte) error {
	if sig != nil {
		name := repo.VersionFile(id, repo.SignatureFile)
		if err := s.PutBytes(s.Durability().WithoutSync(ctx), name, sig); err != nil {
			return &FileError{name, err}
		}
	}
	name := repo.VersionFile(id, repo.RecordFile)
	if err := s.Durability().Barrier(ctx); err != nil {
		return &FileError{name, err}
	}
	if err := s.createRecord(ctx, name, record); err != nil {
		return &FileError{name, err}
	}
	return nil
}
