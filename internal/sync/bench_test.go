package sync_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	gosync "sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/counting"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// The engine's own benchmarks, in-process, on a local disk: a full mirror
// and a no-op rerun of a generated repository, with the store calls of
// each run reported beside the time. `make bench` (cmd/fdl-bench) compares
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
	rep, err = syncStores(context.Background(), cs, cd, fdlsync.Options{Concurrency: 8})
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

// BenchmarkNoopRerunS3ManyRefs is a no-op rerun from one S3 bucket to
// another on the test gateway, of a small repository with many refs
// (FDL_BENCH_REFS tags besides main, default 20,000): what it costs is
// reading the refs on both sides (issue 14: 25 s before refs were read
// concurrently and known ones skipped).
//
//	FDL_BENCH_REFS=20000 go test -run '^$' -bench NoopRerunS3ManyRefs -benchtime 3x ./internal/sync/
func BenchmarkNoopRerunS3ManyRefs(b *testing.B) {
	n := 20000
	if s := os.Getenv("FDL_BENCH_REFS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 0 {
			b.Fatalf("FDL_BENCH_REFS=%q: want a count", s)
		}
	}
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "upstream")
	g, err := generate.Generate(ctx, dir, generate.Options{Versions: 3, FilesPerVersion: 2, FastParquet: true})
	if err != nil {
		b.Fatal(err)
	}
	refs := repo.Refs{}
	for name, id := range g.Refs {
		refs[name] = id
	}
	for i := range n {
		name := fmt.Sprintf("refs/tags/t%06d", i)
		refs[name] = g.Versions[i%len(g.Versions)]
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, repo.RefFileContent(refs[name]), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, repo.RefsFile), repo.RefsJSON(refs), 0o644); err != nil {
		b.Fatal(err)
	}
	srv := testserver.S3(b)
	up, err := s3.Open(ctx, mustParse(b, srv.URL(srv.Bucket(b), "up")), s3.Options{})
	if err != nil {
		b.Fatal(err)
	}
	mirror, err := s3.Open(ctx, mustParse(b, srv.URL(srv.Bucket(b), "mirror")), s3.Options{})
	if err != nil {
		b.Fatal(err)
	}
	uploadTree(b, dir, up)
	if rep, err := syncStores(ctx, up, mirror, fdlsync.Options{Concurrency: 8}); err != nil || !rep.OK() {
		b.Fatalf("first mirror: %v %+v", err, rep)
	}
	var src, sink counting.Counts
	var rep *fdlsync.Report
	for b.Loop() {
		cs, cd := counting.Wrap(up), counting.WrapBackend(mirror)
		rep, err = syncStores(ctx, cs, cd, fdlsync.Options{Concurrency: 8})
		if err != nil || !rep.OK() {
			b.Fatalf("no-op: %v %+v", err, rep)
		}
		src, sink = cs.Counts(), cd.Counts()
	}
	if len(rep.RefsMoved) != 0 || rep.FilesCopied != 0 {
		b.Fatalf("a rerun with nothing new moved %d refs and copied %d files", len(rep.RefsMoved), rep.FilesCopied)
	}
	report(b, src, sink, rep)
	b.ReportMetric(float64(len(refs)), "refs")
}

func mustParse(b *testing.B, addr string) *url.URL {
	u, err := url.Parse(addr)
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// uploadTree puts every file under dir into st, 32 at a time (setup, not
// measured: the engine writes refs one at a time).
func uploadTree(b *testing.B, dir string, st backend.Backend) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	var wg gosync.WaitGroup
	slots := make(chan struct{}, 32)
	errs := make(chan error, len(names))
	for _, name := range names {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
			if err == nil {
				err = st.Put(context.Background(), name, bytes.NewReader(data), int64(len(data)))
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}
