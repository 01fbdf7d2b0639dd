package sync_test

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// What a run publishes: the upstream byte for byte, nothing twice, and
// nothing outside the mirror.

func TestRunMirrorsARepositoryByteForByte(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts generate.Options
	}{
		{"layout 0.3 with deletes, removed files and tags", generate.Options{FastParquet: true, Versions: 4, FilesPerVersion: 3, DeleteFiles: true, RemoveFiles: true, Tags: true, ExtraFiles: true, ScheduledForDeletion: true}},
		{"layout 0.1", generate.Options{FastParquet: true, Versions: 3, Layout: "0.1"}},
		{"non-default data_dir", generate.Options{FastParquet: true, Versions: 2, DataDir: "lake/files/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, up, mirror := fdltest.Layout(t)
			r := fdltest.Generate(t, up, tc.opts)
			// An unknown file at the root: readers ignore it, a mirror
			// neither copies nor requires it.
			fdltest.WriteFile(t, filepath.Join(up, "README.txt"), "hello")

			rep := mustRun(t, up, mirror, fdlsync.Options{})
			if !rep.OK() {
				t.Fatalf("refused: %+v", rep.Refused)
			}
			if len(rep.VersionsPublished) != len(r.Versions) {
				t.Errorf("published %d versions, want %d", len(rep.VersionsPublished), len(r.Versions))
			}
			fdltest.AssertMirrored(t, up, mirror, func(n string) bool { return n == "README.txt" })
			if p := fdltest.Complete(t, mirror); len(p) > 0 {
				t.Errorf("mirror does not verify: %v", p)
			}
			if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
				t.Errorf("written outside the mirror: %v", extra)
			}
		})
	}
}

func TestRerunRewritesNothingAndOpensNoCatalog(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 3, FilesPerVersion: 2, Tags: true})
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run refused: %+v", rep.Refused)
	}
	before := fdltest.States(t, mirror)
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.OK() {
		t.Fatalf("rerun refused: %+v", rep.Refused)
	}
	if rep.FilesCopied != 0 || len(rep.RefsMoved) != 0 || rep.CatalogsRead != 0 {
		t.Errorf("rerun copied %d files, moved %d refs, read %d catalogs; want none", rep.FilesCopied, len(rep.RefsMoved), rep.CatalogsRead)
	}
	for name, st := range fdltest.States(t, mirror) {
		if strings.HasPrefix(name, ".fdl-mirror/") {
			continue
		}
		if before[name] != st {
			t.Errorf("rerun rewrote %s", name)
		}
	}
}

func TestRunFollowsANewUpstreamVersion(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	opts := generate.Options{FastParquet: true, Versions: 2, FilesPerVersion: 2}
	fdltest.Generate(t, up, opts)
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run refused: %+v", rep.Refused)
	}
	id, err := generate.AddVersion(context.Background(), up, 3, opts)
	if err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.OK() {
		t.Fatalf("second run refused: %+v", rep.Refused)
	}
	if got := fdltest.ReadRef(t, mirror, "refs/heads/main"); got != id {
		t.Errorf("main is %q in the mirror, want the new version %s", got, id)
	}
	// 3 data files + the version's directory (catalog, record, at least) —
	// and not the files that were there already.
	if rep.FilesCopied < 5 || rep.FilesCopied > 8 || rep.CatalogsRead != 1 {
		t.Errorf("copied %d files and read %d catalogs for one new version of 3 files", rep.FilesCopied, rep.CatalogsRead)
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
}

func TestDryRunPlansAndWritesNothing(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 2})
	rep := mustRun(t, up, mirror, fdlsync.Options{DryRun: true})
	if !rep.OK() || !rep.DryRun {
		t.Fatalf("dry run: refused %+v, dry_run %v", rep.Refused, rep.DryRun)
	}
	if !slices.Contains(rep.Planned, "refs/heads/main") {
		t.Errorf("the plan lacks refs/heads/main: %v", rep.Planned)
	}
	if files := fdltest.Files(t, mirror); len(files) != 0 {
		t.Errorf("dry run wrote %d files", len(files))
	}
}

// A host marks a version past its retention period with expired.json, in a
// version the mirror already has: the next run copies the marker, and
// nothing else.
func TestExpiredMarkerAddedToAMirroredVersionIsCopied(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 2})
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run refused: %+v", rep.Refused)
	}
	marker := filepath.Join("versions", r.Versions[0], "expired.json")
	fdltest.WriteFile(t, filepath.Join(up, marker), `{"expired": "2026-11-30"}`)
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.OK() || rep.FilesCopied != 1 || rep.CatalogsRead != 0 {
		t.Fatalf("refused %+v, copied %d files, read %d catalogs; want the marker alone", rep.Refused, rep.FilesCopied, rep.CatalogsRead)
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
}

