// Package local is the backend for a folder on a local disk.
//
// Every access goes through an os.Root, so neither a hostile name nor a
// symbolic link planted in the folder can reach a file outside it. Writes
// go to a temporary file under .fdl-mirror/tmp/, are fsynced, and are
// renamed into place; the folder is fsynced after the rename, so a crash
// leaves either the old object or the whole new one.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	gosync "sync"
	"syscall"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// TempDir holds files being written; they are not listed, and a writer
// that opens the folder may clear what a killed run left there.
const TempDir = backend.ReservedPrefix + "tmp"

// Local is a folder used as a store.
type Local struct {
	dir  string
	root *os.Root
	rw   bool

	// Writers keep the temporary folder open, so that making a temporary
	// file and renaming it into place are single calls relative to open
	// folders, not walks of the whole path through the root each time.
	tmpMu   gosync.RWMutex
	tmpRoot *os.Root   // .fdl-mirror/tmp
	tmpDir  *os.File   // the same folder, for renameat(2)
	made    gosync.Map // folders known to exist
}

// Open opens an existing folder for reading.
func Open(dir string) (*Local, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", dir, err)
	}
	return &Local{dir: dir, root: root}, nil
}

// Create opens a folder for reading and writing, making it if needed.
func Create(dir string) (*Local, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	l, err := Open(dir)
	if err != nil {
		return nil, err
	}
	l.rw = true
	if err := l.openTemp(); err != nil {
		l.root.Close()
		return nil, err
	}
	return l, nil
}

// openTemp makes and opens the temporary folder, after checking that
// neither it nor .fdl-mirror is a symbolic link or another non-folder: a
// link that stays inside the root passes os.Root, and clearing the
// temporary folder through it would empty whatever it points at (data/).
func (l *Local) openTemp() error {
	for _, name := range []string{strings.TrimSuffix(backend.ReservedPrefix, "/"), TempDir} {
		if err := l.checkPlainFolder(name); err != nil {
			return err
		}
	}
	if err := l.root.MkdirAll(TempDir, 0o755); err != nil {
		return fmt.Errorf("%s: creating %s: %w", l.dir, TempDir, err)
	}
	tr, err := l.root.OpenRoot(TempDir)
	if err != nil {
		return fmt.Errorf("%s: opening %s: %w", l.dir, TempDir, err)
	}
	td, err := l.root.Open(TempDir)
	if err != nil {
		tr.Close()
		return fmt.Errorf("%s: opening %s: %w", l.dir, TempDir, err)
	}
	l.tmpRoot, l.tmpDir = tr, td
	return nil
}

// checkPlainFolder refuses name when it exists as anything but a folder
// (checked without following a final symbolic link).
func (l *Local) checkPlainFolder(name string) error {
	st, err := l.root.Lstat(filepath.FromSlash(name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%s: checking %s: %w", l.dir, name, err)
	case st.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s: %s is a symbolic link, not a plain folder of the mirror: refusing to write through it (remove it if the mirror's own folder belongs there)", l.dir, name)
	case !st.IsDir():
		return fmt.Errorf("%s: %s is not a folder (mode %v): refusing to write through it", l.dir, name, st.Mode())
	}
	return nil
}

func (l *Local) closeTemp() {
	if l.tmpRoot != nil {
		l.tmpRoot.Close()
		l.tmpDir.Close()
		l.tmpRoot, l.tmpDir = nil, nil
	}
}

// Dir is the folder's path.
func (l *Local) Dir() string { return l.dir }

// Close releases the folder.
func (l *Local) Close() error {
	l.tmpMu.Lock()
	l.closeTemp()
	l.tmpMu.Unlock()
	return l.root.Close()
}

// ClearTemp removes temporary files that an interrupted writer left. Call
// it only while holding the mirror's lock.
func (l *Local) ClearTemp() error {
	l.tmpMu.Lock()
	defer l.tmpMu.Unlock()
	l.closeTemp()
	if err := l.root.RemoveAll(TempDir); err != nil {
		return fmt.Errorf("%s: clearing %s: %w", l.dir, TempDir, err)
	}
	return l.openTemp()
}

func (l *Local) Location() string { return l.dir }

func (l *Local) Properties() backend.Properties {
	return backend.Properties{CanList: true, CanWrite: l.rw, AtomicCreate: l.rw}
}

func (l *Local) err(op, name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %s %s: %w", l.dir, op, name, backend.ErrNotExist)
	}
	return fmt.Errorf("%s: %s %s: %w", l.dir, op, name, err)
}

func (l *Local) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := backend.CheckName(name); err != nil {
		return nil, err
	}
	f, err := l.root.Open(filepath.FromSlash(name))
	if err != nil {
		return nil, l.err("open", name, err)
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		f.Close()
		return nil, l.err("open", name, fs.ErrNotExist)
	}
	// The *os.File itself is returned so that io.Copy into another file
	// can use copy_file_range.
	return f, nil
}

