package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// These tests run the real engine (mirror.Run) on folders: a scrub is only
// worth its name if the file it finds missing is really back.

// syncedMirror generates an upstream, mirrors it with a plain sync, and
// returns both folders and the upstream's record.
func syncedMirror(t *testing.T) (up, down string, g *generate.Repo) {
	t.Helper()
	_, up, down = fdltest.Layout(t)
	g = syncedTo(t, up, down)
	fdltest.AssertMirrored(t, up, down, nil)
	return up, down, g
}

// syncedTo generates an upstream in up and mirrors it to sink with a
// plain sync.
func syncedTo(t *testing.T, up, sink string) *generate.Repo {
	t.Helper()
	g := fdltest.Generate(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 5, FastParquet: true})
	rep, err := mirror.Run(context.Background(), mirror.Job{Name: "towns", Stores: mirror.Stores{Source: up, Sink: sink}}, zap.NewNop(), nil)
	if err != nil || !rep.OK() {
		t.Fatalf("first sync: %v %+v", err, rep)
	}
	return g
}

func scrubConfig(up, down, schedule, scrub string) string {
	c := fmt.Sprintf("mirrors:\n  - name: towns\n    source: %s\n    sink: %s\n    schedule: %q\n", up, down, schedule)
	if scrub != "" {
		c += fmt.Sprintf("    scrub: %q\n", scrub)
	}
	return c
}

// A data file deleted behind the mirror's back, from a folder and from a
// bucket of the Versity S3 gateway (through its posix root), is back
// after the scrub.
func TestAScrubRestoresAFileLostOutOfBand(t *testing.T) {
	t.Run("folder", func(t *testing.T) {
		_, up, down := fdltest.Layout(t)
		scrubRestores(t, up, down, down)
	})
	t.Run("s3", func(t *testing.T) {
		s3 := testserver.S3(t)
		bucket := s3.Bucket(t)
		scrubRestores(t, filepath.Join(t.TempDir(), "up"), s3.URL(bucket, "towns"), filepath.Join(s3.Dir, bucket, "towns"))
	})
}

// scrubRestores mirrors an upstream in up to sink, whose files are in the
// folder down, deletes a data file there, and has a daemon scrub it back.
func scrubRestores(t *testing.T, up, sink, down string) {
	g := syncedTo(t, up, sink)
	fdltest.AssertMirrored(t, up, down, nil)
	lost := g.DataFiles[0]
	if err := os.Remove(filepath.Join(down, lost)); err != nil {
		t.Fatal(err)
	}
	// The schedule's first tick is an hour away: only the scrub runs.
	before := time.Now()
	h := start(t, scrubConfig(up, sink, "@every 1h", "@every 1s"), nil)
	m := h.d.Metrics()
	waitFor(t, "a successful scrub", 30*time.Second, func() bool {
		return testutil.CollectAndCount(m.lastScrub) == 1
	})
	h.stop(t)
	after := time.Now()

	want, err := os.ReadFile(filepath.Join(up, lost))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(down, lost))
	if err != nil {
		t.Fatalf("the lost file is still lost after the scrub: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s restored with %d bytes, upstream has %d", lost, len(got), len(want))
	}
	fdltest.AssertMirrored(t, up, down, nil)

	// One file was deleted: later scrubs, if any ran, found nothing more.
	if n := testutil.ToFloat64(m.scrubMissing.WithLabelValues("towns")); n != 1 {
		t.Errorf("scrub_missing_files_total = %v, want 1", n)
	}
	if n := testutil.ToFloat64(m.scrubRestored.WithLabelValues("towns")); n != 1 {
		t.Errorf("scrub_restored_files_total = %v, want 1", n)
	}
	at := testutil.ToFloat64(m.lastScrub.WithLabelValues("towns"))
	if at < float64(before.Unix()) || at > float64(after.Unix()+1) {
		t.Errorf("last_scrub_timestamp_seconds = %v, not between the start (%d) and the end (%d) of the test", at, before.Unix(), after.Unix())
	}
	if n := testutil.ToFloat64(m.scrubs.WithLabelValues("towns", ResultSuccess)); n < 1 {
		t.Errorf("scrubs_total{result=success} = %v", n)
	}
	if p := testutil.ToFloat64(m.scrubPeriod.WithLabelValues("towns")); p != 1 {
		t.Errorf("scrub_period_seconds = %v, want 1", p)
	}
	// A scrub is a run: counted as one, with the schedule's ticks.
	if n := testutil.ToFloat64(m.runs.WithLabelValues("towns", ResultSuccess)); n < 1 {
		t.Errorf("runs_total{result=success} = %v", n)
	}

	st := h.d.Status().Mirrors[0]
	if st.Scrub != "@every 1s" || st.LastScrub == nil {
		t.Fatalf("status: scrub %q, last scrub %+v", st.Scrub, st.LastScrub)
	}
	if ls := st.LastScrub; ls.Result != ResultSuccess || ls.Ended.Before(before) || ls.Ended.After(after) {
		t.Errorf("status: last scrub %+v", ls)
	}
	// The status keeps the last scrub, which found the file only if no
	// other one ran after it.
	if ls := st.LastScrub; ls.FilesMissing != ls.FilesRestored || ls.FilesMissing > 1 {
		t.Errorf("status: last scrub found %d missing, restored %d", ls.FilesMissing, ls.FilesRestored)
	}
}

