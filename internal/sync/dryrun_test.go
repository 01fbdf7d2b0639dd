package sync_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/api/iterator"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlmirror "github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// upstreamAhead generates an upstream of one version, mirrors it into
// sink with a real run, then adds a version upstream: a dry run then has
// a version and a ref move to plan.
func upstreamAhead(t *testing.T, sink string) (up, next string) {
	t.Helper()
	ctx := context.Background()
	up = filepath.Join(t.TempDir(), "up")
	opts := generate.Options{Versions: 1, FilesPerVersion: 2, RowsPerFile: 5, FastParquet: true}
	if _, err := generate.Generate(ctx, up, opts); err != nil {
		t.Fatal(err)
	}
	if rep, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: up, Sink: sink}}, nil, nil); err != nil || !rep.OK() {
		t.Fatalf("first sync: %v %+v", err, rep)
	}
	next, err := generate.AddVersion(ctx, up, 2, opts)
	if err != nil {
		t.Fatal(err)
	}
	return up, next
}

// dryRun runs a dry run and checks it planned the new version's ref move.
func dryRun(t *testing.T, up, sink, next string) {
	t.Helper()
	rep, err := fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: up, Sink: sink}, DryRun: true}, nil, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("dry run: %v %+v", err, rep)
	}
	if len(rep.RefsMoved) != 1 || rep.RefsMoved[0].To != next {
		t.Errorf("dry run planned ref moves %+v, want main to %s", rep.RefsMoved, next)
	}
}

// tree describes every entry under dir, folders included, by type, mode,
// size, modification time and content: a file or folder made and removed
// again changes its folder's modification time.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v %d %d", st.Mode(), st.Size(), st.ModTime().UnixNano())
		if st.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:])
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffTrees(t *testing.T, before, after map[string]string) {
	t.Helper()
	for name, b := range before {
		if a, ok := after[name]; !ok {
			t.Errorf("dry run removed %s", name)
		} else if a != b {
			t.Errorf("dry run changed %s: %s -> %s", name, b, a)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("dry run made %s", name)
		}
	}
}

// A dry run on a local mirror leaves it byte-identical, .fdl-mirror
// included: no temporary folder, no lock file, no state, not even a
// folder's modification time changed.
func TestDryRunLeavesALocalMirrorIdentical(t *testing.T) {
	sink := filepath.Join(t.TempDir(), "mirror")
	up, next := upstreamAhead(t, sink)
	// A mirror copied by another tool, or whose temporary folder was
	// removed by hand, has none: a dry run must not make it.
	if err := os.RemoveAll(filepath.Join(sink, ".fdl-mirror", "tmp")); err != nil {
		t.Fatal(err)
	}
	before := tree(t, sink)
	dryRun(t, up, sink, next)
	diffTrees(t, before, tree(t, sink))
}

// A dry run into a local mirror that does not exist yet reads it as empty
// and leaves it missing.
func TestDryRunOfAMissingLocalSinkMakesNothing(t *testing.T) {
	parent := t.TempDir()
	up := filepath.Join(parent, "up")
	g, err := generate.Generate(context.Background(), up, generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 5, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	sink := filepath.Join(parent, "mirror")
	rep, err := fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: up, Sink: sink}, DryRun: true}, nil, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("dry run: %v %+v", err, rep)
	}
	if len(rep.VersionsPublished) != 2 || len(rep.RefsMoved) == 0 {
		t.Errorf("dry run of an empty mirror planned versions %v, ref moves %+v; want both versions and main", rep.VersionsPublished, rep.RefsMoved)
	}
	want := map[string]bool{"up": true}
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if !want[e.Name()] {
			t.Errorf("dry run made %s", filepath.Join(parent, e.Name()))
		}
	}
	_ = g
}

// A dry run into S3 (Versity) writes no object: no lock, no state, nothing
// of the new version.
func TestDryRunWritesNoObjectToS3(t *testing.T) {
	srv := testserver.S3(t)
	bucket := srv.Bucket(t)
	up, next := upstreamAhead(t, srv.URL(bucket, "mirror"))
	list := func() map[string]string {
		out := map[string]string{}
		p := awss3.NewListObjectsV2Paginator(srv.Client(), &awss3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		for p.HasMorePages() {
			page, err := p.NextPage(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page.Contents {
				out[aws.ToString(o.Key)] = fmt.Sprintf("%d %s %v", aws.ToInt64(o.Size), aws.ToString(o.ETag), aws.ToTime(o.LastModified).UnixNano())
			}
		}
		return out
	}
	before := list()
	dryRun(t, up, srv.URL(bucket, "mirror"), next)
	diffTrees(t, before, list())
}

// A dry run into GCS (fake-gcs-server) writes no object either.
func TestDryRunWritesNoObjectToGCS(t *testing.T) {
	srv := testserver.GCS(t)
	bucket := srv.Bucket(t)
	up, next := upstreamAhead(t, srv.URL(bucket, "mirror"))
	client := srv.Client(t)
	list := func() map[string]string {
		out := map[string]string{}
		it := client.Bucket(bucket).Objects(context.Background(), nil)
		for {
			o, err := it.Next()
			if err == iterator.Done {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			out[o.Name] = fmt.Sprintf("%d %d %d", o.Size, o.Generation, o.Metageneration)
		}
	}
	before := list()
	if _, ok := before["mirror/"+repo.RefsFile]; !ok {
		t.Fatalf("the first sync wrote no refs.json: %v", before)
	}
	dryRun(t, up, srv.URL(bucket, "mirror"), next)
	diffTrees(t, before, list())
}
