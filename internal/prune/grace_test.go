package prune

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// copyInto puts every file of a local mirror into b, .fdl-mirror/ left out.
func copyInto(t *testing.T, dir string, b backend.Backend) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := filepath.ToSlash(strings.TrimPrefix(p, dir+string(filepath.Separator)))
		if strings.HasPrefix(name, backend.ReservedPrefix) {
			return nil
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return b.Put(context.Background(), name, strings.NewReader(string(raw)), int64(len(raw)))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A withdrawn version and its data files are candidates first: a prune
// removes the ref at once, and the rest only once it has been a
// candidate for the grace, by the clock the test holds; one second short
// of it, nothing goes. On every kind of sink: the grace is the prune's,
// whatever the store (mirror.Prune turns it off where flock holds).
func TestACandidateGoesOnlyAfterItsGrace(t *testing.T) {
	s3 := testserver.S3(t)
	gcs := testserver.GCS(t)
	for _, kind := range []string{"local", "s3", "gcs"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			up, localMirror, id := withdrawnBranch(t)
			var dst backend.Backend = localMirror
			if kind != "local" {
				addr := s3.URL(s3.Bucket(t), "m")
				if kind == "gcs" {
					addr = gcs.URL(gcs.Bucket(t), "m")
				}
				b, closeB, err := location.OpenWritable(ctx, addr, location.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { closeB() })
				copyInto(t, localMirror.Dir(), b)
				dst = b
			}
			const grace = 2 * time.Hour
			t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			now := t0
			prune := func() *Report {
				t.Helper()
				rep, err := runStores(ctx, up, dst, Options{Grace: grace, Now: func() time.Time { return now }, TempDir: t.TempDir()})
				if err != nil {
					t.Fatalf("prune at %s: %v", now.Sub(t0), err)
				}
				return rep
			}
			record := repo.VersionFile(id, repo.RecordFile)
			exists := func(name string) bool {
				_, err := dst.Stat(ctx, name)
				if err != nil && !backend.IsNotExist(err) {
					t.Fatal(err)
				}
				return err == nil
			}

			rep := prune()
			if len(rep.RefsRemoved) != 1 || len(rep.VersionsRemoved) != 0 || len(rep.DataFilesRemoved) != 0 {
				t.Fatalf("first prune: refs %v, versions %v, data files %v; want the ref alone", rep.RefsRemoved, rep.VersionsRemoved, rep.DataFilesRemoved)
			}
			if exists("refs/heads/side") || !exists(record) {
				t.Fatalf("after the first prune: ref there %v, version.json there %v; want the ref gone, the version kept", exists("refs/heads/side"), exists(record))
			}
			held := rep.Candidates
			if held < 4 || rep.NextDue == nil || !rep.NextDue.Equal(t0.Add(grace)) {
				t.Fatalf("first prune held %d candidates, next due %v; want the version's files and its 2 data files, due at %s", held, rep.NextDue, t0.Add(grace))
			}
			list, _, err := sink.New(dst, sink.Options{}).Holdings().ReadCandidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := list.Objects[record]; !ok || !c.Since.Equal(t0) {
				t.Fatalf("the candidates file does not hold %s since %s: %+v", record, t0, list.Objects)
			}

			// On an object store, another run writes one of the data files
			// again meanwhile: a new version token, so that run's own from
			// when a prune first sees it, and not listed for a grace from
			// then (grace.go), then a new candidate for another. (On GCS
			// every write is a new generation; an S3 ETag is the bytes'
			// MD5, so there the bytes differ.)
			var rewritten string
			if kind != "local" {
				for name := range list.Objects {
					if strings.HasSuffix(name, ".parquet") {
						rewritten = name
						break
					}
				}
				raw, err := backend.ReadAll(ctx, dst, rewritten, 1<<30)
				if err != nil {
					t.Fatal(err)
				}
				if kind == "s3" {
					raw = append(raw, 0)
				}
				if err := dst.Put(ctx, rewritten, strings.NewReader(string(raw)), int64(len(raw))); err != nil {
					t.Fatal(err)
				}
			}

			now = t0.Add(grace - time.Second)
			rep = prune()
			wantHeld, wantRewritten := held, 0
			if rewritten != "" {
				wantHeld, wantRewritten = held-1, 1
			}
			if len(rep.Removed) != 0 || rep.Candidates != wantHeld || rep.Rewritten != wantRewritten || rep.Writes() != (rewritten != "") {
				t.Fatalf("a second short of the grace: removed %v, %d candidates (want %d), %d rewritten (want %d), writes %v",
					rep.Removed, rep.Candidates, wantHeld, rep.Rewritten, wantRewritten, rep.Writes())
			}
			if !exists(record) {
				t.Fatal("version.json went before the grace")
			}

			now = t0.Add(grace)
			rep = prune()
			wantFiles, wantLeft := 2, 0
			if rewritten != "" {
				wantFiles = 1 // and the rewritten one held, not listed
			}
			if len(rep.VersionsRemoved) != 1 || rep.VersionsRemoved[0].Version != id || len(rep.DataFilesRemoved) != wantFiles || rep.Candidates != wantLeft {
				t.Fatalf("at the grace: versions %v, data files %v, %d candidates left; want the version, %d of its files, %d left",
					rep.VersionsRemoved, rep.DataFilesRemoved, rep.Candidates, wantFiles, wantLeft)
			}
			if rewritten != "" {
				if !exists(rewritten) || contains(rep.DataFilesRemoved, rewritten) {
					t.Fatalf("%s, written again within the grace, went with the first listing's", rewritten)
				}
				now = t0.Add(2*grace - 2*time.Second)
				if rep = prune(); len(rep.Removed) != 0 || rep.Candidates != 0 || rep.Rewritten != 1 {
					t.Fatalf("within a grace of being seen rewritten: removed %v, %d candidates, %d rewritten; want it held, not listed", rep.Removed, rep.Candidates, rep.Rewritten)
				}
				now = t0.Add(2*grace - time.Second)
				if rep = prune(); len(rep.Removed) != 0 || rep.Candidates != 1 || rep.Rewritten != 0 {
					t.Fatalf("a grace after it was seen rewritten: removed %v, %d candidates, %d rewritten; want it listed anew", rep.Removed, rep.Candidates, rep.Rewritten)
				}
				now = t0.Add(3*grace - time.Second)
				if rep = prune(); len(rep.DataFilesRemoved) != 1 || rep.DataFilesRemoved[0] != rewritten || rep.Candidates != 0 {
					t.Fatalf("a grace after it was listed anew: data files %v, %d candidates; want %s alone", rep.DataFilesRemoved, rep.Candidates, rewritten)
				}
			}
			if exists(record) {
				t.Fatal("version.json stayed after the grace")
			}
			for _, f := range rep.DataFilesRemoved {
				if exists(f) {
					t.Errorf("%s stayed", f)
				}
			}
			list, _, err = sink.New(dst, sink.Options{}).Holdings().ReadCandidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Objects) != 0 {
				t.Fatalf("the candidates file still lists %v", list.Objects)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