func TestWithoutScrubNoRunRestoresALostFile(t *testing.T) {
	up, down, g := syncedMirror(t)
	lost := filepath.Join(down, g.DataFiles[0])
	if err := os.Remove(lost); err != nil {
		t.Fatal(err)
	}
	h := start(t, scrubConfig(up, down, "@every 1s", ""), nil)
	m := h.d.Metrics()
	waitFor(t, "two clean syncs", 30*time.Second, func() bool {
		return testutil.ToFloat64(m.runs.WithLabelValues("towns", ResultSuccess)) >= 2
	})
	h.stop(t)
	if _, err := os.Stat(lost); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s came back without a scrub (stat: %v): the test shows nothing", lost, err)
	}
	for name, n := range map[string]int{
		"last_scrub_timestamp_seconds": testutil.CollectAndCount(m.lastScrub),
		"scrubs_total":                 testutil.CollectAndCount(m.scrubs),
		"scrub_missing_files_total":    testutil.CollectAndCount(m.scrubMissing),
		"scrub_period_seconds":         testutil.CollectAndCount(m.scrubPeriod),
	} {
		if n != 0 {
			t.Errorf("%s has %d series without a scrub schedule", name, n)
		}
	}
	if st := h.d.Status().Mirrors[0]; st.Scrub != "" || st.LastScrub != nil {
		t.Errorf("status without a scrub: scrub %q, last scrub %+v", st.Scrub, st.LastScrub)
	}
}

func TestAScrubThatCannotRestoreSaysSoAndSetsNoTimestamp(t *testing.T) {
	up, down, g := syncedMirror(t)
	// Lost on both sides: the scrub finds it missing and has nowhere to
	// copy it from.
	lost := g.DataFiles[len(g.DataFiles)-1]
	for _, dir := range []string{up, down} {
		if err := os.Remove(filepath.Join(dir, lost)); err != nil {
			t.Fatal(err)
		}
	}
	h := start(t, scrubConfig(up, down, "@every 1h", "@every 1s"), nil)
	m := h.d.Metrics()
	waitFor(t, "a scrub", 30*time.Second, func() bool {
		return testutil.ToFloat64(m.scrubs.WithLabelValues("towns", ResultRefused)) >= 1
	})
	h.stop(t)
	if n := testutil.CollectAndCount(m.lastScrub); n != 0 {
		t.Errorf("last_scrub_timestamp_seconds set by a scrub that left a file missing")
	}
	missing := testutil.ToFloat64(m.scrubMissing.WithLabelValues("towns"))
	runs := testutil.ToFloat64(m.scrubs.WithLabelValues("towns", ResultRefused))
	if missing != runs || missing < 1 {
		t.Errorf("scrub_missing_files_total = %v after %v scrubs, each finding the one file missing", missing, runs)
	}
	if n := testutil.ToFloat64(m.scrubRestored.WithLabelValues("towns")); n != 0 {
		t.Errorf("scrub_restored_files_total = %v, want 0", n)
	}
	ls := h.d.Status().Mirrors[0].LastScrub
	if ls == nil || ls.Result != ResultRefused || ls.FilesMissing != 1 || ls.FilesRestored != 0 {
		t.Errorf("status: last scrub %+v", ls)
	}
	if _, err := os.Stat(filepath.Join(down, lost)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %v", lost, err)
	}
}

