package sync_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// A catalog or a record an upstream made hostile is refused quickly, and
// the other refs of the same run are still mirrored. (The command's peak
// memory on the same catalogs is measured in cmd/fdl-mirror.)

// hostileCatalogs are catalogs rewritten against the reader: a view that
// would list 10^15 or 30 million files, and a table past catalog_max_files.
var hostileCatalogs = []struct {
	name, reason, want string
	maxFiles           int64
	stmts              []string
}{
	{"a view over range(1e15)", fdlsync.ReasonCatalog, "main.ducklake_data_file is a view", 0, []string{
		"DROP TABLE ducklake_data_file",
		"CREATE VIEW ducklake_data_file AS SELECT i AS data_file_id, 1::BIGINT AS table_id, 1::BIGINT AS begin_snapshot, NULL::BIGINT AS end_snapshot, " +
			"'f' || i || '.parquet' AS path, true AS path_is_relative, 10::BIGINT AS file_size_bytes FROM range(1e15::BIGINT) t(i)",
	}},
	{"a view over 30 million rows", fdlsync.ReasonCatalog, "main.ducklake_data_file is a view", 0, []string{
		"DROP TABLE ducklake_data_file",
		"CREATE VIEW ducklake_data_file AS SELECT i AS data_file_id, 1::BIGINT AS table_id, 1::BIGINT AS begin_snapshot, NULL::BIGINT AS end_snapshot, " +
			"'f' || i || '.parquet' AS path, true AS path_is_relative, 10::BIGINT AS file_size_bytes FROM range(30000000) t(i)",
	}},
	{"a table of 300000 files", fdlsync.ReasonLimit, "catalog_max_files", 100000, []string{
		"INSERT INTO ducklake_data_file (data_file_id, table_id, begin_snapshot, path, path_is_relative, file_size_bytes) " +
			"SELECT 1000 + i, 1, 1, 'extra-' || i || '.parquet', true, 10 FROM range(300000) t(i)",
	}},
}

func TestHostileCatalogIsRefusedAndTheOtherRefsMirrored(t *testing.T) {
	for _, tc := range hostileCatalogs {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.reason == fdlsync.ReasonLimit {
				t.Skip("-short: 300,000 catalog rows; TestCatalogPastALimitIsRefused keeps the limit's refusal")
			}
			parent, up, mirror := fdltest.Layout(t)
			r := fdltest.GenerateCopy(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, FastParquet: true})
			good, evil := r.Versions[0], r.Versions[1]
			fdltest.WriteFile(t, filepath.Join(up, "refs", "heads", "good"), good+"\n")
			fdltest.RewriteCatalog(t, up, evil, strings.Join(tc.stmts, "; "))

			start := time.Now()
			rep := mustRun(t, up, mirror, fdlsync.Options{CatalogLimits: catalog.Limits{MaxFiles: tc.maxFiles}})
			took := time.Since(start)

			catalogName := "versions/" + evil + "/ducklake.duckdb"
			got := assertRefused(t, rep, tc.reason, catalogName, tc.want)
			if got.Version != evil {
				t.Errorf("the refusal is of version %q, want %s", got.Version, evil)
			}
			for _, x := range rep.Refused {
				if strings.Contains(x.Message, os.TempDir()) || strings.Contains(x.Message, "catalog-") {
					t.Errorf("a refusal names the temporary copy: %s", x.Message)
				}
			}
			fdltest.AssertNotPublished(t, mirror, evil)
			if fdltest.ReadRef(t, mirror, "refs/heads/main") != "" {
				t.Error("main was published to the hostile version")
			}
			if got := fdltest.ReadRef(t, mirror, "refs/heads/good"); got != good {
				t.Errorf("the other ref of the run was not mirrored: refs/heads/good is %q, want %s", got, good)
			}
			if took > 30*time.Second {
				t.Errorf("refusing took %s", took)
			}
			if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
				t.Errorf("written outside the mirror: %v", extra)
			}
		})
	}
}

// A catalog crafted to crash DuckDB (bytes changed, block checksums and
// the record's sha256 mended) crashes only its reader: the version is
// refused as catalog-reader-failed naming the catalog and the signal,
// the other refs of the run are mirrored, and the run itself goes on.
func TestCatalogThatCrashesItsReaderIsRefusedAndTheOtherRefsMirrored(t *testing.T) {
	parent, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, FastParquet: true})
	good, evil := r.Versions[0], r.Versions[1]
	fdltest.WriteFile(t, filepath.Join(up, "refs", "heads", "good"), good+"\n")
	fdltest.ReplaceCatalog(t, up, evil, fdltest.CrashingCatalog(t))

	rep := mustRun(t, up, mirror, fdlsync.Options{})
	catalogName := "versions/" + evil + "/ducklake.duckdb"
	got := assertRefused(t, rep, fdlsync.ReasonReaderFailed, catalogName, "its reader failed", "SIG")
	if got.Version != evil {
		t.Errorf("the refusal is of version %q, want %s", got.Version, evil)
	}
	fdltest.AssertNotPublished(t, mirror, evil)
	if fdltest.ReadRef(t, mirror, "refs/heads/main") != "" {
		t.Error("main was published to the version whose catalog crashed its reader")
	}
	if got := fdltest.ReadRef(t, mirror, "refs/heads/good"); got != good {
		t.Errorf("the other ref of the run was not mirrored: refs/heads/good is %q, want %s", got, good)
	}
	if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
		t.Errorf("written outside the mirror: %v", extra)
	}
}

