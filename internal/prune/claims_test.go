package prune

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

// objectStoreMirror is withdrawnBranch's mirror copied into a fresh
// prefix of an S3 (Versity) or GCS (fake-gcs-server) bucket.
func objectStoreMirror(t *testing.T, kind string, s3 *testserver.S3Server, gcs *testserver.GCSServer) (up *local.Local, dst backend.Backend, id string, mirrorDir string) {
	t.Helper()
	up, localMirror, id := withdrawnBranch(t)
	addr := s3.URL(s3.Bucket(t), "m")
	if kind == "gcs" {
		addr = gcs.URL(gcs.Bucket(t), "m")
	}
	b, closeB, err := location.OpenWritable(context.Background(), addr, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeB() })
	copyInto(t, localMirror.Dir(), b)
	return up, b, id, localMirror.Dir()
}

// bringBack has the upstream name version id again on branch side, as
// before withdrawnBranch withdrew it (its folder from the mirror's copy).
func bringBack(t *testing.T, up *local.Local, mirrorDir, id string) {
	t.Helper()
	dir := filepath.Join(up.Dir(), "versions", id)
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(mirrorDir, "versions", id))); err != nil {
		t.Fatal(err)
	}
	main, err := os.ReadFile(filepath.Join(up.Dir(), "refs/heads/main"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"refs/heads/side": id + "\n",
		"refs.json":       string(repo.RefsJSON(repo.Refs{"refs/heads/main": strings.TrimSpace(string(main)), "refs/heads/side": id})),
	} {
		if err := os.WriteFile(filepath.Join(up.Dir(), name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkMirror fails the test unless every ref of the mirror resolves to
// a complete version, every data file its catalogs name there at its size
// (verify, as `fdl-mirror verify` runs it).
func checkMirror(t *testing.T, dst backend.Reader) {
	t.Helper()
	problems, err := verify.CheckRepository(context.Background(), source.New(dst, nil, nil), verify.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("verify: %v", p)
	}
}

// A sync that needs what a prune lists makes it its own: upstream brings
// back a version a prune found withdrawn and listed (its version.json,
// catalog and data files), and the sync copies every one of them again
// with a new version token, takes them off the list (Rewritten) and moves
// the ref. A prune that planned the removals before the sync, paused,
// and sends them after (each conditional on the token it listed) has
// every one refused, and the version stays whole. A prune within the
// grace after the rescue does not list them again, even once the version
// is withdrawn a second time; one a grace after does.
func TestASyncMakesTheCandidatesItNeedsItsOwn(t *testing.T) {
	s3 := testserver.S3(t)
	gcs := testserver.GCS(t)
	for _, kind := range []string{"s3", "gcs"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			up, dst, id, mirrorDir := objectStoreMirror(t, kind, s3, gcs)
			const grace = 2 * time.Hour
			t0 := time.Now().Add(-3 * grace) // listed long ago: due now
			prune := func(at time.Time) *Report {
				t.Helper()
				rep, err := runStores(ctx, up, dst, Options{Grace: grace, Now: func() time.Time { return at }, TempDir: t.TempDir()})
				if err != nil {
					t.Fatalf("prune at %s: %v", at, err)
				}
				return rep
			}
			if rep := prune(t0); len(rep.Removed) != 1 || rep.Candidates < 4 {
				t.Fatalf("first prune removed %v and listed %d; want the ref alone, and the version's objects listed", rep.Removed, rep.Candidates)
			}
			listed, _, err := sink.New(dst, sink.Options{}).Holdings().ReadCandidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			record := repo.VersionFile(id, repo.RecordFile)
			if _, ok := listed.Objects[record]; !ok {
				t.Fatalf("%s not listed: %v", record, listed.Objects)
			}

			// The prune that would remove them now has its plan: every
			// listed object, conditional on the token listed. It is
			// paused, and upstream names the version again.
			bringBack(t, up, mirrorDir, id)
			rep, err := fdlsync.Run(ctx, source.New(up, nil, nil), sink.New(dst, sink.Options{}), fdlsync.Options{Concurrency: 2, TempDir: t.TempDir()})
			if err != nil || !rep.OK() {
				t.Fatalf("sync: %v, refused %v", err, rep.Refused)
			}
			rescued := time.Now()
			if len(rep.Claimed) != len(listed.Objects) {
				t.Fatalf("the sync claimed %v; want every listed object %v", rep.Claimed, listed.Objects)
			}
			for name, c := range listed.Objects {
				fi, err := dst.Stat(ctx, name)
				if err != nil {
					t.Fatalf("%s after the sync: %v", name, err)
				}
				if fi.Version == c.Version {
					t.Fatalf("%s keeps the token %s the prune listed: a late removal would land", name, c.Version)
				}
				// The paused prune's removal, sent now.
				err = backend.RemoveIfUnchanged(ctx, dst, name, c.Version)
				if !backend.IsPreconditionFailed(err) {
					t.Fatalf("the paused prune's removal of %s (if %s; now %s): %v, want refused", name, c.Version, fi.Version, err)
				}
			}
			checkMirror(t, dst)
			after, _, err := sink.New(dst, sink.Options{}).Holdings().ReadCandidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for name := range listed.Objects {
				if _, ok := after.Objects[name]; ok {
					t.Errorf("%s still listed after the sync made it its own", name)
				}
				if c, ok := after.Rewritten[name]; !ok || c.Version != listed.Objects[name].Version {
					t.Errorf("%s not recorded rewritten from %s: %+v", name, listed.Objects[name].Version, after.Rewritten[name])
				}
			}

			// Withdrawn again: within the grace after the rescue no prune
			// lists them, so no sync rewrites them back to the old token
			// while the paused prune might still send its removal.
			if err := os.Remove(filepath.Join(up.Dir(), "refs/heads/side")); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(up.Dir(), "versions", id)); err != nil {
				t.Fatal(err)
			}
			main, err := os.ReadFile(filepath.Join(up.Dir(), "refs/heads/main"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(up.Dir(), "refs.json"), repo.RefsJSON(repo.Refs{"refs/heads/main": strings.TrimSpace(string(main))}), 0o644); err != nil {
				t.Fatal(err)
			}
			rep2 := prune(rescued.Add(grace - time.Minute))
			if len(rep2.RefsRemoved) != 1 || len(rep2.VersionsRemoved) != 0 || len(rep2.DataFilesRemoved) != 0 || rep2.Candidates != 0 || rep2.Rewritten != len(listed.Objects) {
				t.Fatalf("within the grace after the rescue: refs %v, versions %v, data files %v, %d listed, %d rewritten; want the ref alone gone, nothing listed, %d rewritten",
					rep2.RefsRemoved, rep2.VersionsRemoved, rep2.DataFilesRemoved, rep2.Candidates, rep2.Rewritten, len(listed.Objects))
			}
			rep2 = prune(rescued.Add(grace + time.Minute))
			if len(rep2.Removed) != 0 || rep2.Candidates != len(listed.Objects) || rep2.Rewritten != 0 {
				t.Fatalf("a grace after the rescue: removed %v, %d listed, %d rewritten; want all %d listed anew, none removed",
					rep2.Removed, rep2.Candidates, rep2.Rewritten, len(listed.Objects))
			}
			checkMirror(t, dst)
		})
	}
}

// What a prune removed stays on its list for the grace, with the token
// it removed: a sync that copies it again (upstream brought the version
// back) writes it with another token, where on S3 the same bytes written
// the same way would give the same ETag back, and a removal sent by a
// prune paused since, conditional on that token, would land.
func TestASyncWritesWhatAPruneRemovedWithANewToken(t *testing.T) {
	s3 := testserver.S3(t)
	gcs := testserver.GCS(t)
	for _, kind := range []string{"s3", "gcs"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			up, dst, id, mirrorDir := objectStoreMirror(t, kind, s3, gcs)
			const grace = 2 * time.Hour
			now := time.Now()
			opts := func(at time.Time) Options {
				return Options{Grace: grace, Now: func() time.Time { return at }, TempDir: t.TempDir()}
			}
			if _, err := runStores(ctx, up, dst, opts(now.Add(-2*grace))); err != nil {
				t.Fatal(err)
			}
			rep, err := runStores(ctx, up, dst, opts(now.Add(-time.Minute)))
			if err != nil || len(rep.VersionsRemoved) != 1 || len(rep.DataFilesRemoved) != 2 {
				t.Fatalf("second prune: %v, versions %v, data files %v; want the version and its 2 files removed", err, rep.VersionsRemoved, rep.DataFilesRemoved)
			}
			list, _, err := sink.New(dst, sink.Options{}).Holdings().ReadCandidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range rep.DataFilesRemoved {
				if c, ok := list.Removed[name]; !ok || c.Version == "" {
					t.Fatalf("%s not recorded removed with its token: %+v", name, list.Removed)
				}
			}

			bringBack(t, up, mirrorDir, id)
			srep, err := fdlsync.Run(ctx, source.New(up, nil, nil), sink.New(dst, sink.Options{}), fdlsync.Options{Concurrency: 2, TempDir: t.TempDir()})
			if err != nil || !srep.OK() {
				t.Fatalf("sync: %v, refused %v", err, srep.Refused)
			}
			for _, name := range rep.DataFilesRemoved {
				removed := list.Removed[name].Version
				fi, err := dst.Stat(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Version == removed {
					t.Fatalf("%s copied back with the token %s a prune removed", name, removed)
				}
				if err := backend.RemoveIfUnchanged(ctx, dst, name, removed); !backend.IsPreconditionFailed(err) {
					t.Fatalf("a late removal of %s if %s: %v, want refused", name, removed, err)
				}
			}
			checkMirror(t, dst)
		})
	}
}
