package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// sync SOURCE SINK SINK: one run, a report per sink, the upstream read once
// (what is read from where is specified in internal/mirror's fanout_test.go).

// sinkReport is what these tests read of a sync --json report.
type sinkReport struct {
	OK     bool   `json:"ok"`
	Mirror string `json:"mirror"`
	Sink   string `json:"sink"`
	Error  string `json:"error"`
}

// sinkReports decodes sync --json's output, a JSON object per sink.
func sinkReports(t *testing.T, stdout string) []sinkReport {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var reps []sinkReport
	for {
		var rep sinkReport
		if err := dec.Decode(&rep); errors.Is(err, io.EOF) {
			return reps
		} else if err != nil {
			t.Fatalf("stdout is not a JSON object per sink: %v\n%s", err, stdout)
		}
		reps = append(reps, rep)
	}
}

// assertFannedOut checks a run of one upstream (up, served by srv) to
// sinks, whose --json output is stdout: a report per sink, in the order
// given, each sink the upstream's copy, and each of dataFiles asked of
// the upstream once. It returns the reports for the caller's own checks.
func assertFannedOut(t *testing.T, stdout, up string, srv *testserver.HTTPServer, dataFiles []string, sinks ...string) []sinkReport {
	t.Helper()
	reps := sinkReports(t, stdout)
	var named []string
	for _, rep := range reps {
		named = append(named, rep.Sink)
	}
	if !slices.Equal(named, sinks) {
		t.Errorf("reports name the sinks %v, want %v", named, sinks)
	}
	for _, dst := range sinks {
		fdltest.AssertMirrored(t, up, dst, nil)
	}
	srv.AssertEachAskedOnce(t, dataFiles)
	return reps
}

// Two sinks: a JSON object per sink, in the order given, each naming its
// sink; both mirrors are the upstream's copy, and each data file was asked
// of the upstream once.
func TestSyncToTwoSinksReportsEachAndReadsUpstreamOnce(t *testing.T) {
	parent, up, _ := layout(t)
	repo := gen(t, up, generate.Options{Versions: 2, FastParquet: true})
	srv := testserver.HTTP(t, up)
	a, b := filepath.Join(parent, "a"), filepath.Join(parent, "b")

	res := run(t, "sync", "--json", srv.URL, a, b)
	if res.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	for _, rep := range assertFannedOut(t, res.stdout, up, srv, repo.DataFiles, a, b) {
		if !rep.OK {
			t.Errorf("sink %s not ok", rep.Sink)
		}
	}
}

// A sink another run holds the lock of: the command exits 1, its summary
// names that sink and why it stopped, nothing is written into it; the
// other sink is mirrored and reported as usual.
func TestSyncToTwoSinksOneLockedNamesIt(t *testing.T) {
	parent, up, _ := layout(t)
	repo := gen(t, up, generate.Options{Versions: 1, FastParquet: true})
	locked, free := filepath.Join(parent, "locked"), filepath.Join(parent, "free")
	fdltest.HoldLock(t, locked, lock.Options{Owner: "the test", TTL: time.Hour})

	res := run(t, "sync", up, locked, free)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	var lockedLine, freeLine string
	for _, line := range strings.Split(res.stdout, "\n") {
		switch {
		case strings.Contains(line, "-> "+locked+":"):
			lockedLine = line
		case strings.Contains(line, "-> "+free+":"):
			freeLine = line
		}
	}
	if lockedLine == "" || freeLine == "" {
		t.Fatalf("a summary per sink wanted:\n%s", res.stdout)
	}
	stopped := res.stdout[strings.Index(res.stdout, lockedLine):strings.Index(res.stdout, freeLine)]
	if !strings.Contains(stopped, "STOPPED: sink "+locked) || !strings.Contains(stopped, "lock") {
		t.Errorf("the locked sink's summary does not say it stopped on its lock:\n%s", stopped)
	}
	for _, name := range []string{"refs", "versions", "data", "refs.json", "HEAD"} {
		if _, err := os.Stat(filepath.Join(locked, name)); err == nil {
			t.Errorf("the locked sink was written: it has %s", name)
		}
	}
	fdltest.AssertMirrored(t, up, free, nil)
	if got := readRef(t, free, generate.MainRef); got != repo.Versions[0] {
		t.Errorf("the free sink's main is %q, want %s", got, repo.Versions[0])
	}
}

