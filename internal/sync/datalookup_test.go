package sync_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// What a run asks the mirror about its data files follows how many it
// needs, not how many the mirror holds: a few are asked for one by one,
// and data_dir is listed (once, on an object store) only for many. A
// file there at another size than recorded is found either way.

// objectStore is a mirror in a folder that says its Stat is a request
// (as an object store's is), and records how often data_dir is listed
// and how many data files are asked for alone (dataDirAsks; it lists no
// pages, as the folder says).
type objectStore struct {
	dataDirAsks
}

func (o *objectStore) Properties() backend.Properties {
	p := o.Backend.Properties()
	p.LocalStat = false
	return p
}

// tagTip adds upstream a tag on the tip of main, a version the mirror
// holds from an earlier run: moving the tag there confirms the version's
// files in the mirror. It syncs into mirror as an object store and
// returns the report and that store.
func tagTip(t *testing.T, up, mirror string) (*fdlsync.Report, *objectStore) {
	t.Helper()
	setRefs(t, up, repo.Refs{"refs/tags/t": refOf(t, up, "refs/heads/main")})
	return syncObjectStore(t, up, mirror)
}

// syncObjectStore syncs up into mirror seen as an object store.
func syncObjectStore(t *testing.T, up, mirror string) (*fdlsync.Report, *objectStore) {
	t.Helper()
	var store *objectStore
	rep, err := runLocalThrough(t, up, mirror, fdlsync.Options{Concurrency: 4}, func(b backend.Backend) backend.Backend {
		store = &objectStore{dataDirAsks{Backend: b}}
		return store
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep, store
}

func TestATagOnAVersionOfFewFilesAsksForThemAlone(t *testing.T) {
	up, mirror, g := chain(t)
	rep, store := tagTip(t, up, mirror)
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	if refOf(t, mirror, "refs/tags/t") != g.Versions[2] {
		t.Errorf("tag not mirrored: %q", refOf(t, mirror, "refs/tags/t"))
	}
	if store.lists != 0 {
		t.Errorf("data_dir listed %d times for a version of %d files; want each asked for alone", store.lists, len(g.DataFiles))
	}
	if store.stats < len(g.DataFiles) {
		t.Errorf("%d data files asked for; the version names %d", store.stats, len(g.DataFiles))
	}
}

func TestATagOnAVersionOfManyFilesListsDataOnce(t *testing.T) {
	defer fdlsync.SetMaxStatChecks(1)()
	up, mirror, g := chain(t)
	rep, store := tagTip(t, up, mirror)
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	if store.lists != 1 || store.stats != 0 {
		t.Errorf("data_dir listed %d times and %d files asked for alone, for a version of %d files above the bound; want one listing and nothing asked alone",
			store.lists, store.stats, len(g.DataFiles))
	}
}

// A file of the version in the mirror at another size than its catalog
// records keeps the tag off it, whether the files are asked for alone or
// found in a listing.
func TestATagIsNotMovedOntoAVersionWithAFileOfAnotherSize(t *testing.T) {
	for _, c := range []struct {
		name       string
		statChecks int
	}{{"asked alone", 1000}, {"listed", 1}} {
		t.Run(c.name, func(t *testing.T) {
			defer fdlsync.SetMaxStatChecks(c.statChecks)()
			up, mirror, g := chain(t)
			bad := filepath.Join(mirror, filepath.FromSlash(g.DataFiles[0]))
			if err := os.WriteFile(bad, []byte("short"), 0o644); err != nil {
				t.Fatal(err)
			}
			rep, _ := tagTip(t, up, mirror)
			if refOf(t, mirror, "refs/tags/t") != "" {
				t.Errorf("tag moved onto a version whose %s is 5 bytes in the mirror", g.DataFiles[0])
			}
			refused := false
			for _, r := range rep.Refused {
				refused = refused || (r.Ref == "refs/tags/t" && strings.Contains(r.Message, g.DataFiles[0]))
			}
			if !refused {
				t.Errorf("no refusal of refs/tags/t naming %s: %+v", g.DataFiles[0], rep.Refused)
			}
		})
	}
}

// A version read whole (it has an alternate catalog, so it is not read as
// its difference from its parent) has the files its parent lists
// confirmed in the mirror: on an object store, for a version of a few
// files, each is asked for alone rather than data_dir listed.
func TestAVersionReadWholeConfirmsItsParentsFewFilesAlone(t *testing.T) {
	up, mirror := filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	opts := generate.Options{Versions: 2, FilesPerVersion: 2, FastParquet: true, AlternateCatalog: "1.0"}
	if _, err := generate.Generate(context.Background(), up, opts); err != nil {
		t.Fatal(err)
	}
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run refused: %+v", rep.Refused)
	}
	if _, err := generate.AddVersion(context.Background(), up, 1, opts); err != nil {
		t.Fatal(err)
	}
	rep, store := syncObjectStore(t, up, mirror)
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	if refOf(t, mirror, "refs/heads/main") != refOf(t, up, "refs/heads/main") {
		t.Errorf("main not moved")
	}
	if store.lists != 0 {
		t.Errorf("data_dir listed %d times for a version of a few files", store.lists)
	}
	if store.stats == 0 {
		t.Errorf("no data file asked for; the parent's files must be confirmed")
	}
}

// A first mirror lists its data_dir, which holds nothing yet, once,
// rather than ask for each of the files it is about to copy: on a disk
// the stats of 300,000 absent files took a second of CPU.
func TestAFirstMirrorListsItsDataDirRatherThanAskForEachFile(t *testing.T) {
	up, mirror := filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	g, err := generate.Generate(context.Background(), up, generate.Options{Versions: 1, FilesPerVersion: 6, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, rec := syncInto(t, up, mirror)
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	listed := 0
	for _, p := range rec.lists {
		if p == repo.DefaultDataDir {
			listed++
		}
	}
	var statted []string
	for _, n := range rec.stats {
		if strings.HasPrefix(n, repo.DefaultDataDir) {
			statted = append(statted, n)
		}
	}
	if listed != 1 || len(statted) != 0 {
		t.Errorf("data_dir listed %d times, data files asked for alone: %v; want one listing for the %d files", listed, statted, len(g.DataFiles))
	}
}
