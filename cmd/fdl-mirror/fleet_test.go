package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Fleets: one config over many pods (shards of an Indexed Job), and daemon
// replicas kept apart by the sinks' locks.

// runEnv runs the binary with extra environment variables.
func runEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running fdl-mirror %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

// shardRun is what one `sync --config --json` printed, per mirror.
type shardRun struct {
	Mirror      string `json:"mirror"`
	OK          bool   `json:"ok"`
	FilesCopied int64  `json:"files_copied"`
}

func syncRuns(t *testing.T, res result) []shardRun {
	t.Helper()
	if res.code != 0 {
		t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	var runs []shardRun
	dec := json.NewDecoder(strings.NewReader(res.stdout))
	for dec.More() {
		var r shardRun
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%v\n%s", err, res.stdout)
		}
		if !r.OK {
			t.Errorf("%s: not ok", r.Mirror)
		}
		runs = append(runs, r)
	}
	return runs
}

func runNames(runs []shardRun) []string {
	var names []string
	for _, r := range runs {
		names = append(names, r.Mirror)
	}
	return names
}

// Four mirrors over two shards: each shard run runs its mirrors once and
// touches no other's sink; the two together cover every mirror; a fifth
// mirror moves none of the four; `status --config` with no shard still
// reports every mirror. Shard 1 takes its index from JOB_COMPLETION_INDEX,
// as in an Indexed Job's pod.
func TestShardedSyncRunsEachMirrorOnceAndAFifthMovesNone(t *testing.T) {
	parent := t.TempDir()
	up := filepath.Join(parent, "upstream")
	gen(t, up, generate.Options{Versions: 2, Tags: true})
	// One upstream serves every mirror: what is under test is which sinks
	// each shard writes.
	var mirrors []testMirror
	for _, name := range []string{"towns", "rivers", "roads", "census", "weather"} {
		mirrors = append(mirrors, testMirror{name, up, filepath.Join(parent, "mirror-"+name)})
	}
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, "127.0.0.1:0", mirrors[:4]...)

	shard0 := syncRuns(t, run(t, "sync", "--config", configPath, "--shard", "0/2", "--json"))
	names0 := runNames(shard0)
	for _, m := range mirrors[:4] {
		_, err := os.Stat(m.sink)
		if in := slices.Contains(names0, m.name); in != (err == nil) {
			t.Errorf("%s: run by shard 0: %v; its sink exists: %v", m.name, in, err == nil)
		}
	}
	shard1 := syncRuns(t, runEnv(t, []string{jobIndexEnv + "=1"}, "sync", "--config", configPath, "--shards", "2", "--json"))
	names1 := runNames(shard1)
	if len(names0) == 0 || len(names1) == 0 {
		t.Fatalf("shard 0 ran %v, shard 1 ran %v: pick names that fall in both shards", names0, names1)
	}
	all := append(slices.Clone(names0), names1...)
	slices.Sort(all)
	if fmt.Sprint(all) != "[census rivers roads towns]" {
		t.Fatalf("the two shards ran %v and %v; want every mirror exactly once", names0, names1)
	}
	for _, m := range mirrors[:4] {
		fdltest.AssertMirrored(t, m.up, m.sink, nil)
	}
	t.Logf("4 mirrors over 2 shards: %v and %v", names0, names1)

	// A rerun of a shard runs the same mirrors, once each, with nothing to copy.
	again := syncRuns(t, run(t, "sync", "--config", configPath, "--shard", "0/2", "--json"))
	if fmt.Sprint(runNames(again)) != fmt.Sprint(names0) {
		t.Errorf("shard 0 ran %v, then %v", names0, runNames(again))
	}
	for _, r := range again {
		if r.FilesCopied != 0 {
			t.Errorf("%s: %d files copied by a rerun", r.Mirror, r.FilesCopied)
		}
	}

	// A fifth mirror, added first in the file so that every position moves.
	writeDaemonConfig(t, configPath, "127.0.0.1:0", append([]testMirror{mirrors[4]}, mirrors[:4]...)...)
	with0 := runNames(syncRuns(t, run(t, "sync", "--config", configPath, "--shard", "0/2", "--json")))
	with1 := runNames(syncRuns(t, run(t, "sync", "--config", configPath, "--shard", "1/2", "--json")))
	if got := slices.DeleteFunc(slices.Clone(with0), func(n string) bool { return n == "weather" }); fmt.Sprint(got) != fmt.Sprint(names0) {
		t.Errorf("shard 0 ran %v, with a fifth mirror %v: a mirror moved", names0, with0)
	}
	if got := slices.DeleteFunc(slices.Clone(with1), func(n string) bool { return n == "weather" }); fmt.Sprint(got) != fmt.Sprint(names1) {
		t.Errorf("shard 1 ran %v, with a fifth mirror %v: a mirror moved", names1, with1)
	}
	if slices.Contains(with0, "weather") == slices.Contains(with1, "weather") {
		t.Errorf("the fifth mirror is in shard 0: %v, in shard 1: %v; want exactly one", slices.Contains(with0, "weather"), slices.Contains(with1, "weather"))
	}
	fdltest.AssertMirrored(t, mirrors[4].up, mirrors[4].sink, nil)

	// status: a shard reports its mirrors; no shard, every mirror.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--shard", "0/2"}, with0},
		{[]string{"--shard", "1/2"}, with1},
		{nil, []string{"weather", "towns", "rivers", "roads", "census"}},
	} {
		res := runEnv(t, []string{jobIndexEnv + "=0"}, append([]string{"status", "--config", configPath, "--json"}, tc.args...)...)
		var got []string
		dec := json.NewDecoder(strings.NewReader(res.stdout))
		for dec.More() {
			var s struct {
				Mirror string `json:"mirror"`
				Behind bool   `json:"behind"`
			}
			if err := dec.Decode(&s); err != nil {
				t.Fatalf("status %v: %v\n%s", tc.args, err, res.stdout)
			}
			got = append(got, s.Mirror)
		}
		if res.code != 0 || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("status --config %v: exit %d, mirrors %v, want %v\n%s", tc.args, res.code, got, tc.want, res.stderr)
		}
	}

	// A daemon's --check names the mirrors of its shard.
	if res := run(t, "daemon", "--config", configPath, "--shard", "1/2", "--check"); res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("mirrors of shard 1/2: %v", with1)) {
		t.Errorf("daemon --check --shard 1/2: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

func TestShardFlagsRefuseWhatCannotWork(t *testing.T) {
	parent := t.TempDir()
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, "127.0.0.1:0", testMirror{"alpha", filepath.Join(parent, "up"), filepath.Join(parent, "mirror")})
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"sync", "--config", configPath, "--shard", "2/2"}, "the index must be from 0 to 1"},
		{nil, []string{"status", "--config", configPath, "--shard", "two"}, "want I/N"},
		{nil, []string{"daemon", "--config", configPath, "--shards", "3"}, "$JOB_COMPLETION_INDEX is not set"},
		{[]string{jobIndexEnv + "=3"}, []string{"sync", "--config", configPath, "--shards", "3"}, "the index must be from 0 to 2"},
		{[]string{jobIndexEnv + "=x"}, []string{"sync", "--config", configPath, "--shards", "3"}, `$JOB_COMPLETION_INDEX="x" is not a whole number`},
		{nil, []string{"sync", "--config", configPath, "--shard", "0/2", "--shards", "2"}, "give one"},
		{nil, []string{"sync", "--config", configPath, "--shard", "0/2", "--mirror", "alpha"}, "takes no --shard"},
		{nil, []string{"sync", "--shard", "0/2", filepath.Join(parent, "up"), filepath.Join(parent, "mirror")}, "need --config"},
	} {
		res := runEnv(t, tc.env, tc.args...)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%v %v: exit %d, want 2 and %q\n%s%s", tc.env, tc.args, res.code, tc.want, res.stdout, res.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(parent, "mirror")); !os.IsNotExist(err) {
		t.Errorf("a refused command wrote the mirror: %v", err)
	}
}