// A scrub takes the mirror's turn like any run: never beside a sync of
// the mirror, and a scrub due during a run runs after it.
func TestAScrubNeverRunsBesideARunOfItsMirror(t *testing.T) {
	var mu sync.Mutex
	going, most, scrubs, syncs := 0, 0, 0, 0
	run := func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		mu.Lock()
		going++
		most = max(most, going)
		if job.Repair {
			scrubs++
		} else {
			syncs++
		}
		mu.Unlock()
		time.Sleep(700 * time.Millisecond)
		mu.Lock()
		going--
		mu.Unlock()
		return okReport(job), nil
	}
	// Scrubs tick every second; plain syncs come from the schedule's
	// ticks, and from triggers, which queue one after the run going.
	h := start(t, scrubConfig("/up/towns", "/down/towns", "@every 1s", "@every 1s"), run)
	waitFor(t, "three scrubs and three syncs", 30*time.Second, func() bool {
		h.d.triggerRun("towns")
		mu.Lock()
		defer mu.Unlock()
		return scrubs >= 3 && syncs >= 3
	})
	h.stop(t)
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Errorf("%d runs of one mirror at once (%d scrubs, %d syncs)", most, scrubs, syncs)
	}
}

// A scrub that found the sink locked by another run stays due: the
// mirror's next run is a scrub.
func TestALockedScrubIsTheNextRun(t *testing.T) {
	var mu sync.Mutex
	var jobs []bool // Repair of each run
	run := func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		mu.Lock()
		defer mu.Unlock()
		jobs = append(jobs, job.Repair)
		if len(jobs) == 1 {
			return nil, fmt.Errorf("sink: %w", lock.ErrLocked)
		}
		return okReport(job), nil
	}
	// The scrub ticks once a year: only the first is one, and the runs
	// after it are the schedule's ticks (or triggers).
	h := start(t, scrubConfig("/up/towns", "/down/towns", "@every 1h", "@yearly"), run)
	waitFor(t, "the schedule", 10*time.Second, h.d.ready.Load)
	h.d.mu.Lock()
	gen := h.d.gen
	h.d.mu.Unlock()
	h.d.scrubTick(gen, "towns")
	if got := h.d.triggerRun("towns"); got != TriggerStarted {
		t.Fatalf("trigger: %s", got)
	}
	waitFor(t, "the trigger's run", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(jobs) >= 2
	})
	h.stop(t)
	if fmt.Sprint(jobs[:2]) != "[true true]" {
		t.Errorf("runs' repair = %v, want the locked scrub then a scrub again", jobs)
	}
	m := h.d.Metrics()
	if n := testutil.ToFloat64(m.scrubs.WithLabelValues("towns", ResultLocked)); n != 1 {
		t.Errorf("scrubs_total{result=locked} = %v", n)
	}
	if n := testutil.CollectAndCount(m.lastScrub); n != 1 {
		t.Errorf("no last_scrub_timestamp_seconds after the second scrub succeeded")
	}
}
