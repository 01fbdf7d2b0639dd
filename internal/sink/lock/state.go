package lock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
)

// State files are the mirror's own memory between runs, under
// backend.ReservedPrefix where readers never look: in a local folder they
// are written beside the lock (the local backend keeps that folder to
// itself), in an object store as objects. Only a run holding the lock
// writes them.

// ReadState returns the content of a state file; nil when there is none.
func ReadState(ctx context.Context, b backend.Reader, name string, limit int64) ([]byte, error) {
	if l, ok := backend.As[*local.Local](b); ok {
		p := filepath.Join(l.Dir(), filepath.FromSlash(backend.ReservedPrefix+name))
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err == nil && int64(len(data)) > limit {
			err = fmt.Errorf("larger than %d bytes", limit)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		return data, nil
	}
	data, err := backend.ReadAll(ctx, b, backend.ReservedPrefix+name, limit)
	if backend.IsNotExist(err) {
		return nil, nil
	}
	return data, err
}

// WriteState replaces a state file, atomically.
func WriteState(ctx context.Context, b backend.Backend, name string, data []byte) error {
	if l, ok := backend.As[*local.Local](b); ok {
		p := filepath.Join(l.Dir(), filepath.FromSlash(backend.ReservedPrefix+name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		// O_NOFOLLOW: a symlink planted in the mirror does not send the
		// write outside it (rename replaces a link, never follows it).
		tmp := p + ".new"
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", tmp, err)
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
		return syncFolder(filepath.Dir(p))
	}
	return b.Put(ctx, backend.ReservedPrefix+name, bytes.NewReader(data), int64(len(data)))
}

// RemoveState removes a state file, durably; removing an absent one is
// not an error.
func RemoveState(ctx context.Context, b backend.Backend, name string) error {
	if l, ok := backend.As[*local.Local](b); ok {
		p := filepath.Join(l.Dir(), filepath.FromSlash(backend.ReservedPrefix+name))
		if err := os.Remove(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		return syncFolder(filepath.Dir(p))
	}
	return b.Remove(ctx, backend.ReservedPrefix+name)
}

// syncFolder fsyncs a folder, so that a name just renamed into it or
// removed from it stays so after a power cut.
func syncFolder(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return nil
}