// A daemon of one shard runs that shard's mirrors and no other.
func TestShardedDaemonRunsOnlyItsShard(t *testing.T) {
	parent := t.TempDir()
	up := filepath.Join(parent, "upstream")
	repo := gen(t, up, generate.Options{Versions: 1})
	var mirrors []testMirror
	for _, name := range []string{"towns", "rivers", "roads", "census"} {
		mirrors = append(mirrors, testMirror{name, up, filepath.Join(parent, "mirror-"+name)})
	}
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, addr, mirrors...)
	d := startDaemon(t, configPath, addr, "--shard", "1/2")
	var mine, others []testMirror
	for _, m := range mirrors {
		if strings.Contains(run(t, "daemon", "--config", configPath, "--shard", "1/2", "--check").stdout, m.name) {
			mine = append(mine, m)
		} else {
			others = append(others, m)
		}
	}
	if len(mine) == 0 || len(others) == 0 {
		t.Fatalf("shard 1/2 holds %v of 4 mirrors: pick names that fall in both shards", mine)
	}
	for _, m := range mine {
		waitUntil(t, m.name+" mirrored", 60*time.Second, func() bool {
			return readRef(t, m.sink, generate.MainRef) == repo.Versions[0]
		})
	}
	// Several ticks of the others' schedules have passed meanwhile.
	time.Sleep(2 * time.Second)
	metrics := scrape(t, d.addr)
	for _, m := range others {
		if _, err := os.Stat(m.sink); !os.IsNotExist(err) {
			t.Errorf("%s of the other shard: sink written (%v)", m.name, err)
		}
		for series := range metrics {
			if strings.Contains(series, fmt.Sprintf(`mirror="%s"`, m.name)) {
				t.Errorf("%s of the other shard is in /metrics: %s", m.name, series)
				break
			}
		}
	}
	if code, took := d.stop(t, syscall.SIGTERM); code != 0 || took > 15*time.Second {
		t.Errorf("SIGTERM: exit %d after %s", code, took)
	}
}