func (l *Local) Stat(ctx context.Context, name string) (backend.FileInfo, error) {
	if err := backend.CheckName(name); err != nil {
		return backend.FileInfo{}, err
	}
	st, err := l.root.Stat(filepath.FromSlash(name))
	if err == nil && st.IsDir() {
		err = fs.ErrNotExist
	}
	if err != nil {
		return backend.FileInfo{}, l.err("stat", name, err)
	}
	return backend.FileInfo{Name: name, Size: st.Size()}, nil
}

func (l *Local) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	if err := backend.CheckPrefix(prefix); err != nil {
		return err
	}
	start := "."
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = prefix[:i]
	}
	fsys := l.root.FS()
	err := fs.WalkDir(fsys, start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == start {
				return fs.SkipAll
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() {
			if p+"/" == backend.ReservedPrefix {
				return fs.SkipDir
			}
			return nil
		}
		// A prefix inside the reserved folder starts the walk below the
		// folder's SkipDir, so its files are skipped here too.
		if !d.Type().IsRegular() || !strings.HasPrefix(p, prefix) || strings.HasPrefix(p, backend.ReservedPrefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while listing
			}
			return err
		}
		return fn(backend.FileInfo{Name: p, Size: info.Size()})
	})
	if err != nil {
		return fmt.Errorf("%s: listing %s: %w", l.dir, prefix, err)
	}
	return nil
}

// writeTemp copies exactly size bytes of r into a new fsynced temporary
// file and returns its name inside the root.
// The caller holds tmpMu for reading; the name returned is inside the
// temporary folder.
func (l *Local) writeTemp(name string, r io.Reader, size int64) (string, error) {
	if !l.rw {
		return "", fmt.Errorf("%s: %w: read-only", l.dir, backend.ErrNotSupported)
	}
	// A name of its own, not name plus a suffix: a data file named near
	// the file system's limit (255 bytes) must fit here too.
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := hex.EncodeToString(rnd[:])
	f, err := l.tmpRoot.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", l.err("write", name, err)
	}
	n, err := io.Copy(f, r)
	if err == nil && n != size {
		err = fmt.Errorf("got %d bytes, want %d", n, size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		l.tmpRoot.Remove(tmp)
		return "", l.err("write", name, err)
	}
	return tmp, nil
}

func (l *Local) prepare(name string) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	if strings.HasPrefix(name, backend.ReservedPrefix) {
		return fmt.Errorf("%w: %q is reserved", backend.ErrInvalidName, name)
	}
	if dir := path.Dir(name); dir != "." {
		if _, ok := l.made.Load(dir); ok {
			return nil
		}
		if err := l.root.MkdirAll(filepath.FromSlash(dir), 0o755); err != nil {
			return l.err("mkdir", dir, err)
		}
		l.made.Store(dir, true)
	}
	return nil
}

// openDir opens the folder of name, for renaming into it and syncing it.
func (l *Local) openDir(name string) (*os.File, error) {
	d, err := l.root.Open(filepath.FromSlash(path.Dir(name)))
	if err != nil {
		return nil, l.err("open folder of", name, err)
	}
	return d, nil
}

func syncDir(d *os.File) error {
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

func (l *Local) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := l.prepare(name); err != nil {
		return err
	}
	l.tmpMu.RLock()
	defer l.tmpMu.RUnlock()
	tmp, err := l.writeTemp(name, r, size)
	if err != nil {
		return err
	}
	d, err := l.openDir(name)
	if err != nil {
		l.tmpRoot.Remove(tmp)
		return err
	}
	defer d.Close()
	if err := l.renameInto(tmp, d, name); err != nil {
		l.tmpRoot.Remove(tmp)
		return l.err("rename", name, err)
	}
	if err := syncDir(d); err != nil {
		return l.err("sync folder of", name, err)
	}
	return nil
}

func (l *Local) Create(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := l.prepare(name); err != nil {
		return err
	}
	l.tmpMu.RLock()
	defer l.tmpMu.RUnlock()
	tmp, err := l.writeTemp(name, r, size)
	if err != nil {
		return err
	}
	defer l.tmpRoot.Remove(tmp)
	// link(2) fails when the name exists: an atomic create-if-absent.
	if err := l.root.Link(path.Join(TempDir, tmp), filepath.FromSlash(name)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: create %s: %w", l.dir, name, backend.ErrExist)
		}
		return l.err("create", name, err)
	}
	d, err := l.openDir(name)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := syncDir(d); err != nil {
		return l.err("sync folder of", name, err)
	}
	return nil
}

func (l *Local) Remove(ctx context.Context, name string) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	if !l.rw {
		return fmt.Errorf("%s: %w: read-only", l.dir, backend.ErrNotSupported)
	}
	if err := l.root.Remove(filepath.FromSlash(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return l.err("remove", name, err)
	}
	return nil
}
