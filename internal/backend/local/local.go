// Package local is the backend for a folder on a local disk.
//
// Every access goes through an os.Root, so neither a hostile name nor a
// symbolic link planted in the folder can reach a file outside it. Writes
// go to a temporary file under .fdl-mirror/tmp/ and are renamed into
// place, so a reader sees the old object or the whole new one. A write
// fsyncs the file and, after the rename, its folder, so that a power cut
// leaves the old object or the whole new one too; a write under
// backend.WithoutSync skips both and is made durable, with every other
// such write, by the next Barrier: one syncfs(2) of the file system (or,
// where that is not available, an fsync of each file and folder written).
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
	"sync/atomic"
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
	tmpFd   int        // tmpDir's descriptor
	made    gosync.Map // folders known to exist

	// Folders written into are opened once and kept open (up to
	// maxOpenFolders not in use), for renameat(2) and fsync.
	foldersMu gosync.Mutex
	folders   map[string]*folder

	// What writes under backend.WithoutSync left to the next Barrier.
	dirtyMu    gosync.Mutex
	dirtyFiles map[string]bool
	dirtyDirs  map[string]uint64 // folder → its file system's device
}

// folder is an open folder of the store, shared by the readers and
// writers using it: opening a file through it is one openat(2), where
// through the store's root it is one per component of the path.
type folder struct {
	root  *os.Root // the folder as a root, for opening its files
	f     *os.File // the same folder, for renameat(2) and fsync
	fd    int      // f's descriptor
	dev   uint64   // the device of its file system, for syncfs
	users int
}

func (d *folder) close() {
	d.f.Close()
	d.root.Close()
}

// maxOpenFolders bounds the folders kept open while no write uses them.
const maxOpenFolders = 64

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
	// Another run on the folder that holds the mirror's lock may clear the
	// temporary folder (ClearTemp) between making it and opening it here:
	// then it is made again. Both handles are of the one folder opened.
	// (os.Root's MkdirAll says it exists when it went between its mkdir
	// and its check of what is there.)
	for attempt := 1; ; attempt++ {
		op := "creating"
		err := l.root.MkdirAll(TempDir, 0o755)
		if err == nil {
			op = "opening"
			var tr *os.Root
			if tr, err = l.root.OpenRoot(TempDir); err == nil {
				var td *os.File
				if td, err = tr.Open("."); err == nil {
					l.tmpRoot, l.tmpDir, l.tmpFd = tr, td, int(td.Fd())
					return nil
				}
				tr.Close()
			}
		}
		gone := errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist)
		if !gone || attempt == openTempAttempts {
			return fmt.Errorf("%s: %s %s: %w", l.dir, op, TempDir, err)
		}
	}
}

// openTempAttempts bounds how many times openTemp makes the temporary
// folder again after it went before it could be opened.
const openTempAttempts = 10

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
	l.foldersMu.Lock()
	for name, d := range l.folders {
		d.close()
		delete(l.folders, name)
	}
	l.foldersMu.Unlock()
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
	return backend.Properties{CanList: true, CanWrite: l.rw, AtomicCreate: l.rw, LocalStat: true}
}

func (l *Local) err(op, name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %s %s: %w", l.dir, op, name, backend.ErrNotExist)
	}
	return fmt.Errorf("%s: %s %s: %w", l.dir, op, name, err)
}

func (l *Local) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	f, err := l.openRegular(name)
	if err != nil {
		return nil, err
	}
	// The *os.File itself is returned so that io.Copy into another file
	// can use copy_file_range.
	return f, nil
}

