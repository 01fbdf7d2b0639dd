package sync_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/counting"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// The engine's own benchmarks, in-process, on a local disk: a full mirror
// and a no-op rerun of a generated repository, with the store calls of
// each run reported beside the time. `make bench` (internal/fstest/fdl-bench) compares
// the built binary with rclone; these are for profiling the engine alone:
//
//	go test -run '^$' -bench . -cpuprofile cpu.out ./internal/sync/
//
// FDL_BENCH_SHAPE sets the repository as VERSIONSxFILES (default 10x200).

// benchRepo generates the repository in a folder removed when the
// benchmark ends (b.Loop runs the benchmark function once).
func benchRepo(b *testing.B) string {
	b.Helper()
	versions, files := 10, 200
	if s := os.Getenv("FDL_BENCH_SHAPE"); s != "" {
		var ok bool
		if versions, files, ok = parseShape(s); !ok {
			b.Fatalf("FDL_BENCH_SHAPE=%q: want VERSIONSxFILES", s)
		}
	}
	dir := filepath.Join(b.TempDir(), "upstream")
	_, err := generate.Generate(context.Background(), dir,
		generate.Options{Versions: versions, FilesPerVersion: files, FastParquet: true})
	if err != nil {
		b.Fatalf("generating the benchmark repository: %v", err)
	}
	return dir
}

func parseShape(s string) (versions, files int, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == 'x' {
			v, err1 := strconv.Atoi(s[:i])
			f, err2 := strconv.Atoi(s[i+1:])
			return v, f, err1 == nil && err2 == nil && v > 0 && f > 0
		}
	}
	return 0, 0, false
}

// mirrorOnce runs the engine from up into dst with counted stores.
func mirrorOnce(b *testing.B, up, dst string) (src, sink counting.Counts, rep *fdlsync.Report) {
	b.Helper()
	s, err := local.Open(up)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	d, err := local.Create(dst)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	cs, cd := counting.Wrap(s), counting.WrapBackend(d)
	rep, err = fdlsync.Run(context.Background(), cs, cd, fdlsync.Options{Concurrency: 8})
	if err != nil {
		b.Fatal(err)
	}
	if !rep.OK() {
		b.Fatalf("refused: %+v", rep.Refused)
	}
	return cs.Counts(), cd.Counts(), rep
}

func report(b *testing.B, src, sink counting.Counts, rep *fdlsync.Report) {
	b.ReportMetric(float64(src.Requests()), "src-calls/op")
	b.ReportMetric(float64(sink.Requests()), "sink-calls/op")
	b.ReportMetric(float64(rep.FilesCopied), "files/op")
	b.ReportMetric(float64(rep.CatalogsRead), "catalogs/op")
}

func BenchmarkFullMirrorLocal(b *testing.B) {
	up := benchRepo(b)
	var src, sink counting.Counts
	var rep *fdlsync.Report
	for i := 0; b.Loop(); i++ {
		dst := filepath.Join(b.TempDir(), "mirror")
		src, sink, rep = mirrorOnce(b, up, dst)
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
	report(b, src, sink, rep)
}

func BenchmarkNoopRerunLocal(b *testing.B) {
	up := benchRepo(b)
	dst := filepath.Join(b.TempDir(), "mirror")
	mirrorOnce(b, up, dst)
	var src, sink counting.Counts
	var rep *fdlsync.Report
	for b.Loop() {
		src, sink, rep = mirrorOnce(b, up, dst)
	}
	if rep.FilesCopied != 0 || rep.CatalogsRead != 0 {
		b.Fatalf("a rerun with nothing new copied %d files and read %d catalogs", rep.FilesCopied, rep.CatalogsRead)
	}
	report(b, src, sink, rep)
}