// A version.json larger than a record needs is refused, not held in
// memory, and the other refs of the run are still mirrored.
func TestRecordLargerThan1MiBIsRefused(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.Generate(t, up, generate.Options{Versions: 2, FilesPerVersion: 1, FastParquet: true})
	good, evil := r.Versions[0], r.Versions[1]
	fdltest.WriteFile(t, filepath.Join(up, "refs", "heads", "good"), good+"\n")
	fdltest.EditJSON(t, filepath.Join(up, "versions", evil, "version.json"), func(rec map[string]any) {
		rec["message"] = strings.Repeat("x", 3<<19) // 1.5 MiB
	})
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	got := assertRefused(t, rep, fdlsync.ReasonRecord, "versions/"+evil+"/version.json is larger than the 1048576 bytes")
	if got.Version != evil {
		t.Errorf("the refusal is of version %q, want %s", got.Version, evil)
	}
	fdltest.AssertNotPublished(t, mirror, evil)
	if got := fdltest.ReadRef(t, mirror, "refs/heads/good"); got != good {
		t.Errorf("refs/heads/good is %q, want %s", got, good)
	}
}

// Each catalog limit refuses the version past it, naming the limit, and
// the run goes on with the others: a catalog larger than catalog_max_size
// (seen in a listing, or while fetching from a store that cannot list)
// and one listing more files than catalog_max_files.
func TestCatalogPastALimitIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits catalog.Limits
		want   string
		http   bool
	}{
		{"max size, listed", catalog.Limits{MaxSize: 4096}, "catalog_max_size", false},
		{"max size, fetched over HTTP", catalog.Limits{MaxSize: 4096}, "catalog_max_size", true},
		{"max files", catalog.Limits{MaxFiles: 3}, "catalog_max_files", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, up, mirror := fdltest.Layout(t)
			r := fdltest.GenerateCopy(t, up, generate.Options{Versions: 1, FilesPerVersion: 4, FastParquet: true})
			src := up
			if tc.http {
				src = testserver.HTTP(t, up).URL
			}
			rep, err := syncAddr(t, src, mirror, fdlsync.Options{CatalogLimits: tc.limits})
			if err != nil {
				t.Fatal(err)
			}
			got := assertRefused(t, rep, fdlsync.ReasonLimit, "versions/"+r.Versions[0]+"/ducklake.duckdb", tc.want)
			if got.Version != r.Versions[0] {
				t.Errorf("the refusal is of version %q, want %s", got.Version, r.Versions[0])
			}
			fdltest.AssertNotPublished(t, mirror, r.Versions[0])
			if fdltest.ReadRef(t, mirror, "refs/heads/main") != "" {
				t.Error("main was published to a version past a limit")
			}
		})
	}
}

// A FIFO planted upstream where a data file or a catalog belongs is
// refused as not a regular file, and the run ends: opened for reading
// like a file, it held the run in open(2) until something wrote to it,
// past SIGTERM. Nothing of the version it belongs to is published. A
// listing passes over a FIFO where a ref file belongs: the ref is absent.
func TestFIFOUpstreamIsRefusedNotWaitedOn(t *testing.T) {
	for _, tc := range []struct {
		what   string
		plant  func(r *generate.Repo) string // the FIFO's name in the repository
		reason string
	}{
		{"a data file", func(r *generate.Repo) string { return r.DataFiles[0] }, fdlsync.ReasonCopy},
		{"a catalog", func(r *generate.Repo) string { return "versions/" + r.Versions[0] + "/ducklake.duckdb" }, fdlsync.ReasonCopy},
		{"a ref", func(r *generate.Repo) string { return "refs/heads/main" }, ""},
	} {
		t.Run(tc.what, func(t *testing.T) {
			parent, up, mirror := fdltest.Layout(t)
			r := fdltest.GenerateCopy(t, up, generate.Options{Versions: 1, FilesPerVersion: 3, FastParquet: true})
			name := tc.plant(r)
			path := filepath.Join(up, filepath.FromSlash(name))
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
			type result struct {
				rep *fdlsync.Report
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := runLocal(t, up, mirror, fdlsync.Options{})
				done <- result{rep, err}
			}()
			var res result
			select {
			case res = <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("the run still waits on the FIFO at %s after a minute", name)
			}
			if res.err != nil {
				t.Logf("run: %v", res.err)
			}
			if res.rep == nil {
				t.Fatalf("no report: %v", res.err)
			}
			if tc.reason != "" {
				assertRefused(t, res.rep, tc.reason, name, "not a regular file")
			} else if len(res.rep.Refused) > 0 {
				t.Errorf("refused %+v; want the ref passed over as absent", res.rep.Refused)
			}
			fdltest.AssertNotPublished(t, mirror, r.Versions[0])
			if got := fdltest.ReadRef(t, mirror, "refs/heads/main"); got != "" {
				t.Errorf("main was published: %q", got)
			}
			if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
				t.Errorf("written outside the mirror: %v", extra)
			}
		})
	}
}