// openRegular opens name for reading, if it is a regular file. It is
// opened with O_NONBLOCK: a FIFO planted where a store's reader expects a
// file (a data file, a catalog, a ref) would otherwise hold open(2) until
// something wrote to it, and the run with it, past any cancellation. The
// flag is cleared once the file is known to be regular, so that no file
// system takes it as "do not wait for the disk". A folder is absent, as
// on an object store; a FIFO, a socket or a device is refused for good.
func (l *Local) openRegular(name string) (*os.File, error) {
	if err := backend.CheckName(name); err != nil {
		return nil, err
	}
	full := filepath.Join(l.dir, filepath.FromSlash(name))
	f, err := inFolder(l, name, func(d *folder, base string) (*os.File, error) {
		return openRegularIn(d.root, d.fd, base, full)
	}, func() (*os.File, error) {
		f, err := l.root.OpenFile(filepath.FromSlash(name), os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil, err
		}
		return f, regularOnly(f)
	})
	var notRegular *notRegularError
	switch {
	case errors.As(err, &notRegular):
		return nil, backend.Permanent(l.err("open", name, err))
	case err != nil:
		return nil, l.err("open", name, err)
	}
	return f, nil
}

// notRegularError is a FIFO, a socket or a device where a file was to be
// read.
type notRegularError struct{ mode fs.FileMode }

func (e *notRegularError) Error() string {
	return fmt.Sprintf("not a regular file (%s)", e.mode.Type())
}

// regularOnly checks that f, opened with O_NONBLOCK, is a regular file,
// and clears the flag; otherwise it closes f. A folder is fs.ErrNotExist.
func regularOnly(f *os.File) error {
	st, err := f.Stat()
	switch {
	case err != nil:
	case st.IsDir():
		err = fs.ErrNotExist
	case !st.Mode().IsRegular():
		err = &notRegularError{st.Mode()}
	default:
		err = clearNonblock(f)
	}
	if err != nil {
		f.Close()
	}
	return err
}

// ReadAhead opens each named file and asks the kernel to start reading it
// (posix_fadvise WILLNEED), which returns without waiting for the disk:
// the copies that open the files next find their bytes read or on the
// way, instead of each waiting for its own read. Where the first, middle
// and last files are all in the page cache already, the names are taken
// as read and nothing more is done: on a tmpfs, or an upstream read a
// moment ago, opening every file twice cost 13 % more CPU.
func (l *Local) ReadAhead(ctx context.Context, names []string) {
	if len(names) == 0 || !l.anyUncached(names[0], names[len(names)/2], names[len(names)-1]) {
		return
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		if f, err := l.openRegular(name); err == nil {
			willNeed(f)
			f.Close()
		}
	}
}

// anyUncached says whether any of names is known not to be in the page
// cache (see uncached).
func (l *Local) anyUncached(names ...string) bool {
	for _, name := range names {
		f, err := l.openRegular(name)
		if err != nil {
			continue
		}
		u := uncached(f)
		f.Close()
		if u {
			return true
		}
	}
	return false
}

// inFolder calls fn with the open folder of name and its last component,
// or, where that fails for another reason than absence (a symbolic link
// that leaves the folder but stays in the store), whole through the root:
// what the store lets a reader reach is the same either way.
func inFolder[T any](l *Local, name string, fn func(d *folder, base string) (T, error), whole func() (T, error)) (T, error) {
	d, err := l.openFolder(name, false)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			var zero T
			return zero, fs.ErrNotExist
		}
		return whole()
	}
	defer l.releaseFolder(d)
	v, err := fn(d, path.Base(name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return whole()
	}
	return v, err
}

func (l *Local) Stat(ctx context.Context, name string) (backend.FileInfo, error) {
	if err := backend.CheckName(name); err != nil {
		return backend.FileInfo{}, err
	}
	st, err := inFolder(l, name, func(d *folder, base string) (fs.FileInfo, error) { return d.root.Stat(base) },
		func() (fs.FileInfo, error) { return l.root.Stat(filepath.FromSlash(name)) })
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

// writeTemp copies exactly size bytes of r into a new temporary file,
// fsynced when sync is set, and returns its name inside the temporary
// folder. The caller holds tmpMu for reading.
func (l *Local) writeTemp(name string, r io.Reader, size int64, sync bool) (string, error) {
	if !l.rw {
		return "", fmt.Errorf("%s: %w: read-only", l.dir, backend.ErrNotSupported)
	}
	tmp := tempName()
	f, err := openIn(l.tmpRoot, l.tmpFd, tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644, filepath.Join(l.dir, TempDir, tmp))
	if err != nil {
		return "", l.err("write", name, err)
	}
	err = copyExactly(f, r, size, sync)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		l.tmpRoot.Remove(tmp)
		return "", l.err("write", name, err)
	}
	return tmp, nil
}

