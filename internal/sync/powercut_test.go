package sync_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/powercut"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

// A local sink writes a version's files without an fsync each and makes
// them durable with one barrier before version.json (issue 14). These
// tests cut the power in the middle of a first run, do to the files no
// barrier covered what a file system may (zeroed bytes at the right size,
// no bytes, no name), run again, and check the mirror with verify --deep
// and byte for byte against upstream.

// cutRun copies a generated repository and mirrors it into a local
// folder whose power goes after cutAt writes made without an fsync; it
// returns the folders and what the cut did.
func cutRun(t *testing.T, cutAt int, ways ...string) (up, mirror string, damage powercut.Damage) {
	t.Helper()
	up, mirror = filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every cut of both tests mirrors the same upstream: a copy of one
	// generated once.
	fdltest.GenerateCopy(t, up, generate.Options{Versions: 4, FilesPerVersion: 6, FastParquet: true})
	src, err := local.Open(up)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := local.Create(mirror)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	sink := powercut.New(dst, mirror, cutAt, cancel)
	_, err = syncStores(ctx, src, sink, fdlsync.Options{Concurrency: 2})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the run went on after the power cut: %v", err)
	}
	if damage, err = sink.Cut(ways...); err != nil {
		t.Fatal(err)
	}
	damagedData := 0
	for name := range damage {
		if strings.HasPrefix(name, "data/") {
			damagedData++
		}
	}
	if damagedData == 0 {
		t.Fatalf("the cut damaged no data file (the test cuts at the wrong write): %v", damage)
	}
	t.Logf("the power cut did: %v", damage)
	return up, mirror, damage
}

// checkMirror runs verify --deep on the mirror and compares every data
// file in it with upstream's, byte for byte; it returns what is wrong.
func checkMirror(t *testing.T, up, mirror string) []string {
	t.Helper()
	m, err := local.Open(mirror)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	problems, err := verify.CheckRepository(context.Background(), source.New(m, nil, nil), verify.CheckOptions{Deep: true})
	if err != nil {
		t.Fatal(err)
	}
	var wrong []string
	for _, p := range problems {
		wrong = append(wrong, "verify --deep: "+p.Message)
	}
	for f := range dataFilesIn(t, mirror) {
		have, err := os.ReadFile(filepath.Join(mirror, f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(up, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, want) {
			wrong = append(wrong, f+": not upstream's bytes")
		}
	}
	return wrong
}

func TestPowerCutBeforeABarrierIsRepairedByTheNextRun(t *testing.T) {
	for _, c := range []struct {
		cutAt int
		ways  []string
		batch int // files a batch (SetDataBatch), 0: the default
	}{{5, nil, 0}, {9, nil, 0}, {14, nil, 0}, {9, []string{powercut.Zeroed}, 0},
		// Batches of two files: each batch's barrier runs while the
		// next batch is recorded and copied, so a cut finds writes of
		// two batches not covered.
		{5, nil, 2}, {11, nil, 2}} {
		if testing.Short() && (c.cutAt != 9 || c.ways != nil) {
			continue // -short: one cut, not four (each is two generated runs)
		}
		cutAt := c.cutAt
		restore := func() {}
		if c.batch > 0 {
			restore = fdlsync.SetDataBatch(c.batch)
		}
		up, mirror, damage := cutRun(t, cutAt, c.ways...)
		restore()
		rep, _ := syncInto(t, up, mirror)
		if !rep.OK() {
			t.Fatalf("cut at %d: second run refused: %+v", cutAt, rep.Refused)
		}
		for name := range damage {
			if strings.HasPrefix(name, "data/") && !contains(rep.Distrusted, name) {
				t.Errorf("cut at %d: damaged data file %s is not in Report.Distrusted %v", cutAt, name, rep.Distrusted)
			}
		}
		if wrong := checkMirror(t, up, mirror); len(wrong) > 0 {
			t.Fatalf("cut at %d: after the second run the mirror is wrong:\n%s", cutAt, strings.Join(wrong, "\n"))
		}
		if _, err := os.Stat(filepath.Join(mirror, ".fdl-mirror", fdlsync.UnsyncedFile)); !os.IsNotExist(err) {
			t.Errorf("cut at %d: the record of unsynced files is still there after a clean run: %v", cutAt, err)
		}
		if refs := mainOf(t, mirror); refs != mainOf(t, up) {
			t.Errorf("cut at %d: main is %q in the mirror, %q upstream", cutAt, refs, mainOf(t, up))
		}
	}
}

// Without the record, the same cuts leave data files that the next run
// trusts by their size: zeroed files in published versions (found by
// verify --deep), or empty ones that stop the mirror for good (refused
// as of another size than recorded, immutable). This is what the record
// is for, and shows that the test above can fail.
func TestPowerCutWithoutTheRecordLeavesDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: shows the record is needed (four cut runs); the test above is the specification")
	}
	fdlsync.SetNoUnsyncedRecord(true)
	defer fdlsync.SetNoUnsyncedRecord(false)

	up, mirror, _ := cutRun(t, 9, powercut.Zeroed)
	rep, _ := syncInto(t, up, mirror)
	if !rep.OK() || len(rep.Distrusted) != 0 {
		t.Fatalf("second run: refused %+v, distrusted %v; want neither", rep.Refused, rep.Distrusted)
	}
	wrong := checkMirror(t, up, mirror)
	deep := 0
	for _, w := range wrong {
		if strings.HasPrefix(w, "verify --deep:") {
			deep++
		}
	}
	if deep == 0 {
		t.Fatalf("without the record, zeroed files did not reach a published version (verify --deep found nothing; %v)", wrong)
	}
	t.Logf("damage left without the record:\n%s", strings.Join(wrong, "\n"))

	up, mirror, _ = cutRun(t, 9, powercut.Empty)
	rep, _ = syncInto(t, up, mirror)
	refusedEmpty := false
	for _, r := range rep.Refused {
		refusedEmpty = refusedEmpty || r.Reason == fdlsync.ReasonSizeMismatch && strings.Contains(r.Message, "exists in the sink with 0 bytes")
	}
	if !refusedEmpty {
		t.Fatalf("without the record, files left empty were not refused as of another size: %+v", rep.Refused)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