// lockSpan is one hold of a sink's lock, from the holder's log: from its
// "took the lock" (logged once held, before any write) to its "releasing
// the lock" (logged after the last write, before letting go). Spans of a
// correct lock never overlap; a span never closed ends at the kill.
type lockSpan struct {
	daemon   int
	from, to time.Time
}

// lockSpans reads the lock spans of every sink from the daemons' logs.
func lockSpans(t *testing.T, killed time.Time, logs ...string) map[string][]lockSpan {
	t.Helper()
	spans := map[string][]lockSpan{}
	for i, log := range logs {
		open := map[string]time.Time{}
		for _, line := range strings.Split(log, "\n") {
			if !strings.HasPrefix(line, "{") {
				continue
			}
			var e struct {
				Time string `json:"time"`
				Msg  string `json:"msg"`
				Sink string `json:"sink"`
			}
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("daemon %d log: %v: %s", i, err, line)
			}
			if e.Msg != "took the lock" && e.Msg != "releasing the lock" {
				continue
			}
			at, err := time.Parse("2006-01-02T15:04:05.000Z0700", e.Time)
			if err != nil {
				t.Fatalf("daemon %d log: %v: %s", i, err, line)
			}
			from, held := open[e.Sink]
			switch {
			case e.Msg == "took the lock" && !held:
				open[e.Sink] = at
			case e.Msg == "releasing the lock" && held:
				spans[e.Sink] = append(spans[e.Sink], lockSpan{i, from, at})
				delete(open, e.Sink)
			default:
				t.Errorf("daemon %d: %q out of turn for %s at %s", i, e.Msg, e.Sink, e.Time)
			}
		}
		for sink, from := range open {
			if killed.IsZero() {
				t.Errorf("daemon %d never released %s (taken at %s)", i, sink, from)
				continue
			}
			spans[sink] = append(spans[sink], lockSpan{i, from, killed})
		}
	}
	return spans
}

// overlaps lists the spans of a sink that overlap.
func overlaps(spans map[string][]lockSpan) []string {
	var out []string
	for sink, ss := range spans {
		slices.SortFunc(ss, func(a, b lockSpan) int { return a.from.Compare(b.from) })
		for i := 1; i < len(ss); i++ {
			if prev := ss[i-1]; ss[i].from.Before(prev.to) {
				out = append(out, fmt.Sprintf("%s written by daemon %d from %s and by daemon %d from %s, while the first held it until %s",
					sink, prev.daemon, prev.from.Format(time.StampMilli), ss[i].daemon, ss[i].from.Format(time.StampMilli), prev.to.Format(time.StampMilli)))
			}
		}
	}
	return out
}

