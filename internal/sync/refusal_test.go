package sync_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// What the engine refuses from a hostile or broken upstream: each test
// names the refusal's Reason, checks its message names the culprit, and
// that nothing refused was published. A refused version leaves the rest
// of the repository mirrored.

// assertRefused fails unless the report holds a refusal for reason whose
// message, file or ref, read together, contain every culprit; it returns
// that refusal.
func assertRefused(t *testing.T, rep *fdlsync.Report, reason string, culprit ...string) fdlsync.Refusal {
	t.Helper()
	for _, r := range rep.Refused {
		if r.Reason != reason {
			continue
		}
		text := r.Ref + " " + r.File + " " + r.Message
		if !slices.ContainsFunc(culprit, func(c string) bool { return !strings.Contains(text, c) }) {
			return r
		}
	}
	t.Fatalf("no %s refusal naming %q: %+v", reason, culprit, rep.Refused)
	return fdlsync.Refusal{}
}

// assertFatal fails unless err is a FatalError whose message contains
// every culprit: the run stopped as a whole.
func assertFatal(t *testing.T, rep *fdlsync.Report, err error, culprit ...string) {
	t.Helper()
	var fatal *fdlsync.FatalError
	if !errors.As(err, &fatal) {
		t.Fatalf("error %v, want a FatalError; report %+v", err, rep)
	}
	for _, c := range culprit {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error %q does not name %q", err, c)
		}
	}
}

func TestRefWhoseContentClimbsOutIsRefused(t *testing.T) {
	parent, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1})
	fdltest.WriteFile(t, filepath.Join(up, "refs/heads/evil"), "../../../escaped\n")
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	assertRefused(t, rep, fdlsync.ReasonBadRef, "refs/heads/evil", "version ID")
	if fdltest.ReadRef(t, mirror, "refs/heads/evil") != "" {
		t.Error("the bad ref was published")
	}
	if fdltest.ReadRef(t, mirror, "refs/heads/main") != r.Versions[0] {
		t.Error("the good ref was not mirrored beside the bad one")
	}
	if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
		t.Errorf("written outside the mirror: %v", extra)
	}
}

func TestVersionIDOfTwoSegmentsIsRefused(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1})
	fdltest.WriteFile(t, filepath.Join(up, "refs/heads/two"), r.Versions[0]+"/x\n")
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	assertRefused(t, rep, fdlsync.ReasonBadRef, "refs/heads/two", "one path segment")
	if fdltest.ReadRef(t, mirror, "refs/heads/two") != "" {
		t.Error("the bad ref was published")
	}
}

func TestUnknownMajorVersionStopsTheRun(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1})
	fdltest.WriteFile(t, filepath.Join(up, "fdl.json"), `{"fdl": "1.0", "id": "x"}`)
	rep, err := runLocal(t, up, mirror, fdlsync.Options{})
	assertFatal(t, rep, err, "fdl.json", "unknown major spec version")
	if files := fdltest.Files(t, mirror); len(files) != 0 {
		t.Errorf("published %d files from a repository of an unknown version", len(files))
	}
}

func TestSinkHoldingAnotherRepositoryStopsTheRun(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1})
	other := `{"fdl": "0.1", "id": "0190aaaa-0000-7000-8000-000000000000"}`
	fdltest.WriteFile(t, filepath.Join(mirror, "fdl.json"), other)
	rep, err := runLocal(t, up, mirror, fdlsync.Options{})
	assertFatal(t, rep, err, "another repository", "0190aaaa-0000-7000-8000-000000000000")
	files := fdltest.Files(t, mirror)
	if len(files) != 1 || string(files["fdl.json"]) != other {
		t.Errorf("the other repository's mirror was changed: %d files", len(files))
	}
}

func TestTagNeverMoves(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 2, Tags: true})
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run refused: %+v", rep.Refused)
	}
	// Upstream moves tag v1 to the newer version.
	fdltest.WriteFile(t, filepath.Join(up, "refs/tags/v1"), r.Versions[1]+"\n")
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	assertRefused(t, rep, fdlsync.ReasonTagMoved, "refs/tags/v1", "never move")
	if got := fdltest.ReadRef(t, mirror, "refs/tags/v1"); got != r.Versions[0] {
		t.Errorf("tag v1 is %s in the mirror, want it kept at %s", got, r.Versions[0])
	}
}

