// Package scratch gives each run a private folder for its temporary files
// (the catalogs it reads), in a place where the next run cleans what a
// killed one left: a run killed with SIGKILL cannot remove its own files,
// and a catalog can be gigabytes.
//
// A place (a parent folder) holds one folder per run, run-<pid>-<random>,
// each with an owner file the run holds an flock(2) on while it lives. A
// run starting in the place removes every run folder whose owner lock it
// can take: its run is gone (the kernel drops the lock of a dead
// process), never a live one. Making a run folder and cleaning are done
// under an flock on the place's .lock, so a cleaner never sees a folder
// whose owner has not locked it yet.
//
// The places: for a run writing a local mirror, the mirror's
// .fdl-mirror/scratch/ (on the mirror's disk, and not .fdl-mirror/tmp/,
// which the lock's holder clears: a run reading without the lock would lose
// its catalogs there); everywhere else $TMPDIR/fdl-mirror-<uid>/, made
// 0700 and refused when it is a symbolic link or another user's.
package scratch

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ownerFile is the file in a run folder that its run holds locked.
const ownerFile = "owner"

// placeLock serialises making and cleaning run folders in a place.
const placeLock = ".lock"

// runPrefix starts every run folder's name; nothing else in a place is
// ever removed.
const runPrefix = "run-"

// Dir is one run's folder.
type Dir struct {
	path  string
	owner *os.File // holds the flock while the run lives
}

// Path is the folder, for os.CreateTemp and the like.
func (d *Dir) Path() string { return d.path }

// Close removes the folder and everything in it, then releases the lock.
func (d *Dir) Close() error {
	if d == nil || d.owner == nil {
		return nil
	}
	err := os.RemoveAll(d.path)
	d.owner.Close()
	d.owner = nil
	return err
}

// Private opens a run folder in $TMPDIR/fdl-mirror-<uid>/: for dry runs,
// object-store mirrors, verify and prune.
func Private() (*Dir, error) {
	uid := os.Getuid()
	place := filepath.Join(os.TempDir(), "fdl-mirror-"+strconv.Itoa(uid))
	if err := os.Mkdir(place, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("scratch folder %s: %w", place, err)
	}
	if err := checkPlace(place, uid); err != nil {
		return nil, err
	}
	return open(place)
}

// InMirror opens a run folder in a local mirror's .fdl-mirror/scratch/
// (mirrorDir is the mirror's folder): for runs that write it.
func InMirror(mirrorDir string) (*Dir, error) {
	reserved := filepath.Join(mirrorDir, ".fdl-mirror")
	place := filepath.Join(reserved, "scratch")
	uid := os.Getuid()
	for _, p := range []string{reserved, place} {
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("scratch folder %s: %w", p, err)
		}
	}
	// .fdl-mirror may be the mirror owner's, made by another account
	// (the local backend checks what it needs of it); scratch/ must be
	// this user's own plain folder.
	if st, err := os.Lstat(reserved); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("scratch folder %s: not a plain folder (%v)", reserved, err)
	}
	if err := checkPlace(place, uid); err != nil {
		return nil, err
	}
	return open(place)
}

// checkPlace refuses a place that is a symbolic link, not a folder, or
// another user's, and makes it 0700: another user must not be able to
// plant or read a run's files.
func checkPlace(place string, uid int) error {
	st, err := os.Lstat(place)
	if err != nil {
		return fmt.Errorf("scratch folder %s: %w", place, err)
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("scratch folder %s is a symbolic link: refusing to keep temporary files through it", place)
	}
	if !st.IsDir() {
		return fmt.Errorf("scratch folder %s is not a folder (mode %v)", place, st.Mode())
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != uid {
		return fmt.Errorf("scratch folder %s belongs to user %d, not to this user (%d): refusing to keep temporary files in it", place, sys.Uid, uid)
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(place, 0o700); err != nil {
			return fmt.Errorf("scratch folder %s: %w", place, err)
		}
	}
	return nil
}

// open cleans place of dead runs' folders and makes this run's, under
// the place's lock.
func open(place string) (*Dir, error) {
	lk, err := os.OpenFile(filepath.Join(place, placeLock), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("scratch folder %s: %w", place, err)
	}
	defer lk.Close() // releases the place's lock
	if err := flock(lk, true); err != nil {
		return nil, fmt.Errorf("scratch folder %s: locking: %w", place, err)
	}
	clean(place)

	var b [6]byte
	rand.Read(b[:])
	path := filepath.Join(place, runPrefix+strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(path, 0o700); err != nil {
		return nil, fmt.Errorf("scratch folder: %w", err)
	}
	owner, err := os.OpenFile(filepath.Join(path, ownerFile), os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err == nil {
		if err = flock(owner, false); err != nil {
			owner.Close()
		}
	}
	if err != nil {
		os.RemoveAll(path)
		return nil, fmt.Errorf("scratch folder %s: %w", path, err)
	}
	return &Dir{path: path, owner: owner}, nil
}

// clean removes the run folders of place whose owner lock is free: their
// run is gone. A folder without an owner file was left by a run killed
// while it made it (under the place's lock, which we hold now).
func clean(place string) {
	entries, err := os.ReadDir(place)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), runPrefix) {
			continue
		}
		dir := filepath.Join(place, e.Name())
		f, err := os.OpenFile(filepath.Join(dir, ownerFile), os.O_RDWR|syscall.O_NOFOLLOW, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				os.RemoveAll(dir)
			}
			continue
		}
		if flock(f, false) == nil {
			os.RemoveAll(dir) // its run is gone; we hold its lock while removing
		}
		f.Close()
	}
}

// flock takes an exclusive lock on f, waiting for it when wait.
func flock(f *os.File, wait bool) error {
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