func assertOneWriterAtATime(t *testing.T, spans map[string][]lockSpan) {
	t.Helper()
	for _, o := range overlaps(spans) {
		t.Error(o)
	}
}

// The check of the logs has teeth: two holds of one sink that overlap by a
// millisecond are caught, holds that touch or are of different sinks are not.
func TestLockSpansCatchTwoWritersAtOnce(t *testing.T) {
	line := func(ms int, msg, sink string) string {
		at := time.Date(2026, 1, 2, 3, 4, 5, ms*int(time.Millisecond), time.UTC)
		return fmt.Sprintf(`{"level":"debug","time":"%s","msg":"%s","sink":"%s","owner":"x"}`, at.Format("2006-01-02T15:04:05.000Z0700"), msg, sink)
	}
	a := strings.Join([]string{line(0, "took the lock", "/m1"), line(100, "releasing the lock", "/m1"), line(200, "took the lock", "/m2"), "summary line", line(300, "releasing the lock", "/m2")}, "\n")
	touching := strings.Join([]string{line(100, "took the lock", "/m1"), line(150, "releasing the lock", "/m1")}, "\n")
	if o := overlaps(lockSpans(t, time.Time{}, a, touching)); len(o) != 0 {
		t.Errorf("holds one after the other reported: %v", o)
	}
	otherSink := strings.Join([]string{line(50, "took the lock", "/m2"), line(150, "releasing the lock", "/m2")}, "\n")
	if o := overlaps(lockSpans(t, time.Time{}, a, otherSink)); len(o) != 0 {
		t.Errorf("holds of different sinks reported: %v", o)
	}
	overlapping := strings.Join([]string{line(99, "took the lock", "/m1"), line(150, "releasing the lock", "/m1")}, "\n")
	if o := overlaps(lockSpans(t, time.Time{}, a, overlapping)); len(o) != 1 || !strings.Contains(o[0], "/m1 written by daemon 0") {
		t.Errorf("overlapping holds: %v", o)
	}
	// A hold never released (the daemon was killed) lasts until the kill.
	killedAt := time.Date(2026, 1, 2, 3, 4, 5, 500*int(time.Millisecond), time.UTC)
	unreleased := line(400, "took the lock", "/m2")
	if o := overlaps(lockSpans(t, killedAt, a, unreleased, line(450, "took the lock", "/m2"))); len(o) != 1 {
		t.Errorf("a hold until the kill: %v", o)
	}
}

// Two daemons on one config for half a minute while the upstream grows:
// every mirror follows, no run fails, both replicas stay ready, and each
// sink has one writer at a time. Both try every mirror at every tick
// (each second), so they meet on the locks whenever there is something
// new: about ten upstream versions, each met by both replicas on three
// mirrors. (A whole minute, as before, made twenty versions and the same
// kinds of meetings, twice as many of each.)
func TestTwoDaemonReplicasKeepEveryMirrorCurrentOneWriterAtATime(t *testing.T) {
	if testing.Short() {
		t.Skip("half a minute of two daemons skipped in -short mode")
	}
	// Mostly waits: the soak's length is fixed, and the daemons idle
	// between the upstream's new versions.
	t.Parallel()
	parent := t.TempDir()
	replicaSoak(t, parent, 30*time.Second, false, func(ups []string) []testMirror {
		return []testMirror{
			{"towns", ups[0], filepath.Join(parent, "mirror-towns")},
			{"rivers", ups[0], filepath.Join(parent, "mirror-rivers")},
			{"roads", ups[1], filepath.Join(parent, "mirror-roads")},
		}
	})
}

// The same soak with its sinks on Versity S3 and fake-gcs-server (issue
// 42): every mirror pruned after each sync, on both replicas, while
// upstream withdraws a tag every few versions, so that prunes take the
// object stores' locks between the syncs, remove refs conditionally and
// keep their lists of candidates. It ends clean: every mirror current,
// no run or prune failed, verify exits 0.
func TestTwoDaemonReplicasPruneObjectStoreMirrorsAndEndClean(t *testing.T) {
	if testing.Short() {
		t.Skip("two daemons on the test servers skipped in -short mode")
	}
	s3 := testserver.S3(t) // sets the environment: not parallel
	gcs := testserver.GCS(t)
	parent := t.TempDir()
	// 24 s: some six upstream versions, two of them withdrawing a tag
	// (the third and the sixth), each met by both replicas' syncs and
	// prunes on both stores. (40 s made nine versions and three
	// withdrawals: more of the same meetings.)
	replicaSoak(t, parent, 24*time.Second, true, func(ups []string) []testMirror {
		return []testMirror{
			{"rivers", ups[0], s3.URL(s3.Bucket(t), "rivers")},
			{"roads", ups[1], gcs.URL(gcs.Bucket(t), "roads")},
		}
	})
}