// copyExactly copies r into f, which must then hold exactly size bytes,
// and fsyncs f when sync is set.
func copyExactly(f *os.File, r io.Reader, size int64, sync bool) error {
	// io.Copy from another *os.File is one copy_file_range(2) in the
	// kernel (sendfile or splice where that is refused): no byte passes
	// through this process.
	n, err := io.Copy(f, r)
	if err == nil && n != size {
		err = fmt.Errorf("got %d bytes, want %d", n, size)
	}
	switch {
	case err == nil && sync:
		err = syncFile(f)
	case err == nil && n >= writebackMin:
		startWriteback(f)
	}
	return err
}

// writebackMin is the smallest file whose write-back starts as soon as it
// is whole. A small file costs the kernel a block allocation and an I/O
// of its own where the Barrier's syncfs writes many together: 30,000
// files of 2 KB on this project's test disk took 3.4 s of system time
// with it, 1.5 s without (the syncfs included). Large files are where
// starting early pays, so that the Barrier does not wait for them all.
const writebackMin = 1 << 20

// tempName is a new name in the temporary folder: a name of its own, not
// the file's name plus a suffix, as a data file named near the file
// system's limit (255 bytes) must fit there too.
func tempName() string {
	var rnd [8]byte
	rand.Read(rnd[:])
	return hex.EncodeToString(rnd[:])
}

func (l *Local) prepare(name string) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	if strings.HasPrefix(name, backend.ReservedPrefix) {
		return fmt.Errorf("%w: %q is reserved", backend.ErrInvalidName, name)
	}
	return nil
}

// openFolder returns the open folder of name, making it first when make
// is set; release it when done.
func (l *Local) openFolder(name string, make bool) (*folder, error) {
	dir := path.Dir(name)
	l.foldersMu.Lock()
	if d := l.folders[dir]; d != nil {
		d.users++
		l.foldersMu.Unlock()
		return d, nil
	}
	l.foldersMu.Unlock()
	if _, ok := l.made.Load(dir); make && !ok && dir != "." {
		if err := l.root.MkdirAll(filepath.FromSlash(dir), 0o755); err != nil {
			return nil, l.err("mkdir", dir, err)
		}
		l.made.Store(dir, true)
	}
	sub, err := l.root.OpenRoot(filepath.FromSlash(dir))
	if err != nil {
		return nil, l.err("open folder of", name, err)
	}
	f, err := sub.Open(".")
	if err != nil {
		sub.Close()
		return nil, l.err("open folder of", name, err)
	}
	var dev uint64
	if st, err := f.Stat(); err == nil {
		dev = deviceOf(st)
	}
	fresh := &folder{root: sub, f: f, fd: int(f.Fd()), dev: dev, users: 1}
	l.foldersMu.Lock()
	defer l.foldersMu.Unlock()
	if d := l.folders[dir]; d != nil { // opened meanwhile by another writer
		fresh.close()
		d.users++
		return d, nil
	}
	if l.folders == nil {
		l.folders = map[string]*folder{}
	}
	if len(l.folders) >= maxOpenFolders {
		for other, d := range l.folders {
			if d.users == 0 {
				d.close()
				delete(l.folders, other)
			}
		}
	}
	l.folders[dir] = fresh
	return fresh, nil
}

