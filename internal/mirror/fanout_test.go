package mirror_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// A fan-out: one run, several sinks, the upstream read once.

// requestsPerFile is how many requests srv had for each file of the
// repository in dir (and refs.json, HEAD, the markers a run asks for).
func requestsPerFile(t *testing.T, srv *testserver.HTTPServer, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for name := range fdltest.Files(t, dir) {
		out[name] = srv.RequestsFor("/" + name)
	}
	return out
}

// Two sinks cost the upstream what one does: the same requests for every
// file (each data file and catalog once), and both mirrors are the
// upstream's copy.
func TestTwoSinksReadTheUpstreamAsOneSinkDoes(t *testing.T) {
	up := filepath.Join(t.TempDir(), "up")
	g := fdltest.Generate(t, up, generate.Options{Versions: 3, FilesPerVersion: 3, FastParquet: true, ExtraFiles: true, Tags: true})
	ctx := context.Background()

	one := testserver.HTTP(t, up)
	single := filepath.Join(t.TempDir(), "single")
	rep, err := mirror.Run(ctx, mirror.Job{Stores: mirror.Stores{Source: one.URL, Sink: single}}, nil, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("one sink: %v %+v", err, rep)
	}

	two := testserver.HTTP(t, up)
	sinks := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	runs := mirror.RunSinks(ctx, mirror.Job{Stores: mirror.Stores{Source: two.URL}}, sinks, nil, nil)
	for i, r := range runs {
		if r.Sink != sinks[i] || r.Err != nil || r.Report == nil || !r.Report.OK() {
			t.Fatalf("sink %d: %s %v %+v", i, r.Sink, r.Err, r.Report)
		}
		if r.Report.Sink != sinks[i] {
			t.Errorf("sink %d's report names %s", i, r.Report.Sink)
		}
		fdltest.AssertMirrored(t, up, sinks[i], nil)
	}
	if runs[1].Report.FilesCopied != runs[0].Report.FilesCopied || runs[1].Report.BytesCopied != runs[0].Report.BytesCopied {
		t.Errorf("the second sink copied %d files, %d bytes; the first %d, %d", runs[1].Report.FilesCopied, runs[1].Report.BytesCopied,
			runs[0].Report.FilesCopied, runs[0].Report.BytesCopied)
	}

	want, got := requestsPerFile(t, one, up), requestsPerFile(t, two, up)
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: %d requests upstream for two sinks, %d for one", name, got[name], n)
		}
	}
	for _, f := range g.DataFiles {
		if n := got[f]; n != 1 {
			t.Errorf("data file %s: %d requests upstream, want 1", f, n)
		}
	}
	if two.Requests() != one.Requests() {
		t.Errorf("%d requests upstream for two sinks, %d for one", two.Requests(), one.Requests())
	}
}

// A sink another run holds the lock of is refused by name and left as it
// was; the sink after it is mirrored all the same, its data files read
// from the upstream (no earlier sink of the run has them).
func TestALockedSinkDoesNotStopTheNext(t *testing.T) {
	up := filepath.Join(t.TempDir(), "up")
	g := fdltest.Generate(t, up, generate.Options{Versions: 2, FastParquet: true})
	ctx := context.Background()
	srv := testserver.HTTP(t, up)
	locked, free := filepath.Join(t.TempDir(), "locked"), filepath.Join(t.TempDir(), "free")
	fdltest.HoldLock(t, locked, lock.Options{Owner: "another run", TTL: time.Hour})

	runs := mirror.RunSinks(ctx, mirror.Job{Stores: mirror.Stores{Source: srv.URL}}, []string{locked, free}, nil, nil)
	if runs[0].Err == nil || !strings.Contains(runs[0].Err.Error(), locked) {
		t.Errorf("the locked sink's error does not name it: %v", runs[0].Err)
	}
	if runs[0].Report != nil && len(runs[0].Report.VersionsPublished) != 0 {
		t.Errorf("the locked sink reports versions published: %v", runs[0].Report.VersionsPublished)
	}
	for _, dir := range []string{"refs", "versions", "data", "refs.json", "HEAD"} {
		if _, err := os.Stat(filepath.Join(locked, dir)); err == nil {
			t.Errorf("the locked sink was written: it has %s", dir)
		}
	}
	if runs[1].Err != nil || !runs[1].Report.OK() {
		t.Fatalf("the free sink: %v %+v", runs[1].Err, runs[1].Report)
	}
	fdltest.AssertMirrored(t, up, free, nil)
	if got := fdltest.ReadRef(t, free, generate.MainRef); got != g.Versions[len(g.Versions)-1] {
		t.Errorf("the free sink's main is %s", got)
	}
	srv.AssertEachAskedOnce(t, g.DataFiles)
}