// replicaSoak runs two daemon replicas on one config of the mirrors
// sinks gives, every mirror pruned after each successful sync, for
// runFor while two upstreams grow (and, with withdraw, lose their oldest
// tag every third version), then checks that each mirror is current and
// complete and that each sink had one writer at a time.
func replicaSoak(t *testing.T, parent string, runFor time.Duration, withdraw bool, sinks func(ups []string) []testMirror) {
	t.Helper()
	opts := generate.Options{Versions: 1, FilesPerVersion: 4, RowsPerFile: 10, FastParquet: true, Tags: true}
	// The generator writes ref files in place; a publisher's readers must
	// never see a half-written one. So each upstream is published from a
	// staging repository by fdl-mirror itself: objects first, refs last,
	// every file renamed into place.
	ups := []string{filepath.Join(parent, "up-a"), filepath.Join(parent, "up-b")}
	staging := []string{filepath.Join(parent, "staging-a"), filepath.Join(parent, "staging-b")}
	publish := func(i int) {
		if res := run(t, "sync", staging[i], ups[i]); res.code != 0 {
			t.Fatalf("publishing %s: exit %d\n%s%s", ups[i], res.code, res.stdout, res.stderr)
		}
	}
	for i := range ups {
		o := opts
		o.Seed = int64(i)
		gen(t, staging[i], o)
		publish(i)
	}
	mirrors := sinks(ups)
	addrs := []string{freeAddr(t), freeAddr(t)}
	var daemons []*daemonProc
	for i, addr := range addrs {
		// One config but for the address each replica listens on, as pods
		// of a Deployment each listen on their own IP.
		configPath := filepath.Join(parent, fmt.Sprintf("fdl-mirror-%d.yaml", i))
		writeDaemonConfig(t, configPath, addr, mirrors...)
		// Each mirror pruned after each successful sync (issue 27): the
		// replicas' prunes meet each other's syncs too.
		text, err := os.ReadFile(configPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(configPath, bytes.ReplaceAll(text, []byte("    concurrency: 2\n"), []byte("    concurrency: 2\n    prune: true\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		daemons = append(daemons, startDaemon(t, configPath, addr))
	}

	began := time.Now()
	added, withdrawn := 0, 0
	for time.Since(began) < runFor {
		i := added % 2
		if _, err := generate.AddVersion(t.Context(), staging[i], 3, opts); err != nil {
			t.Fatal(err)
		}
		publish(i)
		added++
		if withdraw && added%3 == 0 {
			withdrawOldestTag(t, staging[i], ups[i])
			withdrawn++
		}
		time.Sleep(2 * time.Second)
		for i, d := range daemons {
			if code, body := httpGet("http://" + d.addr + "/readyz"); code != 200 {
				t.Errorf("daemon %d: /readyz %d %s", i, code, body)
			}
		}
	}
	for _, m := range mirrors {
		waitUntil(t, m.name+" current", 60*time.Second, func() bool {
			return fmt.Sprint(storeRefs(t, m.sink)) == fmt.Sprint(mirrorRefs(t, m.up))
		})
	}
	res := run(t, "status", "--config", filepath.Join(parent, "fdl-mirror-0.yaml"))
	if res.code != 0 {
		t.Errorf("status after the soak: exit %d\n%s", res.code, res.stdout)
	}

	var locked, success, prunes, prunesLocked float64
	for i, d := range daemons {
		// A prune locked out by the other replica's run is the design
		// ("prune skipped until the next tick"); one skipped because its
		// sync failed is not.
		for _, bad := range []string{"prune failed", "prune skipped: the sync did not succeed"} {
			if lines := grepLines(d.stderr.String(), bad); lines != "" {
				t.Errorf("daemon %d logged %q:\n%s", i, bad, lines)
			}
		}
		metrics := scrape(t, d.addr)
		for _, m := range mirrors {
			for _, r := range []string{"failed", "refused", "canceled"} {
				if n := metrics[fmt.Sprintf(`fdl_mirror_runs_total{mirror="%s",result="%s"}`, m.name, r)]; n != 0 {
					t.Errorf("daemon %d, %s: %v runs %s", i, m.name, n, r)
					for _, line := range strings.Split(d.stderr.String(), "\n") {
						if strings.Contains(line, `"result":"`+r+`"`) {
							t.Log(line)
						}
					}
				}
			}
			if n := metrics[fmt.Sprintf(`fdl_mirror_prunes_total{mirror="%s",result="failed"}`, m.name)]; n != 0 {
				t.Errorf("daemon %d, %s: %v prunes failed", i, m.name, n)
			}
			// Without withdrawals a prune has nothing to remove, so it
			// never takes the lock and is never locked out.
			n := metrics[fmt.Sprintf(`fdl_mirror_prunes_total{mirror="%s",result="locked"}`, m.name)]
			if n != 0 && !withdraw {
				t.Errorf("daemon %d, %s: %v prunes locked", i, m.name, n)
			}
			prunesLocked += n
			prunes += metrics[fmt.Sprintf(`fdl_mirror_prunes_total{mirror="%s",result="success"}`, m.name)]
			locked += metrics[fmt.Sprintf(`fdl_mirror_runs_total{mirror="%s",result="locked"}`, m.name)]
			success += metrics[fmt.Sprintf(`fdl_mirror_runs_total{mirror="%s",result="success"}`, m.name)]
		}
	}
	for i, d := range daemons {
		if code, took := d.stop(t, syscall.SIGTERM); code != 0 || took > 15*time.Second {
			t.Errorf("daemon %d: SIGTERM: exit %d after %s", i, code, took)
		}
	}
	spans := lockSpans(t, time.Time{}, daemons[0].stderr.String(), daemons[1].stderr.String())
	assertOneWriterAtATime(t, spans)
	writers := map[int]int{}
	for _, m := range mirrors {
		// The log names an object store's sink without its endpoint.
		key, _, _ := strings.Cut(m.sink, "?")
		var held []lockSpan
		for sink, ss := range spans {
			if sink == m.sink || strings.HasPrefix(sink, key) {
				held = append(held, ss...)
			}
		}
		if len(held) == 0 {
			t.Errorf("%s: no lock span in the logs", m.name)
		}
		for _, s := range held {
			writers[s.daemon]++
		}
	}
	t.Logf("%d upstream versions, %d tags withdrawn in %s: %v successful runs, %v locked out, %v prunes (%v locked out), lock holds by daemon %v",
		added, withdrawn, runFor, success, locked, prunes, prunesLocked, writers)
	if prunes == 0 {
		t.Error("no prune ran: the test did not test prunes beside syncs")
	}
	if withdraw && withdrawn == 0 {
		t.Error("no tag was withdrawn: the prunes had nothing to remove")
	}
	if locked == 0 {
		t.Error("the daemons never met on a lock: the test did not test two writers")
	}
	for _, m := range mirrors {
		if res := run(t, "verify", m.sink); res.code != 0 {
			t.Errorf("verify %s: exit %d\n%s%s", m.name, res.code, res.stdout, res.stderr)
		}
		local := m.sink
		if _, err := os.Stat(m.sink); err != nil {
			// An object store's mirror, brought back to compare.
			local = filepath.Join(parent, "back-"+m.name)
			if res := run(t, "sync", m.sink, local); res.code != 0 {
				t.Fatalf("bringing %s back: exit %d\n%s%s", m.name, res.code, res.stdout, res.stderr)
			}
		}
		fdltest.AssertMirrored(t, m.up, local, nil)
	}
}

// withdrawOldestTag deletes the upstream's lowest-numbered tag, from the
// staging repository and from the published one (ref file removed,
// refs.json renamed into place), as a host withdraws a ref.
func withdrawOldestTag(t *testing.T, repos ...string) {
	t.Helper()
	var oldest string
	for name := range mirrorRefs(t, repos[len(repos)-1]) {
		if !strings.HasPrefix(name, "refs/tags/v") {
			continue
		}
		n := func(s string) int { v, _ := strconv.Atoi(strings.TrimPrefix(s, "refs/tags/v")); return v }
		if oldest == "" || n(name) < n(oldest) {
			oldest = name
		}
	}
	if oldest == "" {
		return
	}
	for _, dir := range repos {
		if err := os.Remove(filepath.Join(dir, oldest)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		refs := repo.Refs{}
		for name, id := range mirrorRefs(t, dir) {
			refs[name] = id
		}
		tmp := filepath.Join(dir, ".refs.json.tmp")
		writeFile(t, tmp, string(repo.RefsJSON(refs)))
		if err := os.Rename(tmp, filepath.Join(dir, repo.RefsFile)); err != nil {
			t.Fatal(err)
		}
	}
}

// storeRefs is the ref files of a mirror, local or on an object store.
func storeRefs(t *testing.T, addr string) map[string]string {
	t.Helper()
	if _, err := os.Stat(addr); err == nil {
		return mirrorRefs(t, addr)
	}
	refs := map[string]string{}
	for name := range listStore(t, addr) {
		if strings.HasPrefix(name, "refs/") {
			refs[name] = strings.TrimSpace(readObject(t, addr, name))
		}
	}
	return refs
}

// One daemon SIGKILLed in the middle of a large run: the kernel drops its
// flock, and the other replica, which was locked out until then, takes the
// mirror over at its next tick, clears what the dead run left, and
// finishes it.
func TestDaemonReplicaFinishesTheMirrorOfOneKilledMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("large sync skipped in -short mode")
	}
	// Mostly waits for the first daemon's slow reads (about 8 s of CPU
	// in 32 s alone); its kill lands with some 2 % of the files copied.
	t.Parallel()
	parent := t.TempDir()
	m := testMirror{"large", filepath.Join(parent, "upstream"), filepath.Join(parent, "mirror")}
	gen(t, m.up, generate.Options{Versions: 4, FilesPerVersion: 300, RowsPerFile: 10, FastParquet: true, Tags: true})
	addrs := []string{freeAddr(t), freeAddr(t)}
	var configs []string
	for i, addr := range addrs {
		configs = append(configs, filepath.Join(parent, fmt.Sprintf("fdl-mirror-%d.yaml", i)))
		writeDaemonConfig(t, configs[i], addr, m)
	}
	// The first daemon reads upstream at 200 KB/s, so its run lasts
	// seconds however fast the disk: a local mirror of this size is
	// written in well under the second daemon's start-up otherwise.
	f, err := os.OpenFile(configs[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("    bwlimit: 200k\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()

	first := startDaemon(t, configs[0], addrs[0])
	dataDir := filepath.Join(m.sink, "data", generate.SchemaName, generate.TableName)
	waitUntil(t, "the first daemon to be copying", 60*time.Second, func() bool {
		entries, _ := os.ReadDir(dataDir)
		return len(entries) >= 10
	})
	second := startDaemon(t, configs[1], addrs[1])
	waitUntil(t, "the second daemon locked out", 30*time.Second, func() bool {
		return scrape(t, second.addr)[`fdl_mirror_runs_total{mirror="large",result="locked"}`] >= 1
	})
	if scrape(t, first.addr)[`fdl_mirror_running{mirror="large"}`] != 1 {
		t.Fatal("the first daemon's run ended before the kill: make the upstream larger")
	}
	killed := time.Now()
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	copied := len(fdltest.Files(t, m.sink))
	t.Logf("SIGKILL with %d of %d files mirrored", copied, len(fdltest.Files(t, m.up)))

	waitUntil(t, "the second daemon to finish the mirror", 120*time.Second, func() bool {
		return scrape(t, second.addr)[`fdl_mirror_runs_total{mirror="large",result="success"}`] >= 1
	})
	t.Logf("finished by the second daemon %s after the kill", time.Since(killed).Round(time.Millisecond))
	metrics := scrape(t, second.addr)
	if n := metrics[`fdl_mirror_runs_total{mirror="large",result="failed"}`]; n != 0 {
		t.Errorf("the second daemon counted %v failed runs", n)
	}
	if code, took := second.stop(t, syscall.SIGTERM); code != 0 || took > 15*time.Second {
		t.Errorf("SIGTERM: exit %d after %s", code, took)
	}
	assertOneWriterAtATime(t, lockSpans(t, killed, first.stderr.String(), second.stderr.String()))
	fdltest.AssertMirrored(t, m.up, m.sink, nil)
	if res := run(t, "verify", m.sink); res.code != 0 {
		t.Errorf("verify: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// The same on S3 (Versity): the killed daemon's lock object stays behind,
// the other replica is locked out until it expires (lock_ttl), then takes
// it over and finishes the mirror.
func TestDaemonReplicaTakesAnS3MirrorOverOnceTheKilledOnesLockExpires(t *testing.T) {
	if testing.Short() {
		t.Skip("large sync skipped in -short mode")
	}
	s3 := testserver.S3(t)
	bucket := s3.Bucket(t)
	parent := t.TempDir()
	up := filepath.Join(parent, "upstream")
	gen(t, up, generate.Options{Versions: 4, FilesPerVersion: 300, RowsPerFile: 10, FastParquet: true, Tags: true})
	sinkURL := s3.URL(bucket, "mirror")
	const ttl = 3 * time.Second
	addrs := []string{freeAddr(t), freeAddr(t)}
	var configs []string
	for i, addr := range addrs {
		configs = append(configs, filepath.Join(parent, fmt.Sprintf("fdl-mirror-%d.yaml", i)))
		text := fmt.Sprintf("listen: %s\nmirrors:\n  - name: large\n    source: %s\n    sink: %q\n    schedule: \"@every 1s\"\n    concurrency: 2\n    lock_ttl: %s\n",
			addr, up, sinkURL, ttl)
		if err := os.WriteFile(configs[i], []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dataObjects := func() int {
		out, err := s3.Client().ListObjectsV2(t.Context(), &awss3.ListObjectsV2Input{
			Bucket: aws.String(bucket), Prefix: aws.String("mirror/data/")})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Contents)
	}

	first := startDaemon(t, configs[0], addrs[0])
	waitUntil(t, "the first daemon to be copying", 60*time.Second, func() bool { return dataObjects() >= 10 })
	second := startDaemon(t, configs[1], addrs[1])
	waitUntil(t, "the second daemon locked out", 30*time.Second, func() bool {
		return scrape(t, second.addr)[`fdl_mirror_runs_total{mirror="large",result="locked"}`] >= 1
	})
	if scrape(t, first.addr)[`fdl_mirror_running{mirror="large"}`] != 1 {
		t.Fatal("the first daemon's run ended before the kill: make the upstream larger")
	}
	killed := time.Now()
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	t.Logf("SIGKILL with %d data files in the S3 mirror", dataObjects())

	waitUntil(t, "the second daemon to finish the mirror", 180*time.Second, func() bool {
		return scrape(t, second.addr)[`fdl_mirror_runs_total{mirror="large",result="success"}`] >= 1
	})
	t.Logf("finished by the second daemon %s after the kill (lock_ttl %s)", time.Since(killed).Round(time.Millisecond), ttl)
	if n := scrape(t, second.addr)[`fdl_mirror_runs_total{mirror="large",result="failed"}`]; n != 0 {
		t.Errorf("the second daemon counted %v failed runs", n)
	}
	if code, took := second.stop(t, syscall.SIGTERM); code != 0 || took > 15*time.Second {
		t.Errorf("SIGTERM: exit %d after %s", code, took)
	}
	if !strings.Contains(second.stderr.String(), "taking over an expired lock") {
		t.Error("the second daemon did not take over the dead one's lock: it did not wait for it to expire")
	}
	spans := lockSpans(t, killed, first.stderr.String(), second.stderr.String())
	assertOneWriterAtATime(t, spans)
	for sink, ss := range spans {
		for _, s := range ss {
			if s.daemon == 1 && s.from.Before(killed) {
				t.Errorf("%s: the second daemon held the lock from %s, before the kill", sink, s.from.Format(time.StampMilli))
			}
		}
	}
	if res := run(t, "verify", sinkURL); res.code != 0 {
		t.Errorf("verify the S3 mirror: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	back := filepath.Join(parent, "back")
	if res := run(t, "sync", sinkURL, back); res.code != 0 {
		t.Fatalf("bringing the S3 mirror back: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	fdltest.AssertMirrored(t, up, back, nil)
}