func (l *Local) releaseFolder(d *folder) {
	l.foldersMu.Lock()
	d.users--
	l.foldersMu.Unlock()
}

// syncFile is every fsync of this package: a test counts them.
var syncFile = func(f *os.File) error { return f.Sync() }

func syncDir(d *os.File) error {
	if err := syncFile(d); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// deferSync notes a write or removal under backend.WithoutSync, for the
// next Barrier: file is "" for a removal.
func (l *Local) deferSync(file, dir string, dev uint64) {
	l.dirtyMu.Lock()
	defer l.dirtyMu.Unlock()
	if l.dirtyFiles == nil {
		l.dirtyFiles, l.dirtyDirs = map[string]bool{}, map[string]uint64{}
	}
	if file != "" {
		l.dirtyFiles[file] = true
	}
	l.dirtyDirs[dir] = dev
}

// syncfsMinFiles is how many files a Barrier must owe before it syncs
// whole file systems rather than each file: syncfs also waits for what
// other programs left unwritten on the same disk, which for a handful of
// files can cost more than their fsyncs.
var syncfsMinFiles = 32

// Barrier makes every write and removal made under backend.WithoutSync
// before it durable: one syncfs(2) per file system they touched (the
// mirror's folder is usually one), or, where syncfs is not available or
// few files are owed, an fsync of each file and folder, several at a
// time. An error from syncfs
// is a write that failed and is returned: an fsync of each file opened
// now would not see it (Linux reports a write-back error once per file
// system to syncfs, and to an fsync only through a descriptor open when
// it happened).
func (l *Local) Barrier(ctx context.Context) error {
	l.dirtyMu.Lock()
	files, dirs := l.dirtyFiles, l.dirtyDirs
	l.dirtyFiles, l.dirtyDirs = nil, nil
	l.dirtyMu.Unlock()
	if len(dirs) == 0 {
		return nil
	}
	var err error
	if len(files) < syncfsMinFiles {
		err = l.syncEach(ctx, files, dirs)
	} else if err = l.syncFileSystems(dirs); errors.Is(err, errors.ErrUnsupported) {
		err = l.syncEach(ctx, files, dirs)
	}
	if err != nil {
		// Still owed: a later Barrier tries again.
		for f := range files {
			l.deferSync(f, path.Dir(f), dirs[path.Dir(f)])
		}
		for d, dev := range dirs {
			l.deferSync("", d, dev)
		}
		return fmt.Errorf("%s: making writes durable: %w", l.dir, err)
	}
	return nil
}

// syncFileSystems calls syncfs(2) once for each file system of dirs.
func (l *Local) syncFileSystems(dirs map[string]uint64) error {
	done := map[uint64]bool{}
	for dir, dev := range dirs {
		if done[dev] {
			continue
		}
		d, err := l.root.Open(filepath.FromSlash(dir))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = syncfsFunc(d)
		d.Close()
		if err != nil {
			return err
		}
		done[dev] = true
	}
	return nil
}

// syncEach fsyncs every file, then every folder, eight at a time: a name
// made durable by its folder's fsync then names bytes already durable.
func (l *Local) syncEach(ctx context.Context, files map[string]bool, dirs map[string]uint64) error {
	var fileNames, dirNames []string
	for f := range files {
		fileNames = append(fileNames, f)
	}
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	if err := l.syncAll(ctx, fileNames, true); err != nil {
		return err
	}
	return l.syncAll(ctx, dirNames, false)
}

// syncAll fsyncs names, files (opened in their folders kept open) or
// folders.
func (l *Local) syncAll(ctx context.Context, names []string, files bool) error {
	var wg gosync.WaitGroup
	var next atomic.Int64
	errs := make([]error, len(names))
	for range min(8, len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(names) || ctx.Err() != nil {
					return
				}
				name := names[i]
				whole := func() (*os.File, error) { return l.root.Open(filepath.FromSlash(name)) }
				var f *os.File
				var err error
				if files {
					f, err = inFolder(l, name, func(d *folder, base string) (*os.File, error) {
						return openIn(d.root, d.fd, base, os.O_RDONLY, 0, filepath.Join(l.dir, filepath.FromSlash(name)))
					}, whole)
				} else {
					f, err = whole()
				}
				if errors.Is(err, fs.ErrNotExist) {
					continue // removed since: nothing to make durable
				}
				if err == nil {
					err = syncDir(f) // EINVAL is for what cannot be synced
					f.Close()
				}
				if err != nil {
					errs[i] = fmt.Errorf("fsync %s: %w", names[i], err)
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

func (l *Local) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := l.prepare(name); err != nil {
		return err
	}
	deferred := backend.SyncDeferred(ctx)
	l.tmpMu.RLock()
	defer l.tmpMu.RUnlock()
	d, err := l.openFolder(name, true)
	if err != nil {
		return err
	}
	defer l.releaseFolder(d)
	if err := l.put(d, name, r, size, !deferred); err != nil {
		return err
	}
	if deferred {
		l.deferSync(name, path.Dir(name), d.dev)
		return nil
	}
	return l.syncFolderOf(d, name)
}

// put writes name in its open folder d, replacing what is there: as an
// unnamed file linked in place where the file system can (see
// writeUnnamed), else through the temporary folder; renamed over the old
// file when there is one, so a reader sees one or the other whole.
func (l *Local) put(d *folder, name string, r io.Reader, size int64, sync bool) error {
	f, err := writeUnnamed(d, name, r, size, sync)
	if err == nil {
		return nil
	}
	var tmp string
	switch {
	case errors.Is(err, fs.ErrExist):
		tmp = tempName()
		err = l.placeUnnamed(f, tmp)
		f.Close()
		if err != nil {
			return l.err("write", name, err)
		}
	case errors.Is(err, errors.ErrUnsupported):
		if tmp, err = l.writeTemp(name, r, size, sync); err != nil {
			return err
		}
	default:
		return l.err("write", name, err)
	}
	if err := l.renameInto(tmp, d.f, name); err != nil {
		l.tmpRoot.Remove(tmp)
		return l.err("rename", name, err)
	}
	return nil
}

// syncFolderOf fsyncs name's open folder d, so that a new name in it
// survives a power cut.
func (l *Local) syncFolderOf(d *folder, name string) error {
	if err := syncDir(d.f); err != nil {
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
	d, err := l.openFolder(name, true)
	if err != nil {
		return err
	}
	defer l.releaseFolder(d)
	f, err := writeUnnamed(d, name, r, size, true)
	switch {
	case err == nil:
		return l.syncFolderOf(d, name)
	case errors.Is(err, fs.ErrExist):
		f.Close()
		return fmt.Errorf("%s: create %s: %w", l.dir, name, backend.ErrExist)
	case !errors.Is(err, errors.ErrUnsupported):
		return l.err("create", name, err)
	}
	tmp, err := l.writeTemp(name, r, size, true)
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
	return l.syncFolderOf(d, name)
}

// Remove deletes the object and fsyncs its folder, so that a power cut
// cannot bring back what a reader was told is gone (a ref before its
// version); under backend.WithoutSync the fsync is left to the next
// Barrier.
func (l *Local) Remove(ctx context.Context, name string) error {
	if err := backend.CheckName(name); err != nil {
		return err
	}
	if !l.rw {
		return fmt.Errorf("%s: %w: read-only", l.dir, backend.ErrNotSupported)
	}
	if err := l.root.Remove(filepath.FromSlash(name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return l.err("remove", name, err)
	}
	d, err := l.openFolder(name, false)
	if err != nil {
		return err
	}
	defer l.releaseFolder(d)
	if backend.SyncDeferred(ctx) {
		l.deferSync("", path.Dir(name), d.dev)
		return nil
	}
	return l.syncFolderOf(d, name)
}