// An earlier sink's copy that is not what the catalog records (a data
// file of another size there, a catalog whose sum is not its record's) is
// not taken: the later sink reads the upstream's, and mirrors it intact.
func TestAnEarlierSinksBadCopyIsReadFromUpstream(t *testing.T) {
	up := filepath.Join(t.TempDir(), "up")
	g := fdltest.Generate(t, up, generate.Options{Versions: 2, FastParquet: true})
	ctx := context.Background()
	srv := testserver.HTTP(t, up)
	first, second := filepath.Join(t.TempDir(), "first"), filepath.Join(t.TempDir(), "second")
	// The first sink is mirrored, then its copies are damaged: a data
	// file one byte longer, the last version's catalog one byte longer.
	if rep, err := mirror.Run(ctx, mirror.Job{Stores: mirror.Stores{Source: up, Sink: first}}, nil, nil); err != nil || !rep.OK() {
		t.Fatalf("first: %v %+v", err, rep)
	}
	badData := g.DataFiles[len(g.DataFiles)-1]
	last := g.Versions[len(g.Versions)-1]
	badCatalog := repo.VersionFile(last, repo.CatalogFile)
	fdltest.Append(t, filepath.Join(first, badData), []byte{0})
	fdltest.Append(t, filepath.Join(first, badCatalog), []byte{0})

	runs := mirror.RunSinks(ctx, mirror.Job{Stores: mirror.Stores{Source: srv.URL}}, []string{first, second}, nil, nil)
	if runs[0].Err != nil {
		t.Fatalf("first: %v", runs[0].Err)
	}
	if runs[1].Err != nil || !runs[1].Report.OK() {
		t.Fatalf("second: %v %+v", runs[1].Err, runs[1].Report)
	}
	fdltest.AssertMirrored(t, up, second, nil)
	// The damaged files cost the upstream what they cost a run of one
	// sink into an empty folder.
	alone := testserver.HTTP(t, up)
	if rep, err := mirror.Run(ctx, mirror.Job{Stores: mirror.Stores{Source: alone.URL, Sink: filepath.Join(t.TempDir(), "alone")}}, nil, nil); err != nil || !rep.OK() {
		t.Fatalf("alone: %v %+v", err, rep)
	}
	for _, f := range []string{badData, badCatalog} {
		if got, want := srv.RequestsFor("/"+f), alone.RequestsFor("/"+f); got != want || got == 0 {
			t.Errorf("the damaged %s: %d requests upstream, %d for a sink alone", f, got, want)
		}
	}
	for _, f := range g.DataFiles {
		if n := srv.RequestsFor("/" + f); f != badData && n != 0 {
			t.Errorf("data file %s: %d requests upstream; the first sink holds it", f, n)
		}
	}
}

// Each line of a run of two sinks names its sink once: the run names the
// sink it writes to, and the lock's lines (which name their store
// themselves) do not add a second `sink`.
func TestTwoSinksLogEachLinesSinkOnce(t *testing.T) {
	up := filepath.Join(t.TempDir(), "up")
	fdltest.Generate(t, up, generate.Options{Versions: 2, FastParquet: true})
	srv := testserver.HTTP(t, up)
	sinks := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	core, logs := observer.New(zap.DebugLevel)

	runs := mirror.RunSinks(context.Background(), mirror.Job{Stores: mirror.Stores{Source: srv.URL}}, sinks, zap.New(core), nil)
	for i, r := range runs {
		if r.Err != nil || !r.Report.OK() {
			t.Fatalf("sink %d: %v %+v", i, r.Err, r.Report)
		}
	}
	locked := map[string]bool{}
	for _, e := range logs.All() {
		var named []string
		for _, f := range e.Context {
			if f.Key == "sink" {
				named = append(named, f.String)
			}
		}
		if len(named) > 1 {
			t.Errorf("%q names the sink %d times: %q", e.Message, len(named), named)
		}
		if e.Message == "took the lock" {
			if len(named) == 0 {
				t.Errorf("%q names no sink", e.Message)
				continue
			}
			locked[named[0]] = true
		}
	}
	for _, s := range sinks {
		if !locked[s] {
			t.Errorf("no line says the run took the lock of sink %s (lines: %d)", s, logs.Len())
		}
	}
}

// A fan-out into object stores: an S3 sink (Versity) and a GCS sink
// (fake-gcs-server) first, then a local one, from an HTTP upstream. The
// upstream serves each data file once, the local sink's copies come from
// the object-store sinks before it, and each sink, mirrored back to a
// folder, is the upstream's copy.
func TestSinksOnS3AndGCSServeTheSinksAfterThem(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts Versity and fake-gcs-server")
	}
	s3 := testserver.S3(t)
	gcs := testserver.GCS(t)
	parent := t.TempDir()
	up := filepath.Join(parent, "up")
	g := fdltest.Generate(t, up, generate.Options{Versions: 3, FilesPerVersion: 3, FastParquet: true, Tags: true})
	ctx := context.Background()
	srv := testserver.HTTP(t, up)
	sinks := []string{s3.URL(s3.Bucket(t), "fan"), gcs.URL(gcs.Bucket(t), "fan"), filepath.Join(parent, "local")}

	runs := mirror.RunSinks(ctx, mirror.Job{Stores: mirror.Stores{Source: srv.URL}}, sinks, nil, nil)
	for i, r := range runs {
		if r.Err != nil || r.Report == nil || !r.Report.OK() {
			t.Fatalf("sink %d (%s): %v %+v", i, sinks[i], r.Err, r.Report)
		}
		if r.Report.FilesCopied != runs[0].Report.FilesCopied {
			t.Errorf("sink %d copied %d files, the first %d", i, r.Report.FilesCopied, runs[0].Report.FilesCopied)
		}
	}
	srv.AssertEachAskedOnce(t, g.DataFiles)

	fdltest.AssertMirrored(t, up, sinks[2], nil)
	for i, s := range sinks[:2] {
		back := filepath.Join(parent, fmt.Sprintf("back-%d", i))
		rep, err := mirror.Run(ctx, mirror.Job{Stores: mirror.Stores{Source: s, Sink: back}}, nil, nil)
		if err != nil || !rep.OK() {
			t.Fatalf("mirroring %s back: %v %+v", s, err, rep)
		}
		fdltest.AssertMirrored(t, up, back, nil)
	}
}