// The report compares every upstream ref with the mirror after the run:
// the ref whose version was refused is behind with the mirror's old value,
// the others current. The daemon's status page shows this list.
func TestReportComparesEveryRef(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 3, Tags: true})
	bad := r.Versions[len(r.Versions)-1] // refs/heads/main's version
	fdltest.Append(t, filepath.Join(up, "versions", bad, "ducklake.duckdb"), []byte{0})

	rep := mustRun(t, up, mirror, fdlsync.Options{})
	assertRefused(t, rep, fdlsync.ReasonSHA256, bad)
	if len(rep.Refs) != len(r.Refs) {
		t.Fatalf("report compares %d refs, upstream has %d: %+v", len(rep.Refs), len(r.Refs), rep.Refs)
	}
	behind := 0
	for _, ref := range rep.Refs {
		if ref.Upstream != r.Refs[ref.Ref] {
			t.Errorf("%s: upstream %s in the report, %s upstream", ref.Ref, ref.Upstream, r.Refs[ref.Ref])
		}
		if mine := fdltest.ReadRef(t, mirror, ref.Ref); ref.Mirror != mine {
			t.Errorf("%s: mirror %q in the report, %q in the mirror", ref.Ref, ref.Mirror, mine)
		}
		if ref.Behind != (ref.Mirror != ref.Upstream) {
			t.Errorf("%s: behind %v with mirror %q and upstream %q", ref.Ref, ref.Behind, ref.Mirror, ref.Upstream)
		}
		if ref.Behind {
			behind++
		}
	}
	if behind != rep.Lag || behind == 0 || behind == len(rep.Refs) {
		t.Errorf("%d refs behind, lag %d, of %d; want main behind and the tags current: %+v", behind, rep.Lag, len(rep.Refs), rep.Refs)
	}
}

// A data file whose name is 253 bytes long (245 + ".parquet", near the 255
// of ext4 and most others) is mirrored: the temporary file it is written
// through must not have a longer name than the file itself.
func TestDataFileNamedNearTheFileSystemLimitIsMirrored(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1, FilesPerVersion: 2})
	old := r.DataFiles[0]
	long := strings.Repeat("x", 245) + ".parquet"
	if len(long) != 253 {
		t.Fatalf("name of %d bytes", len(long))
	}
	if err := os.Rename(filepath.Join(up, old), filepath.Join(up, path.Dir(old), long)); err != nil {
		t.Fatal(err)
	}
	fdltest.RewriteCatalog(t, up, r.Versions[0], "UPDATE ducklake_data_file SET path = replace(path, '"+path.Base(old)+"', '"+long+"')")

	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
	if _, err := os.Stat(filepath.Join(mirror, path.Dir(old), long)); err != nil {
		t.Errorf("the long-named file is not in the mirror: %v", err)
	}
	if problems := fdltest.Complete(t, mirror); len(problems) > 0 {
		t.Errorf("mirror incomplete: %v", problems)
	}
}

// catalog_formats as the spec's fdl.json example writes it, mirrored over
// HTTP, which cannot list: the alternate catalogs are found by the names
// the entries give, catalogs/ducklake-<version>.duckdb, and the other
// reading, catalogs/<version>.duckdb.
func TestRunOverHTTPFetchesTheSpecsCatalogFormats(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 2})
	fdltest.EditJSON(t, filepath.Join(up, "fdl.json"), func(doc map[string]any) {
		doc["catalog_formats"] = []map[string]string{{"ducklake": "1.1"}, {"ducklake": "1.0", "until": "2027-03-31"}}
	})

	// Version 1 carries both formats under the ducklake- names; version 2
	// one of them under the bare version. The bytes are the main catalog's
	// (an alternate catalog lists the same files here).
	alternates := []string{
		"versions/" + r.Versions[0] + "/catalogs/ducklake-1.1.duckdb",
		"versions/" + r.Versions[0] + "/catalogs/ducklake-1.0.duckdb",
		"versions/" + r.Versions[1] + "/catalogs/1.0.duckdb",
	}
	for _, name := range alternates {
		id := filepath.Base(filepath.Dir(filepath.Dir(name)))
		b, err := os.ReadFile(filepath.Join(up, "versions", id, "ducklake.duckdb"))
		if err != nil {
			t.Fatal(err)
		}
		fdltest.WriteFile(t, filepath.Join(up, filepath.FromSlash(name)), string(b))
	}

	web := testserver.HTTP(t, up)
	rep, err := syncAddr(t, web.URL, mirror, fdlsync.Options{})
	if err != nil || !rep.OK() {
		t.Fatalf("run: %v; refused %+v", err, rep.Refused)
	}
	files := fdltest.Files(t, mirror)
	for _, name := range alternates {
		if _, ok := files[name]; !ok {
			t.Errorf("mirror lacks %s", name)
		}
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
	if p := fdltest.Complete(t, mirror); len(p) > 0 {
		t.Errorf("mirror does not verify: %v", p)
	}
}