func TestCatalogNotMatchingItsSHA256IsRefused(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 2})
	bad := r.Versions[1]
	fdltest.Append(t, filepath.Join(up, "versions", bad, "ducklake.duckdb"), []byte{0})
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	assertRefused(t, rep, fdlsync.ReasonSHA256, bad, "sha256 mismatch")
	// The ref to it is refused for its version, naming why.
	assertRefused(t, rep, fdlsync.ReasonVersion, "refs/heads/main", bad, fdlsync.ReasonSHA256)
	fdltest.AssertNotPublished(t, mirror, bad)
	if got := fdltest.ReadRef(t, mirror, "refs/heads/main"); got != "" {
		t.Errorf("main moved to %q although its version was refused", got)
	}
	if !slices.Contains(fdltest.Published(t, mirror), r.Versions[0]) {
		t.Error("the good ancestor was not mirrored")
	}
}

func TestMissingDataFileIsRefused(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1, FilesPerVersion: 2})
	victim := r.DataFiles[0]
	if err := os.Remove(filepath.Join(up, victim)); err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	assertRefused(t, rep, fdlsync.ReasonMissingFile, victim, "missing")
	fdltest.AssertNotPublished(t, mirror, r.Versions[0])
	if fdltest.ReadRef(t, mirror, "refs/heads/main") != "" {
		t.Error("main was published to a version with a missing file")
	}
}

func TestDataFileOfTheWrongSizeIsRefused(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1, FilesPerVersion: 2})
	victim := r.DataFiles[0]
	fdltest.Append(t, filepath.Join(up, victim), []byte("extra"))
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	assertRefused(t, rep, fdlsync.ReasonSizeMismatch, victim, "bytes")
	fdltest.AssertNotPublished(t, mirror, r.Versions[0])
	if _, err := os.Stat(filepath.Join(mirror, victim)); err == nil {
		t.Error("the wrong-sized file was written into the mirror")
	}
}

func TestDataDirLeavingTheRootStopsTheRun(t *testing.T) {
	parent, up, mirror := fdltest.Layout(t)
	fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1})
	fdltest.WriteFile(t, filepath.Join(up, "fdl.json"), `{"fdl": "0.1", "id": "x", "data_dir": "../outside/"}`)
	rep, err := runLocal(t, up, mirror, fdlsync.Options{})
	assertFatal(t, rep, err, "data_dir", "../outside/")
	if files := fdltest.Files(t, mirror); len(files) != 0 {
		t.Errorf("published %d files", len(files))
	}
	if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
		t.Errorf("written outside the mirror: %v", extra)
	}
}

func TestCatalogPathOutsideItsDataPathIsRefused(t *testing.T) {
	for _, tc := range []struct{ name, path, culprit string }{
		{"relative with ..", "../../../etc/passwd", ".."},
		{"absolute elsewhere", "/etc/passwd", "outside the catalog's data path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, up, mirror := fdltest.Layout(t)
			r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1})
			rel := "true"
			if strings.HasPrefix(tc.path, "/") {
				rel = "false"
			}
			fdltest.RewriteCatalog(t, up, r.Versions[0], "UPDATE ducklake_data_file SET path = '"+tc.path+"', path_is_relative = "+rel+" WHERE data_file_id = (SELECT min(data_file_id) FROM ducklake_data_file)")
			rep := mustRun(t, up, mirror, fdlsync.Options{})
			assertRefused(t, rep, fdlsync.ReasonCatalog, r.Versions[0], tc.culprit)
			fdltest.AssertNotPublished(t, mirror, r.Versions[0])
			if extra := fdltest.Outside(t, parent, "upstream", "mirror"); len(extra) > 0 {
				t.Errorf("written outside the mirror: %v", extra)
			}
		})
	}
}

