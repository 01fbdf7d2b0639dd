package sink_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// A run writes the mirror its caller made through its own view of it
// (ForRun): the caller's dry run holds whatever the run's options say,
// and the run's guard holds until the run says it has the lock.
func TestARunsViewKeepsTheMirrorsDryRunAndAddsItsGuard(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		_, mirror := st.open(t)
		put(t, mirror, "data/kept.parquet", "k")
		before := names(t, mirror)

		var rec recorder
		dry := sink.New(mirror, sink.Options{DryRun: true}).ForRun(rec.options(sink.Options{}))
		if !dry.DryRun() {
			t.Fatal("the run's view of a dry-run mirror is not a dry run")
		}
		if err := dry.PutBytes(ctx, repo.HeadFile, []byte("refs/heads/main\n")); err != nil {
			t.Fatalf("dry-run write: %v", err)
		}
		if err := dry.Holdings().Remove(ctx, "data/kept.parquet", ""); err != nil {
			t.Fatalf("dry-run removal: %v", err)
		}
		if got := names(t, mirror); !slices.Equal(got, before) {
			t.Fatalf("a dry run's view changed the mirror: %v, was %v", got, before)
		}
		if want := []string{repo.HeadFile, "data/kept.parquet"}; !slices.Equal(rec.planned, want) {
			t.Fatalf("planned %v, want %v", rec.planned, want)
		}

		run := sink.New(mirror, sink.Options{}).ForRun(sink.Options{Guarded: true})
		err := run.PutBytes(ctx, repo.HeadFile, []byte("refs/heads/main\n"))
		if !errors.Is(err, sink.ErrNotSent) {
			t.Fatalf("write before the lock = %v, want it refused unsent", err)
		}
		if _, ok := read(t, mirror, repo.HeadFile); ok {
			t.Fatal("a write refused before the lock reached the mirror")
		}
		run.Runs().Locked()
		if err := run.PutBytes(ctx, repo.HeadFile, []byte("refs/heads/main\n")); err != nil {
			t.Fatalf("write once locked: %v", err)
		}
		if got, _ := read(t, mirror, repo.HeadFile); got != "refs/heads/main\n" {
			t.Fatalf("HEAD = %q after the locked write", got)
		}
	})
}

// A run's scratch folder is on the disk of a local mirror it writes, and
// private to this user otherwise: a dry run writes nothing in the mirror,
// not even its scratch.
func TestScratchIsInALocalMirrorItWritesOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		_, mirror := st.open(t)
		for _, dry := range []bool{false, true} {
			s := sink.New(mirror, sink.Options{DryRun: dry})
			dir, err := s.Runs().Scratch()
			if err != nil {
				t.Fatal(err)
			}
			inMirror := strings.Contains(filepath.ToSlash(dir.Path()), "/"+backend.ReservedPrefix)
			dir.Close()
			if want := st.name == "local" && !dry; inMirror != want || s.Runs().IsLocal() != (st.name == "local") {
				t.Fatalf("dry run %v: scratch %s in the mirror %v, want %v (IsLocal %v)", dry, dir.Path(), inMirror, want, s.Runs().IsLocal())
			}
		}
	})
}
