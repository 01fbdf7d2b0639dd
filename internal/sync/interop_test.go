package sync_test

import (
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// Interop: repositories built around the real catalogs that DuckDB's own
// DuckLake extension wrote (../shared/fixtures/ducklake).

func TestInteropMirrorsDuckLake01WithAddedFiles(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	fdltest.FixtureRepo(t, up, "v01", 3)
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
	if p := fdltest.Complete(t, mirror); len(p) > 0 {
		t.Error(p)
	}
}

func TestInteropMirrorsDuckLake04WithInlinedData(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	fdltest.FixtureRepo(t, up, "v04", 0)
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
}

// The fixture's delete file is 1,111 bytes on disk while its catalog
// records 903: DuckDB trusts the record, so the file is corrupt for
// readers, and the version must be refused, naming the file.
func TestInteropRefusesTheDuckLake03DeleteFileOfTheWrongSize(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.FixtureRepo(t, up, "delete_ignore_extra_columns", 0)
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	assertRefused(t, rep, fdlsync.ReasonSizeMismatch, "ducklake-01995275-4693-7c2b-bde2-2a1abf7df260-delete.parquet", "903")
	fdltest.AssertNotPublished(t, mirror, r.Versions[0])
	if fdltest.ReadRef(t, mirror, "refs/heads/main") != "" {
		t.Errorf("main was published to the refused version: %+v", rep.RefsMoved)
	}
}
