package lock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
)

// State files are the mirror's own memory between runs, under
// backend.ReservedPrefix where readers never look: in a local folder they
// are written beside the lock (the local backend keeps that folder to
// itself), in an object store as objects. Only a run holding the lock
// writes them.
//
// A write reaches the local folder only through wrappers that write
// (writableFolder): through one that writes nothing (backend.ReadOnly,
// a dry run's store) it goes to that wrapper, which refuses or plans it,
// as it does every other write. So this code has no dry-run branch.

// writableFolder is the local folder under b that a write of a state
// file may change: found through wrappers that can write, never past one
// that cannot (Properties().CanWrite).
func writableFolder(b backend.Reader) (*local.Local, bool) {
	for b.Properties().CanWrite {
		if l, ok := b.(*local.Local); ok {
			return l, true
		}
		u, ok := b.(backend.Unwrapper)
		if !ok {
			break
		}
		b = u.Unwrap()
	}
	return nil, false
}

// ReadState returns the content of a state file; nil when there is none.
// A file that is not a regular file (a symlink, a FIFO, a device), larger
// than limit, or unreadable is an *UnusableStateError: in a local folder
// it is opened with O_NOFOLLOW and O_NONBLOCK, checked on its descriptor,
// and read through the limit, so that no planted file can make a run
// follow it out of the mirror, wait on it, or read it without end.
func ReadState(ctx context.Context, b backend.Reader, name string, limit int64) ([]byte, error) {
	if l, ok := backend.As[*local.Local](b); ok {
		p := filepath.Join(l.Dir(), filepath.FromSlash(backend.ReservedPrefix+name))
		data, err := readLocalState(p, limit)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, &UnusableStateError{Path: p, Err: err}
		}
		return data, nil
	}
	data, err := backend.ReadAll(ctx, b, backend.ReservedPrefix+name, limit)
	if backend.IsNotExist(err) {
		return nil, nil
	}
	if errors.Is(err, backend.ErrTooLarge) {
		return nil, &UnusableStateError{Path: b.Location() + " " + backend.ReservedPrefix + name, Err: err}
	}
	return data, err
}

func readLocalState(p string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, errors.New("a symlink, not followed")
		}
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%d bytes, larger than the %d a state file may have", st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("larger than the %d bytes a state file may have", limit)
	}
	return data, err
}

// UnusableStateError is a state file no run can use: not a regular
// file, too large, or unreadable.
type UnusableStateError struct {
	Path string
	Err  error
}

func (e *UnusableStateError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *UnusableStateError) Unwrap() error { return e.Err }

// ReadStateOrSetAside reads a state file as ReadState does, but never
// fails on an unusable one: that is logged, set aside under a dated name
// when setAside (a run that writes the mirror; a read-only command leaves
// it), and read as absent, so that the run rebuilds it. The state files
// are the mirror's memory, not its content: losing one costs work (or
// a warning), where stopping every run on it costs the mirror.
func ReadStateOrSetAside(ctx context.Context, b backend.Reader, name string, limit int64, setAside bool, log *zap.Logger) ([]byte, error) {
	data, err := ReadState(ctx, b, name, limit)
	var unusable *UnusableStateError
	if !errors.As(err, &unusable) {
		return data, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	if !setAside {
		log.Warn("the mirror's state file is unusable; ignored (the next sync sets it aside)",
			zap.String("file", backend.ReservedPrefix+name), zap.Error(err))
		return nil, nil
	}
	aside, serr := SetAside(ctx, b, name)
	if serr != nil {
		log.Warn("the mirror's state file is unusable and could not be set aside; ignored, rebuilt",
			zap.String("file", backend.ReservedPrefix+name), zap.Error(err), zap.NamedError("set_aside_error", serr))
		return nil, nil
	}
	log.Warn("the mirror's state file is unusable; set aside, rebuilt",
		zap.String("file", backend.ReservedPrefix+name), zap.String("set_aside_as", backend.ReservedPrefix+aside), zap.Error(err))
	return nil, nil
}

// SetAside moves a state file out of the way under a dated name (a
// symlink is moved, never followed) and returns that name. On an object
// store it is copied there where the store copies, then removed.
func SetAside(ctx context.Context, b backend.Reader, name string) (string, error) {
	aside := name + "." + time.Now().UTC().Format("20060102T150405.000000000Z") + ".set-aside"
	if l, ok := writableFolder(b); ok {
		dir := filepath.Join(l.Dir(), filepath.FromSlash(backend.ReservedPrefix))
		if err := os.Rename(filepath.Join(dir, filepath.FromSlash(name)), filepath.Join(dir, filepath.FromSlash(aside))); err != nil {
			return "", err
		}
		return aside, syncFolder(dir)
	}
	w, ok := b.(backend.Backend)
	if !ok {
		return "", errors.New("the mirror is read-only here")
	}
	if c, ok := w.(backend.Copier); ok && c.CanCopyFrom(b) {
		fi, err := b.Stat(ctx, backend.ReservedPrefix+name)
		if err != nil {
			return "", err
		}
		if _, err := c.CopyFrom(ctx, b, backend.ReservedPrefix+name, backend.ReservedPrefix+aside, fi.Size); err != nil {
			return "", err
		}
	}
	return aside, w.Remove(ctx, backend.ReservedPrefix+name)
}

// WriteState replaces a state file, atomically.
func WriteState(ctx context.Context, b backend.Backend, name string, data []byte) error {
	return WriteStateFrom(ctx, b, name, bytes.NewReader(data), int64(len(data)))
}

// WriteStateFrom replaces a state file, atomically, with the size bytes
// r gives: a long one (a version's file list) is streamed, never held.
func WriteStateFrom(ctx context.Context, b backend.Backend, name string, r io.Reader, size int64) error {
	if l, ok := writableFolder(b); ok {
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
		n, err := io.Copy(f, r)
		if err == nil && n != size {
			err = fmt.Errorf("%d bytes, where %d were said", n, size)
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(tmp)
			return fmt.Errorf("%s: %w", tmp, err)
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
		return syncFolder(filepath.Dir(p))
	}
	return b.Put(ctx, backend.ReservedPrefix+name, r, size)
}

// OpenState opens a state file to be streamed, as ReadState reads it (a
// local one opened with O_NOFOLLOW and O_NONBLOCK, a regular file only);
// nil when there is none. The caller bounds what it reads.
func OpenState(ctx context.Context, b backend.Reader, name string) (io.ReadCloser, error) {
	if l, ok := backend.As[*local.Local](b); ok {
		p := filepath.Join(l.Dir(), filepath.FromSlash(backend.ReservedPrefix+name))
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, &UnusableStateError{Path: p, Err: err}
		}
		st, err := f.Stat()
		if err == nil && !st.Mode().IsRegular() {
			err = fmt.Errorf("not a regular file (%s)", st.Mode().Type())
		}
		if err != nil {
			f.Close()
			return nil, &UnusableStateError{Path: p, Err: err}
		}
		return f, nil
	}
	rc, err := b.Open(ctx, backend.ReservedPrefix+name)
	if backend.IsNotExist(err) {
		return nil, nil
	}
	return rc, err
}

// RemoveState removes a state file, durably; removing an absent one is
// not an error.
func RemoveState(ctx context.Context, b backend.Backend, name string) error {
	if l, ok := writableFolder(b); ok {
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