// A configured mirror of two sinks: sync --config mirrors both in one run
// that reads the upstream once, a report each; status --config compares
// each; daemon --check accepts it (the daemon runs it: internal/daemon's
// sinks_test.go).
func TestConfiguredMirrorOfTwoSinks(t *testing.T) {
	parent, up, _ := layout(t)
	repo := gen(t, up, generate.Options{Versions: 2, FastParquet: true})
	srv := testserver.HTTP(t, up)
	a, b := filepath.Join(parent, "a"), filepath.Join(parent, "b")
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeFile(t, configPath, "mirrors:\n  - name: towns\n    source: "+srv.URL+"\n    schedule: \"@every 1h\"\n    sinks:\n      - "+a+"\n      - "+b+"\n")

	res := run(t, "sync", "--config", configPath, "--json")
	if res.code != 0 {
		t.Fatalf("sync --config: exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	for _, rep := range assertFannedOut(t, res.stdout, up, srv, repo.DataFiles, a, b) {
		if rep.Mirror != "towns" {
			t.Errorf("a report names the mirror %q", rep.Mirror)
		}
	}

	st := run(t, "status", "--config", configPath)
	if st.code != 0 || !strings.Contains(st.stdout, "-> "+a+":") || !strings.Contains(st.stdout, "-> "+b+":") {
		t.Errorf("status --config: exit %d, want 0 and a line per sink:\n%s%s", st.code, st.stdout, st.stderr)
	}

	check := run(t, "daemon", "--config", configPath, "--check")
	if check.code != 0 || !strings.Contains(check.stdout, "valid; mirrors: [towns]") {
		t.Errorf("daemon --check: exit %d, want 0 and the mirror:\n%s%s", check.code, check.stdout, check.stderr)
	}
}

// A sink the command cannot open (a scheme it does not know) stops that
// sink only: the sinks before and after it are mirrored and reported, the
// bad one has its report too, naming it and why (its password redacted),
// and the exit code is the worst of them, 2 for a configuration error.
func TestSyncToThreeSinksOneBadAddressStopsOnlyIt(t *testing.T) {
	parent, up, _ := layout(t)
	repo := gen(t, up, generate.Options{Versions: 1, FastParquet: true})
	srv := testserver.HTTP(t, up)
	a, b := filepath.Join(parent, "a"), filepath.Join(parent, "b")
	bad, badShown := "gopher://user:hunter2@example.invalid/towns/", "gopher://user:REDACTED@example.invalid/towns/"

	res := run(t, "sync", "--json", srv.URL, a, bad, b)
	if res.code != exitUsage {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", res.code, exitUsage, res.stdout, res.stderr)
	}
	reps := sinkReports(t, res.stdout)
	if len(reps) != 3 {
		t.Fatalf("%d reports, want one per sink:\n%s", len(reps), res.stdout)
	}
	for i, want := range []sinkReport{{OK: true, Sink: a}, {OK: false, Sink: badShown}, {OK: true, Sink: b}} {
		got := reps[i]
		if got.OK != want.OK || got.Sink != want.Sink {
			t.Errorf("report %d: ok %v, sink %s; want ok %v, sink %s (error %q)", i, got.OK, got.Sink, want.OK, want.Sink, got.Error)
		}
	}
	if !fdltest.Contains(reps[1].Error, badShown, "gopher") {
		t.Errorf("the bad sink's error does not name it and its scheme: %q", reps[1].Error)
	}
	if !fdltest.Contains(res.stderr, badShown, "gopher") {
		t.Errorf("stderr does not name the bad sink and its scheme:\n%s", res.stderr)
	}
	if strings.Contains(res.stdout+res.stderr, "hunter2") {
		t.Errorf("the bad sink's password is printed:\n%s\n%s", res.stdout, res.stderr)
	}
	for _, dst := range []string{a, b} {
		fdltest.AssertMirrored(t, up, dst, nil)
	}
	srv.AssertEachAskedOnce(t, repo.DataFiles)
}

// Sinks that nest: one in the source's folder (the run would write into
// the upstream), one in an earlier sink's (the sinks' cleanups would
// reach into each other's files). Each is refused by name with exit 2 and
// not written; the other sinks are mirrored and reported.
func TestSyncToSinksThatNestRefusesThoseOnly(t *testing.T) {
	parent, up, _ := layout(t)
	gen(t, up, generate.Options{Versions: 1, FastParquet: true})
	before := fdltest.Files(t, up)
	inSource, a, inA, b := filepath.Join(up, "mirror"), filepath.Join(parent, "a"), filepath.Join(parent, "a", "b"), filepath.Join(parent, "b")

	res := run(t, "sync", "--json", up, inSource, a, inA, b)
	if res.code != exitUsage {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", res.code, exitUsage, res.stdout, res.stderr)
	}
	reps := sinkReports(t, res.stdout)
	if len(reps) != 4 {
		t.Fatalf("%d reports, want one per sink:\n%s", len(reps), res.stdout)
	}
	for i, want := range []sinkReport{{Sink: inSource, Error: "the source " + up}, {OK: true, Sink: a}, {Sink: inA, Error: "the sink " + a + " before it"}, {OK: true, Sink: b}} {
		got := reps[i]
		if got.OK != want.OK || got.Sink != want.Sink || !strings.Contains(got.Error, want.Error) {
			t.Errorf("report %d: ok %v, sink %s, error %q; want ok %v, sink %s, an error naming %q", i, got.OK, got.Sink, got.Error, want.OK, want.Sink, want.Error)
		}
	}
	if !fdltest.Contains(res.stderr, inSource, "nest") || !fdltest.Contains(res.stderr, inA, "nest") {
		t.Errorf("stderr does not name each refused sink:\n%s", res.stderr)
	}
	if after := fdltest.Files(t, up); len(after) != len(before) {
		t.Errorf("the upstream's folder has %d files after the run, %d before", len(after), len(before))
	}
	for _, refused := range []string{inSource, inA} {
		if _, err := os.Stat(refused); err == nil {
			t.Errorf("the refused sink %s was made", refused)
		}
	}
	for _, dst := range []string{a, b} {
		fdltest.AssertMirrored(t, up, dst, nil)
	}
}

// A source that cannot be opened fails every sink of the run alike: the
// command says so once, not once per sink, exits 2 and writes no sink.
func TestSyncToTwoSinksOfAMissingSourceSaysSoOnce(t *testing.T) {
	dir := t.TempDir()
	missing, a, b := filepath.Join(dir, "missing"), filepath.Join(dir, "a"), filepath.Join(dir, "b")
	res := run(t, "sync", missing, a, b)
	if res.code != exitUsage {
		t.Fatalf("exit %d, want %d\n%s%s", res.code, exitUsage, res.stdout, res.stderr)
	}
	if n := strings.Count(res.stderr, "source: opening "+missing); n != 1 {
		t.Errorf("the missing source is named %d times, want once:\n%s", n, res.stderr)
	}
	for _, sink := range []string{a, b} {
		if _, err := os.Stat(sink); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("sink %s: %v; want nothing written", sink, err)
		}
	}
	// --json keeps one object per sink, each with the error.
	res = run(t, "sync", "--json", missing, a, b)
	reports := sinkReports(t, res.stdout)
	if res.code != exitUsage || len(reports) != 2 {
		t.Fatalf("--json: exit %d, %d objects; want %d, 2\n%s", res.code, len(reports), exitUsage, res.stdout)
	}
}
