package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// Interop: repositories built around the real catalogs that DuckDB's own
// DuckLake extension wrote (../shared/fixtures/ducklake).

func fixtureRepo(t *testing.T, dir, name string, addFiles int) *generate.Repo {
	t.Helper()
	fx := fdltest.SharedFixtures(t)
	parquet := ""
	if name == "delete_ignore_extra_columns" {
		parquet = filepath.Join(fx, name)
	}
	r, err := generate.FromFixture(context.Background(), filepath.Join(fx, name+".db.gz"), parquet, dir, addFiles, generate.Options{})
	if err != nil {
		t.Fatalf("building a repository around %s: %v", name, err)
	}
	return r
}

func TestInteropMirrorsDuckLake01WithAddedFiles(t *testing.T) {
	_, up, sink := layout(t)
	fixtureRepo(t, up, "v01", 3)
	rep, res := syncJSON(t, up, sink)
	if res.code != 0 {
		t.Fatalf("exit %d: %+v\n%s", res.code, rep.Refused, res.stderr)
	}
	fdltest.AssertMirrored(t, up, sink, nil)
	if p := fdltest.Complete(t, sink); len(p) > 0 {
		t.Error(p)
	}
}

func TestInteropMirrorsDuckLake04WithInlinedData(t *testing.T) {
	_, up, sink := layout(t)
	fixtureRepo(t, up, "v04", 0)
	if rep, res := syncJSON(t, up, sink); res.code != 0 {
		t.Fatalf("exit %d: %+v\n%s", res.code, rep.Refused, res.stderr)
	}
	fdltest.AssertMirrored(t, up, sink, nil)
}

// The fixture's delete file is 1,111 bytes on disk while its catalog
// records 903: DuckDB trusts the record, so the file is corrupt for
// readers, and the version must be refused, naming the file.
func TestInteropRefusesTheDuckLake03DeleteFileOfTheWrongSize(t *testing.T) {
	_, up, sink := layout(t)
	r := fixtureRepo(t, up, "delete_ignore_extra_columns", 0)
	res := refusal(t, up, sink, "ducklake-01995275-4693-7c2b-bde2-2a1abf7df260-delete.parquet", "903")
	assertNotPublished(t, sink, r.Versions[0])
	if readRef(t, sink, "refs/heads/main") != "" {
		t.Errorf("main was published to the refused version\n%s", res.stdout)
	}
}