func TestMalformedJSONIsRefused(t *testing.T) {
	t.Run("fdl.json", func(t *testing.T) {
		_, up, mirror := fdltest.Layout(t)
		fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 1})
		fdltest.WriteFile(t, filepath.Join(up, "fdl.json"), `{"fdl": "0.1",`)
		rep, err := runLocal(t, up, mirror, fdlsync.Options{})
		assertFatal(t, rep, err, "fdl.json", "malformed JSON")
		if files := fdltest.Files(t, mirror); len(files) != 0 {
			t.Errorf("published %d files", len(files))
		}
	})
	t.Run("version.json", func(t *testing.T) {
		_, up, mirror := fdltest.Layout(t)
		r := fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 1})
		fdltest.WriteFile(t, filepath.Join(up, "versions", r.Versions[0], "version.json"), `{"parents": [`)
		rep := mustRun(t, up, mirror, fdlsync.Options{})
		assertRefused(t, rep, fdlsync.ReasonRecord, r.Versions[0], "version.json", "malformed JSON")
		fdltest.AssertNotPublished(t, mirror, r.Versions[0])
		if fdltest.ReadRef(t, mirror, "refs/heads/main") != "" {
			t.Error("main was published")
		}
	})
}

// An immutable file already in the mirror with another size is an error,
// reported and left alone: never overwritten.
func TestImmutableFileOfAnotherSizeIsNeverOverwritten(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1, FilesPerVersion: 2})
	planted := filepath.Join(mirror, filepath.FromSlash(r.DataFiles[0]))
	fdltest.WriteFile(t, planted, "not the upstream bytes")
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	assertRefused(t, rep, fdlsync.ReasonSizeMismatch, r.DataFiles[0], "exists in the sink", "left alone")
	if b, _ := os.ReadFile(planted); string(b) != "not the upstream bytes" {
		t.Error("the immutable file was overwritten")
	}
	fdltest.AssertNotPublished(t, mirror, r.Versions[0])
}

// Versions whose parents lead back to themselves cannot be published
// parents first: refused, named, and the rest of the repository mirrored.
func TestCycleOfVersionsIsRefused(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.Generate(t, up, generate.Options{FastParquet: true, Versions: 3})
	first, second := r.Versions[0], r.Versions[1]
	fdltest.EditJSON(t, filepath.Join(up, "versions", first, "version.json"), func(doc map[string]any) {
		doc["parents"] = []string{second}
	})
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	assertRefused(t, rep, fdlsync.ReasonRecord, first, "cycle")
	assertRefused(t, rep, fdlsync.ReasonRecord, second, "cycle")
	for _, id := range r.Versions {
		fdltest.AssertNotPublished(t, mirror, id)
	}
	if fdltest.ReadRef(t, mirror, "refs/heads/main") != "" {
		t.Error("main was published above a cycle")
	}
}

// A write into the sink that fails for good (here a file stands where the
// version's folder must go) refuses that version as copy-failed, naming
// it; the other versions and refs of the run are still mirrored.
func TestSinkWriteThatFailsIsRefusedAsCopyFailed(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 2})
	good, blocked := r.Versions[0], r.Versions[1]
	fdltest.WriteFile(t, filepath.Join(up, "refs/heads/good"), good+"\n")
	fdltest.WriteFile(t, filepath.Join(mirror, "versions", blocked), "in the way")
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	got := assertRefused(t, rep, fdlsync.ReasonCopy, blocked)
	if got.Version != blocked {
		t.Errorf("the refusal is of version %q, want %s", got.Version, blocked)
	}
	assertRefused(t, rep, fdlsync.ReasonVersion, "refs/heads/main", blocked, fdlsync.ReasonCopy)
	if fdltest.ReadRef(t, mirror, "refs/heads/main") != "" {
		t.Error("main was published to a version the sink did not take")
	}
	if got := fdltest.ReadRef(t, mirror, "refs/heads/good"); got != good {
		t.Errorf("refs/heads/good is %q, want %s", got, good)
	}
	if b, _ := os.ReadFile(filepath.Join(mirror, "versions", blocked)); string(b) != "in the way" {
		t.Error("the file in the way was replaced")
	}
}
