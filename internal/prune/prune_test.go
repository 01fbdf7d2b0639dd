package prune

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// A repository whose main has a side branch; the mirror is a byte copy.
// Upstream then deletes the branch and its version.
func withdrawnBranch(t *testing.T) (up, mirror *local.Local, branchVersion string) {
	t.Helper()
	ctx := context.Background()
	parent := t.TempDir()
	upDir, mirrorDir := filepath.Join(parent, "up"), filepath.Join(parent, "mirror")
	opts := generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 5, FastParquet: true}
	g, err := generate.Generate(ctx, upDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	id, err := generate.AddVersion(ctx, upDir, 2, opts)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(upDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("refs/heads/side", id+"\n")
	write("refs/heads/main", g.Versions[1]+"\n")
	write("refs.json", string(repo.RefsJSON(repo.Refs{"refs/heads/main": g.Versions[1], "refs/heads/side": id})))
	if err := os.CopyFS(mirrorDir, os.DirFS(upDir)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(upDir, "refs/heads/side"))
	os.RemoveAll(filepath.Join(upDir, "versions", id))
	write("refs.json", string(repo.RefsJSON(repo.Refs{"refs/heads/main": g.Versions[1]})))
	if up, err = local.Open(upDir); err != nil {
		t.Fatal(err)
	}
	if mirror, err = local.Create(mirrorDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close(); mirror.Close() })
	return up, mirror, id
}

// Ref selection plugs in as Options.Selected: a ref it does not select is
// never removed, and the version it names stays with it.
func TestARefNotSelectedStaysWithItsVersion(t *testing.T) {
	up, mirror, id := withdrawnBranch(t)
	rep, err := runStores(context.Background(), up, mirror, Options{Selected: func(ref string) bool { return ref != "refs/heads/side" }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 0 || len(rep.RefsRemoved) != 0 || len(rep.VersionsRemoved) != 0 {
		t.Fatalf("removed %v, refs %v, versions %v; want nothing", rep.Removed, rep.RefsRemoved, rep.VersionsRemoved)
	}
	rep, err = runStores(context.Background(), up, mirror, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RefsRemoved) != 1 || len(rep.VersionsRemoved) != 1 || rep.VersionsRemoved[0].Version != id || len(rep.DataFilesRemoved) != 2 {
		t.Fatalf("with every ref selected: refs %v, versions %v, data files %v", rep.RefsRemoved, rep.VersionsRemoved, rep.DataFilesRemoved)
	}
}

// A prune cancelled before it starts removing removes nothing; cancelled
// midway (the lock lost), it stops at the next removal.
func TestACancelledPruneStopsBeforeItsNextRemoval(t *testing.T) {
	up, mirror, _ := withdrawnBranch(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := runStores(ctx, up, mirror, Options{})
	if err == nil {
		t.Fatal("a cancelled prune reported no error")
	}
	if len(rep.Removed) != 0 {
		t.Fatalf("a cancelled prune removed %v", rep.Removed)
	}
	if _, err := os.Stat(filepath.Join(mirror.Dir(), "refs/heads/side")); err != nil {
		t.Fatalf("the ref went: %v", err)
	}
}

// cancelAfterRemove is a mirror whose first removal lands and then the
// run is cancelled before its answer is read: the lock lost, or a signal,
// while the request was out.
type cancelAfterRemove struct {
	*local.Local
	cancel context.CancelFunc
	landed []string
}

func (c *cancelAfterRemove) Remove(ctx context.Context, name string) error {
	if err := c.Local.Remove(ctx, name); err != nil {
		return err
	}
	c.landed = append(c.landed, name)
	c.cancel()
	return ctx.Err()
}

// A removal the store carried out while the run was stopped, its answer
// lost, is neither claimed removed nor left out: the report lists it as
// maybe removed, and nothing after it was sent.
func TestARemovalInFlightWhenStoppedIsReportedMaybeRemoved(t *testing.T) {
	up, mirror, _ := withdrawnBranch(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &cancelAfterRemove{Local: mirror, cancel: cancel}
	rep, err := runStores(ctx, up, c, Options{})
	if err == nil {
		t.Fatal("a prune stopped mid-removal reported no error")
	}
	if len(c.landed) != 1 {
		t.Fatalf("removals that reached the store: %v, want exactly the first", c.landed)
	}
	if len(rep.Removed) != 0 || len(rep.MaybeRemoved) != 1 || rep.MaybeRemoved[0] != c.landed[0] {
		t.Errorf("report: removed %v, maybe removed %v; want maybe removed [%s] only", rep.Removed, rep.MaybeRemoved, c.landed[0])
	}
}

// A removal the lease check holds back never reaches the store: when the
// lease runs out between two removals (and the lost lock cancels the
// run), the report lists the first as removed and not the second at all,
// not even as maybe removed, and the second object stays.
func TestARemovalTheLeaseHeldBackIsNotReportedMaybeRemoved(t *testing.T) {
	up, mirror, _ := withdrawnBranch(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	checks := 0
	lease := func() error {
		checks++
		if checks <= 2 { // refs.json's write, then the first removal
			return nil
		}
		cancel() // the lost lock cancels the run, as lock.Held.Watch does
		return errors.New("the lock's lease may have run out")
	}
	rep, err := runStores(ctx, up, mirror, Options{Lease: lease})
	if err == nil {
		t.Fatal("a prune whose lease ran out reported no error")
	}
	if len(rep.Removed) != 1 || len(rep.MaybeRemoved) != 0 {
		t.Fatalf("report: removed %v, maybe removed %v; want the first removal only, nothing maybe removed", rep.Removed, rep.MaybeRemoved)
	}
	if _, err := os.Stat(filepath.Join(mirror.Dir(), rep.Removed[0])); !os.IsNotExist(err) {
		t.Errorf("%s, reported removed, is still there: %v", rep.Removed[0], err)
	}
	if !strings.Contains(err.Error(), "not writing") {
		t.Errorf("the error does not say a write was held back: %v", err)
	}
}
