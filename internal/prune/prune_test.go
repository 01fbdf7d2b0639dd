package prune

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// A repository whose main has a side branch; the mirror is a byte copy.
// Upstream then deletes the branch and its version.
func withdrawnBranch(t *testing.T) (up, mirror *local.Local, branchVersion string) {
	t.Helper()
	ctx := context.Background()
	parent := t.TempDir()
	upDir, mirrorDir := filepath.Join(parent, "up"), filepath.Join(parent, "mirror")
	// A copy of the repository generated once for every test here.
	type generated struct{ main, side string }
	gen := fdltest.FromTemplate(t, "prune: main and a side version", upDir, func(dir string) generated {
		opts := generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 5, FastParquet: true}
		g, err := generate.Generate(ctx, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		id, err := generate.AddVersion(ctx, dir, 2, opts)
		if err != nil {
			t.Fatal(err)
		}
		return generated{g.Versions[1], id}
	}, func(g generated, _ string) generated { return g })
	id := gen.side
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(upDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("refs/heads/side", id+"\n")
	write("refs/heads/main", gen.main+"\n")
	write("refs.json", string(repo.RefsJSON(repo.Refs{"refs/heads/main": gen.main, "refs/heads/side": id})))
	if err := os.CopyFS(mirrorDir, os.DirFS(upDir)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(upDir, "refs/heads/side"))
	os.RemoveAll(filepath.Join(upDir, "versions", id))
	write("refs.json", string(repo.RefsJSON(repo.Refs{"refs/heads/main": gen.main})))
	var err error
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

// Unwrap lets the mirror's state files go to the folder, as through
// every wrapper of a local mirror.
func (c *cancelAfterRemove) Unwrap() backend.Reader { return c.Local }

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

// refusesRefRemoval is a mirror that will not remove ref files: a prune
// stopped after refs.json and before its ref files.
type refusesRefRemoval struct{ *local.Local }

func (r refusesRefRemoval) Unwrap() backend.Reader { return r.Local }

func (r refusesRefRemoval) Remove(ctx context.Context, name string) error {
	if strings.HasPrefix(name, repo.RefsDir) {
		return errors.New("refused by the test")
	}
	return r.Local.Remove(ctx, name)
}

// refsJSONAtFirstVersionRead notes what refs.json held when the run
// first read anything under versions/.
type refsJSONAtFirstVersionRead struct {
	*local.Local
	seen []byte
}

func (r *refsJSONAtFirstVersionRead) Unwrap() backend.Reader { return r.Local }

func (r *refsJSONAtFirstVersionRead) note() {
	if r.seen == nil {
		r.seen, _ = os.ReadFile(filepath.Join(r.Dir(), repo.RefsFile))
	}
}

func (r *refsJSONAtFirstVersionRead) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if strings.HasPrefix(name, repo.VersionsDir) {
		r.note()
	}
	return r.Local.Open(ctx, name)
}

func (r *refsJSONAtFirstVersionRead) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	if strings.HasPrefix(prefix, repo.VersionsDir) || prefix == "" {
		r.note()
	}
	return r.Local.List(ctx, prefix, fn)
}

// A prune stopped between refs.json and its ref files leaves refs.json
// without a ref whose file is still there. The next run's first step
// makes refs.json say what the ref files hold, before it reads any
// version; that run then removes the ref again, both places at once.
func TestThePruneAfterOneStoppedAmongItsRefsMendsRefsJSONFirst(t *testing.T) {
	up, mirror, id := withdrawnBranch(t)
	ctx := context.Background()
	rep, err := runStores(ctx, up, refusesRefRemoval{mirror}, Options{})
	if err == nil || !strings.Contains(err.Error(), "refs/heads/side") {
		t.Fatalf("a prune whose ref removal failed: %v", err)
	}
	if len(rep.RefsRemoved) != 0 || len(rep.VersionsRemoved) != 0 {
		t.Fatalf("the stopped prune reported refs %v, versions %v removed", rep.RefsRemoved, rep.VersionsRemoved)
	}
	refsJSON, err := os.ReadFile(filepath.Join(mirror.Dir(), repo.RefsFile))
	if err != nil || strings.Contains(string(refsJSON), "refs/heads/side") {
		t.Fatalf("refs.json after the stopped prune: %q, %v; want it without the side branch", refsJSON, err)
	}
	if _, err := os.Stat(filepath.Join(mirror.Dir(), "refs/heads/side")); err != nil {
		t.Fatalf("the ref file went: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mirror.Dir(), backend.ReservedPrefix+sink.RefsMovingFile)); err != nil {
		t.Fatalf("no refs-moving marker left by the stopped prune: %v", err)
	}

	watch := &refsJSONAtFirstVersionRead{Local: mirror}
	rep, err = runStores(ctx, up, watch, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(watch.seen), `"refs/heads/side"`) || !strings.Contains(string(watch.seen), id) {
		t.Errorf("refs.json when the next prune first read versions/: %q; want it mended to name refs/heads/side → %s", watch.seen, id)
	}
	if len(rep.RefsRemoved) != 1 || rep.RefsRemoved[0].Ref != "refs/heads/side" || len(rep.VersionsRemoved) != 1 {
		t.Fatalf("the next prune removed refs %v, versions %v; want the side branch and its version", rep.RefsRemoved, rep.VersionsRemoved)
	}
	refsJSON, _ = os.ReadFile(filepath.Join(mirror.Dir(), repo.RefsFile))
	if strings.Contains(string(refsJSON), "refs/heads/side") {
		t.Errorf("refs.json still names the side branch: %q", refsJSON)
	}
	for _, name := range []string{"refs/heads/side", backend.ReservedPrefix + sink.RefsMovingFile} {
		if _, err := os.Stat(filepath.Join(mirror.Dir(), name)); !os.IsNotExist(err) {
			t.Errorf("%s after the next prune: %v; want it gone", name, err)
		}
	}
}
