package main

import (
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
)

// A prune killed with SIGKILL at any moment leaves every remaining ref of
// the mirror pointing at a complete version, and the next prune finishes
// the job: the mirror ends exactly as an uninterrupted prune leaves it.
// Each round starts from a copy of the same synced mirror; one kill in
// four lands anywhere in the run, three once its deletions have begun
// (refs.json rewritten), where the reads before would otherwise take most
// of them; on a loaded machine the reads stretch and the deletions (about
// 4,000 files) do not.
func TestPruneKilledAtRandomMomentsLeavesEveryRefComplete(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	parent, up, pristine := layout(t)
	r := makeBranchedRepo(t, up, 1000, "b1", "b2", "b3", "b4")
	if res := run(t, "sync", "--log-level", "error", up, pristine); res.code != 0 {
		t.Fatalf("sync: exit %d\n%s", res.code, res.stdout)
	}
	r.deleteBranch(t, "refs/heads/b1")
	r.deleteBranch(t, "refs/heads/b2")
	r.expireBranch(t, "refs/heads/b3")
	r.expireBranch(t, "refs/heads/b4")
	r.expire(t, r.chain[0])
	args := func(sink string) []string {
		return []string{"prune", "--log-level", "error", "--max-delete", "100000", up, sink}
	}

	pristineState := fdltest.States(t, pristine) // copyMirror's links keep it as it is

	// The reference: one uninterrupted prune, timed from its first
	// deletion to its exit.
	reference := copyMirror(t, pristine, filepath.Join(parent, "reference"))
	cmd := exec.Command(binary, args(reference)...)
	start := time.Now()
	deleting, exited := startWatched(t, cmd, reference)
	<-exited
	full := time.Since(start)
	if cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("reference prune: exit %d", cmd.ProcessState.ExitCode())
	}
	began := <-deleting
	if began.IsZero() {
		t.Fatal("the reference prune never rewrote refs.json")
	}
	deletion := time.Since(began) // an upper bound: includes the wait
	want := fdltest.Names(t, reference)
	if p := fdltest.Complete(t, reference); len(p) > 0 {
		t.Fatalf("reference prune: %v", p)
	}
	unpruned := len(fdltest.Names(t, pristine))
	t.Logf("a whole prune takes %s, its deletions at most %s; %d files remain of %d", full, deletion, len(want), unpruned)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	partial := 0
	const rounds = 12
	for i := 0; i < rounds; i++ {
		sink := copyMirror(t, pristine, filepath.Join(parent, "round"))
		cmd := exec.Command(binary, args(sink)...)
		deleting, exited := startWatched(t, cmd, sink)
		var delay time.Duration
		if i%4 == 0 {
			delay = time.Duration(rng.Int64N(int64(full)))
			time.Sleep(delay)
		} else {
			select {
			case <-deleting:
			case <-exited:
			}
			delay = time.Duration(rng.Int64N(int64(deletion) + 1))
			time.Sleep(delay)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		now := fdltest.Names(t, sink)
		if len(now) != len(want) && len(now) != unpruned {
			partial++
		}
		if p := fdltest.Complete(t, sink); len(p) > 0 {
			t.Fatalf("round %d, killed after %s: refs to incomplete versions: %v", i, delay, p)
		}
		if res := run(t, args(sink)...); res.code != 0 {
			t.Fatalf("round %d: the prune after the kill: exit %d\n%s%s", i, res.code, res.stdout, res.stderr)
		}
		got := fdltest.Names(t, sink)
		for name := range want {
			if _, ok := got[name]; !ok {
				t.Errorf("round %d: %s missing after the finishing prune", i, name)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("round %d: %s left by the finishing prune", i, name)
			}
		}
		if t.Failed() {
			return
		}
	}
	if !maps.Equal(fdltest.States(t, pristine), pristineState) {
		t.Errorf("a prune wrote into a file of the pristine mirror through a round's hard link")
	}
	t.Logf("%d of %d kills left a partly pruned mirror", partial, rounds)
	if partial < rounds/4 {
		t.Errorf("only %d of %d kills landed mid-deletion", partial, rounds)
	}
}

// copyMirror copies a local mirror to dst (replacing it), lock folder
// aside, as hard links: a prune only unlinks files or puts new ones in
// their place (the local store writes a temporary file and renames it),
// never writes into one, so src stays as it was. Copying the bytes of
// some 5,000 files in every round cost more CPU than the prunes.
func copyMirror(t *testing.T, src, dst string) string {
	t.Helper()
	os.RemoveAll(dst)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if rel == ".fdl-mirror" {
				return fs.SkipDir
			}
			return os.Mkdir(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		return os.Link(p, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// startWatched starts cmd and watches the sink's refs.json: deleting gets
// the moment it was rewritten (the first write of a prune; zero if the
// prune ended first), exited is closed when the process has ended.
func startWatched(t *testing.T, cmd *exec.Cmd, sink string) (<-chan time.Time, <-chan struct{}) {
	t.Helper()
	inode := func() uint64 {
		fi, err := os.Stat(filepath.Join(sink, "refs.json"))
		if err != nil {
			return 0
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	first := inode()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deleting := make(chan time.Time, 1)
	go func() {
		for {
			if inode() != first {
				deleting <- time.Now()
				return
			}
			select {
			case <-exited:
				deleting <- time.Time{}
				return
			case <-time.After(500 * time.Microsecond):
			}
		}
	}()
	return deleting, exited
}
