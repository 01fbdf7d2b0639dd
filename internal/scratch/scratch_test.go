package scratch

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func mustOpen(t *testing.T, place string) *Dir {
	t.Helper()
	d, err := open(place)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// A run starting in a place never removes the folder of a run that is
// still alive (its owner lock is held), and a run's Close removes its own.
func TestALiveRunsFolderIsKept(t *testing.T) {
	place := t.TempDir()
	first := mustOpen(t, place)
	if err := os.WriteFile(filepath.Join(first.Path(), "catalog-1.duckdb"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	second := mustOpen(t, place)
	if !exists(filepath.Join(first.Path(), "catalog-1.duckdb")) {
		t.Fatal("a second run removed a live run's folder")
	}
	if second.Path() == first.Path() {
		t.Fatal("two runs share a folder")
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(second.Path()) || !exists(first.Path()) {
		t.Errorf("after the second run's Close: second exists %v, first exists %v", exists(second.Path()), exists(first.Path()))
	}
	first.Close()
	if exists(first.Path()) {
		t.Error("Close left the run's folder")
	}
}

// A run whose process is gone has its lock dropped by the kernel (here:
// its owner file closed without removing anything, as a SIGKILL leaves
// it); the next run in the place removes its folder, and a folder left
// half made (no owner file), but nothing that is not a run folder.
func TestADeadRunsFolderIsRemovedByTheNextRun(t *testing.T) {
	place := t.TempDir()
	dead := mustOpen(t, place)
	os.WriteFile(filepath.Join(dead.Path(), "catalog-1.duckdb"), make([]byte, 1<<20), 0o600)
	dead.owner.Close() // the process died: its lock is gone, its files stay
	dead.owner = nil
	halfMade := filepath.Join(place, runPrefix+"1-abc")
	os.Mkdir(halfMade, 0o700)
	other := filepath.Join(place, "not-a-run")
	os.Mkdir(other, 0o700)

	next := mustOpen(t, place)
	if exists(dead.Path()) {
		t.Error("the dead run's folder is still there")
	}
	if exists(halfMade) {
		t.Error("the half-made run folder is still there")
	}
	if !exists(other) || !exists(next.Path()) {
		t.Error("removed a folder that is not a dead run's")
	}
}

// $TMPDIR/fdl-mirror-<uid> is made 0700; a symbolic link there, or a
// folder of another user, is refused rather than used.
func TestPrivatePlaceIsThisUsersOwnFolder(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	place := filepath.Join(tmp, "fdl-mirror-"+strconv.Itoa(os.Getuid()))

	d, err := Private()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(d.Path()) != place {
		t.Errorf("run folder %s, want one in %s", d.Path(), place)
	}
	if st, err := os.Stat(place); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("place mode %v (%v), want 0700", st.Mode(), err)
	}
	d.Close()

	os.RemoveAll(place)
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, place); err != nil {
		t.Fatal(err)
	}
	if d, err := Private(); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a symbolic link as the place: %v, %v", d, err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("files made through the link: %v", entries)
	}

	if os.Getuid() != 0 {
		t.Skip("another user's folder: needs root to make one")
	}
	os.Remove(place)
	os.Mkdir(place, 0o700)
	if err := os.Chown(place, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if d, err := Private(); err == nil || !strings.Contains(err.Error(), "belongs to user 65534") {
		t.Errorf("another user's place: %v, %v", d, err)
	}
}

// In a local mirror the place is .fdl-mirror/scratch/, never
// .fdl-mirror/tmp/ (which the lock's holder clears).
func TestInMirrorIsTheMirrorsScratchFolder(t *testing.T) {
	mirror := t.TempDir()
	d, err := InMirror(mirror)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if want := filepath.Join(mirror, ".fdl-mirror", "scratch"); filepath.Dir(d.Path()) != want {
		t.Errorf("run folder %s, want one in %s", d.Path(), want)
	}

	linked := t.TempDir()
	os.Symlink(t.TempDir(), filepath.Join(linked, ".fdl-mirror"))
	if d, err := InMirror(linked); err == nil {
		d.Close()
		t.Error("a .fdl-mirror that is a symbolic link was used")
	}
}
