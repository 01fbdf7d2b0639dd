package sync_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// A catalog read whole whose files are sorted on disk in runs of a few
// rows and go through the steps of mirroring two at a time mirrors every
// data file, a first run and an incremental one alike. With an alternate
// catalog every version is read whole (no difference is taken), and its
// parents' catalogs, published by the run or before it, are gone through
// beside each of its two catalogs.
func TestWholeReadsInBatchesFromRunsOnDiskMirrorEveryFile(t *testing.T) {
	for _, alternate := range []string{"", "1.0"} {
		t.Run("alternate "+alternate, func(t *testing.T) {
			opts := generate.Options{Versions: 3, FilesPerVersion: 5, DeleteFiles: true, RemoveFiles: true, FastParquet: true, AlternateCatalog: alternate}
			mirrorInBatches(t, opts)
		})
	}
}

func mirrorInBatches(t *testing.T, opts generate.Options) {
	defer catalog.SetSortMemory(200)()
	defer fdlsync.SetDataBatch(2)()
	up, mirror := filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	ctx := context.Background()
	if _, err := generate.Generate(ctx, up, opts); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		rep, _ := syncInto(t, up, mirror)
		if !rep.OK() {
			t.Fatalf("%s refused: %+v", what, rep.Refused)
		}
		files := dataFilesIn(t, up)
		if len(files) < 10 {
			t.Fatalf("%d data files upstream: too few to take several batches", len(files))
		}
		for f := range files {
			want, err := os.ReadFile(filepath.Join(up, f))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(mirror, f))
			if err != nil || string(got) != string(want) {
				t.Errorf("%s: %s in the mirror: %d bytes, err %v; want its %d upstream bytes", what, f, len(got), err, len(want))
			}
		}
		if mainOf(t, mirror) != mainOf(t, up) {
			t.Errorf("%s: main in the mirror is %q, upstream %q", what, mainOf(t, mirror), mainOf(t, up))
		}
	}
	check("the first run")
	if _, err := generate.AddVersion(ctx, up, 3, opts); err != nil {
		t.Fatal(err)
	}
	check("the incremental run")
}
