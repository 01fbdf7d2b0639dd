package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// A lease is not a lock (issue 27): a run paused past its object-store
// lock's lifetime wakes up believing it holds it, and only the store can
// refuse what it then writes. Each test stops a run (SIGSTOP, through the
// fault proxy) at a chosen request, lets other runs do their work over
// the expired lock, then lets the stopped run go on, on Versity S3 and
// fake-gcs-server, several rounds each.

// fenceTTL is the lock_ttl of the run a test stops (A): short, so a
// takeover comes soon after it is stopped.
const fenceTTL = 2 * time.Second

// otherTTL is the lock_ttl of the runs that are not stopped (B: a test's
// first sync, and the run that takes A's expired lock over). Whether B
// may take A's lock over is judged by A's expiry, never B's own lock_ttl,
// so B needs no short one; with 2 s, a renewal that waited over a second
// for a loaded fake-gcs-server lost B's lock in a first sync (one full
// make test in several, beside other test runs).
const otherTTL = 30 * time.Second

// fenceStore is a store the paused run reaches through a fault proxy and
// the others directly.
type fenceStore struct {
	name   string
	direct func(prefix string) string // sink address for the other runs
	// paused returns the paused run's sink address and environment,
	// through proxy.
	paused func(prefix string) (addr string, env []string)
	proxy  *testserver.FaultProxy
}

// configs writes two configurations of a mirror of up at prefix: B's
// sink (returned) reached directly, A's through the proxy with env.
func (st fenceStore) configs(t *testing.T, parent, up, prefix string) (sink string, env []string, configA, configB string) {
	t.Helper()
	sink = st.direct(prefix)
	pausedSink, env := st.paused(prefix)
	return sink, env, writeFenceConfig(t, parent, "a", up, pausedSink), writeFenceConfigTTL(t, parent, "b", up, sink, otherTTL)
}

func fenceStores(t *testing.T) []fenceStore {
	t.Helper()
	s3 := testserver.S3(t)
	s3Bucket := s3.Bucket(t)
	s3Proxy := testserver.NewFaultProxy(t, s3.Endpoint)
	gcs := testserver.GCS(t)
	gcsBucket := gcs.Bucket(t)
	gcsProxy := testserver.NewFaultProxy(t, gcs.Endpoint)
	gcsProxy.TargetHost = true // fake-gcs-server routes by host
	return []fenceStore{
		{
			name:   "s3",
			direct: func(prefix string) string { return s3.URL(s3Bucket, prefix) },
			paused: func(prefix string) (string, []string) {
				return strings.Replace(s3.URL(s3Bucket, prefix), url.QueryEscape(s3.Endpoint), url.QueryEscape(s3Proxy.URL), 1), nil
			},
			proxy: s3Proxy,
		},
		{
			name:   "gcs",
			direct: func(prefix string) string { return gcs.URL(gcsBucket, prefix) },
			paused: func(prefix string) (string, []string) {
				return gcs.URL(gcsBucket, prefix), []string{"STORAGE_EMULATOR_HOST=" + strings.TrimPrefix(gcsProxy.URL, "http://")}
			},
			proxy: gcsProxy,
		},
	}
}

// writeFenceConfig writes a config of one mirror, m, with lock_ttl
// fenceTTL, and returns its path.
func writeFenceConfig(t *testing.T, dir, name, source, sink string) string {
	t.Helper()
	return writeFenceConfigTTL(t, dir, name, source, sink, fenceTTL)
}

// writeFenceConfigTTL is writeFenceConfig with lock_ttl ttl.
func writeFenceConfigTTL(t *testing.T, dir, name, source, sink string, ttl time.Duration) string {
	t.Helper()
	p := filepath.Join(dir, name+".yaml")
	text := fmt.Sprintf("listen: 127.0.0.1:0\nmirrors:\n  - name: m\n    source: %s\n    sink: %q\n    schedule: \"@every 1h\"\n    concurrency: 2\n    lock_ttl: %s\n    lock_wait: 60s\n",
		source, sink, ttl)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// pausedRun is a run of the binary that the proxy stops at a request.
type pausedRun struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
	code   int
	pause  *testserver.Pause
}

// startPaused starts the binary with args and env, to be stopped by proxy
// at the first request match accepts.
func startPaused(t *testing.T, proxy *testserver.FaultProxy, match func(*http.Request) bool, env []string, args ...string) *pausedRun {
	t.Helper()
	return startStopped(t, proxy.StopOn, match, env, args...)
}

// startStopped is startPaused with the proxy's way of stopping the run
// (FaultProxy.StopOn, StopAfterAnswer, ...).
func startStopped(t *testing.T, stop func(testing.TB, int, func(*http.Request) bool) *testserver.Pause, match func(*http.Request) bool, env []string, args ...string) *pausedRun {
	t.Helper()
	p := &pausedRun{out: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.pause = stop(t, p.cmd.Process.Pid, match)
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// waitStopped waits until the run is stopped at its request.
func (p *pausedRun) waitStopped(t *testing.T) {
	t.Helper()
	select {
	case <-p.pause.Stopped():
	case <-p.exited:
		t.Fatalf("the run exited (%d) before it reached the request it is to be stopped at\n%s", p.code, p.out.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("the run never reached the request it is to be stopped at\n%s", p.out.String())
	}
}

// resumeAndWait lets the stopped run go on, and waits for its end.
func (p *pausedRun) resumeAndWait(t *testing.T) {
	t.Helper()
	p.pause.Resume()
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the resumed run did not finish\n%s", p.out.String())
	}
}

var gcsUploadName = regexp.MustCompile(`"name"\s*:\s*"([^"]+)"`)

// writeOf matches a request that writes an object whose key (the
// bucket's, prefix included) want accepts: an S3 PUT (path style) or a
// GCS upload, whose object name is in the query or in the metadata part
// of its body.
func writeOf(want func(key string) bool) func(*http.Request) bool {
	return func(r *http.Request) bool {
		if strings.HasPrefix(r.URL.Path, "/upload/") {
			if r.Method != http.MethodPost && r.Method != http.MethodPut {
				return false
			}
			if name := r.URL.Query().Get("name"); name != "" {
				return want(name)
			}
			body, err := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if err != nil {
				return false
			}
			m := gcsUploadName.FindSubmatch(body)
			return m != nil && want(string(m[1]))
		}
		if r.Method != http.MethodPut {
			return false
		}
		_, key, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		return ok && want(key)
	}
}

// readObject reads one object of the store at addr; "" when absent.
func readObject(t *testing.T, addr, name string) string {
	t.Helper()
	r, closeR, err := location.Open(context.Background(), addr, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeR()
	b, err := backend.ReadAll(context.Background(), r, name, 1<<20)
	if backend.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// refsJSONMain is main's value in the refs.json at addr.
func refsJSONMain(t *testing.T, addr string) string {
	t.Helper()
	refs, _, err := repo.ParseRefsJSON([]byte(readObject(t, addr, repo.RefsFile)))
	if err != nil {
		t.Fatalf("%s: refs.json: %v", addr, err)
	}
	return refs[generate.MainRef]
}

// Scenario 1, stale refs: run A is stopped at its first write of stage
// two (after its lock check); run B takes the expired lock over and moves
// main on; A, resumed, must not write main back to its older value.
func TestPausedRunCannotMoveARefBackOverAnotherRunsWork(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and takes over runs on the test servers")
	}
	const rounds = 4
	for _, st := range fenceStores(t) {
		t.Run(st.name, func(t *testing.T) {
			for round := range rounds {
				parent := t.TempDir()
				up := filepath.Join(parent, "upstream")
				genCopy(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 10, FastParquet: true})
				prefix := fmt.Sprintf("refs-%d", round)
				sink, env, configA, configB := st.configs(t, parent, up, prefix)
				if res := run(t, "sync", "--config", configB, "--mirror", "m"); res.code != 0 {
					t.Fatalf("first sync: exit %d\n%s%s", res.code, res.stdout, res.stderr)
				}
				older, err := generate.AddVersion(t.Context(), up, 1, generate.Options{RowsPerFile: 10, FastParquet: true})
				if err != nil {
					t.Fatal(err)
				}
				// A stops at whichever write of stage two comes first.
				stageTwo := writeOf(func(key string) bool {
					name := strings.TrimPrefix(key, prefix+"/")
					return strings.HasPrefix(name, "refs/") || name == repo.RefsFile || name == "HEAD" || name == backend.ReservedPrefix+"refs-moving"
				})
				a := startPaused(t, st.proxy, stageTwo, env, "sync", "--config", configA, "--mirror", "m", "--log-level", "debug")
				a.waitStopped(t)
				newer, err := generate.AddVersion(t.Context(), up, 1, generate.Options{RowsPerFile: 10, FastParquet: true})
				if err != nil {
					t.Fatal(err)
				}
				b := run(t, "sync", "--config", configB, "--mirror", "m", "--log-level", "debug")
				if b.code != 0 || !strings.Contains(b.stderr, "taking over an expired lock") {
					t.Fatalf("round %d: run B: exit %d, want 0 after taking A's lock over\n%s%s", round, b.code, b.stdout, b.stderr)
				}
				if got := strings.TrimSpace(readObject(t, sink, generate.MainRef)); got != newer {
					t.Fatalf("round %d: after B, main is %s, want %s", round, got, newer)
				}
				a.resumeAndWait(t)
				mainFile := strings.TrimSpace(readObject(t, sink, generate.MainRef))
				mainJSON := refsJSONMain(t, sink)
				t.Logf("round %d: A stopped at %s; A then exited %d; main: file …%s, refs.json …%s (B's …%s, A's …%s)",
					round, a.pause.Request, a.code, idTail(mainFile), idTail(mainJSON), idTail(newer), idTail(older))
				if mainFile != newer || mainJSON != newer {
					t.Errorf("round %d: the resumed run A moved main back: ref file %s, refs.json %s; B published %s (A's was %s)\nA said:\n%s",
						round, mainFile, mainJSON, newer, older, a.out.String())
				}
				if a.code != 1 {
					t.Errorf("round %d: the resumed run A exited %d, want 1 (lost its lock)\n%s", round, a.code, a.out.String())
				}
				if res := run(t, "verify", sink); res.code != 0 {
					t.Errorf("round %d: verify: exit %d\n%s%s", round, res.code, res.stdout, res.stderr)
				}
			}
		})
	}
}

// Scenario 2, data loss: run A is stopped just before it writes the
// version.json of V2, which needs the data files of W, a version upstream
// withdrew (its branch deleted, its folder gone); a prune takes A's lock
// over and removes W. A, resumed, publishes V2; the next sync moves main
// to it. The mirror must still hold every data file V2 names.
func TestPruneOverAPausedSyncKeepsTheFilesOfItsVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and takes over runs on the test servers")
	}
	const rounds = 2 // per store
	for _, st := range fenceStores(t) {
		t.Run(st.name, func(t *testing.T) {
			for round := range rounds {
				wt := newWithdrawnTip(t, st, fmt.Sprintf("prune-%d", round))
				up, r, w, v2, prefix, sink := wt.up, wt.repo, wt.w, wt.v2, wt.prefix, wt.sink
				env, configA, configB := wt.env, wt.configA, wt.configB

				a := startPaused(t, st.proxy, writeOf(func(key string) bool {
					return key == prefix+"/"+repo.VersionFile(v2, repo.RecordFile)
				}), env, "sync", "--config", configA, "--mirror", "m", "--log-level", "debug")
				a.waitStopped(t)
				pr := run(t, "prune", "--lock-wait", "60s", "--log-level", "debug", up, sink)
				if pr.code != 0 {
					t.Fatalf("round %d: prune: exit %d\n%s%s", round, pr.code, pr.stdout, pr.stderr)
				}
				a.resumeAndWait(t)
				after := run(t, "sync", "--config", configB, "--mirror", "m")
				mainFile := strings.TrimSpace(readObject(t, sink, generate.MainRef))
				t.Logf("round %d: A stopped at %s, exited %d; the sync after exited %d; main …%s (V2 …%s)", round, a.pause.Request, a.code, after.code, idTail(mainFile), idTail(v2))
				if after.code != 0 {
					t.Logf("round %d: the sync after: exit %d\n%s", round, after.code, tail(after.stdout+after.stderr, 12))
				}
				var missing []string
				for _, f := range r.only[w] {
					if readObject(t, sink, f) == "" {
						missing = append(missing, f)
					}
				}
				if len(missing) > 0 {
					t.Errorf("round %d: the prune removed %d data files that V2 (main: %v) names: %v\nprune said:\n%s",
						round, len(missing), mainFile == v2, missing, pr.stderr)
				}
				if res := run(t, "verify", sink); res.code != 0 {
					t.Errorf("round %d: verify after the sync that followed (exit %d): exit %d\n%s%s", round, after.code, res.code, res.stdout, res.stderr)
				}
				if after.code != 0 || mainFile != v2 {
					t.Errorf("round %d: the sync after exited %d with main at %s, want 0 and V2 %s", round, after.code, mainFile, v2)
				}
			}
		})
	}
}

// Scenario 3, another mirror's uploads: a mirror nested in the prefix of
// another (s3://b/outer/inner/, and one inside the outer's data_dir) is
// stopped in the middle of a multipart upload; the outer mirror's run,
// which aborts the stale uploads of earlier runs, runs meanwhile with a
// lock_ttl shorter than the pause. The nested mirror's upload must
// survive, and its run finish. S3 only: GCS has no uploads to abort.
func TestSyncAbortsNoUploadOfANestedMirror(t *testing.T) {
	if testing.Short() {
		t.Skip("stops runs on the test servers")
	}
	s3 := testserver.S3(t)
	bucket := s3.Bucket(t)
	proxy := testserver.NewFaultProxy(t, s3.Endpoint)
	parent := t.TempDir()
	upOuter := filepath.Join(parent, "upstream-outer")
	gen(t, upOuter, generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 10, FastParquet: true})
	upInner := filepath.Join(parent, "upstream-inner")
	// One data file of 20 MiB: a multipart upload of three parts.
	gen(t, upInner, generate.Options{Versions: 1, FilesPerVersion: 1, RowsPerFile: 10, FastParquet: true, LargeFiles: []int64{20 << 20}})
	for round, nested := range []string{"outer/inner", "outer/data/inner"} {
		outer := s3.URL(bucket, "outer")
		innerPrefix := nested
		inner := s3.URL(bucket, innerPrefix)
		pausedInner := strings.Replace(inner, url.QueryEscape(s3.Endpoint), url.QueryEscape(proxy.URL), 1)
		// The nested mirror's lease outlasts its pause, so that it goes on
		// after it: a run paused past its own lease may stop or go on,
		// as its renewal or its next lease check comes first (both are
		// safe), and its upload is then not what this test is about.
		// Mirrors of one bucket may well keep different lock_ttls.
		configInner := writeFenceConfigTTL(t, parent, fmt.Sprintf("inner-%d", round), upInner, pausedInner, time.Minute)
		configOuter := writeFenceConfig(t, parent, fmt.Sprintf("outer-%d", round), upOuter, outer)
		if round > 0 {
			// The outer mirror has work again: a new version.
			if _, err := generate.AddVersion(t.Context(), upOuter, 1, generate.Options{RowsPerFile: 10, FastParquet: true}); err != nil {
				t.Fatal(err)
			}
		}
		uploadPart := func(r *http.Request) bool {
			return r.Method == http.MethodPut && r.URL.Query().Has("partNumber") && strings.HasPrefix(r.URL.Path, "/"+bucket+"/"+innerPrefix+"/")
		}
		a := startPaused(t, proxy, uploadPart, nil, "sync", "--config", configInner, "--mirror", "m", "--log-level", "debug")
		a.waitStopped(t)
		time.Sleep(fenceTTL + 1100*time.Millisecond) // the upload is older than the outer's lock_ttl (S3 keeps seconds)
		o := run(t, "sync", "--config", configOuter, "--mirror", "m", "--log-level", "debug")
		if o.code != 0 {
			t.Fatalf("round %d: the outer mirror's sync: exit %d\n%s%s", round, o.code, o.stdout, o.stderr)
		}
		a.resumeAndWait(t)
		t.Logf("round %d: the nested mirror at %s stopped at %s, exited %d", round, innerPrefix, a.pause.Request, a.code)
		if strings.Contains(o.stderr, "aborted an incomplete multipart upload") {
			t.Errorf("round %d: the outer mirror aborted an upload:\n%s", round, grepLines(o.stdout+o.stderr, "abort"))
		}
		if a.code != 0 {
			t.Errorf("round %d: the nested mirror's run exited %d\n%s", round, a.code, a.out.String())
		}
		if res := run(t, "verify", inner); res.code != 0 {
			t.Errorf("round %d: verify the nested mirror: exit %d\n%s%s", round, res.code, res.stdout, res.stderr)
		}
	}
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// idTail is the end of a version id, which tells apart versions made in
// the same millisecond (a UUIDv7 starts with its time).
func idTail(id string) string { return id[max(0, len(id)-8):] }

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var keep []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, sub) {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// A ref moves only to a version whose data files are in the mirror now,
// not to any folder with version.json: here the mirror holds the tip
// complete but one of its data files was lost since (a prune over a
// paused run, a hand), and main still names the tip's parent. The sync
// refuses to move main, naming --repair; sync --repair copies the file
// back and moves it.
func TestRefMovesOnlyToAVersionWhoseFilesAreInTheMirror(t *testing.T) {
	up, sink := filepath.Join(t.TempDir(), "upstream"), filepath.Join(t.TempDir(), "mirror")
	g := genCopy(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 10, FastParquet: true})
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("sync: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	parent, tip := g.Versions[0], g.Versions[1]
	// The mirror as a run left it that published the tip and stopped
	// before its refs: main at the parent, in its file and refs.json.
	writeFile(t, filepath.Join(sink, generate.MainRef), parent+"\n")
	writeFile(t, filepath.Join(sink, repo.RefsFile), string(repo.RefsJSON(repo.Refs{generate.MainRef: parent})))
	lost := g.DataFiles[len(g.DataFiles)-1]
	if err := os.Remove(filepath.Join(sink, lost)); err != nil {
		t.Fatal(err)
	}

	res := run(t, "sync", up, sink)
	if got := strings.TrimSpace(readObject(t, sink, generate.MainRef)); got != parent {
		t.Fatalf("main moved to %s, a version with %s missing (exit %d)\n%s", got, lost, res.code, res.stdout)
	}
	if res.code == 0 || !strings.Contains(res.stdout, "--repair") || !strings.Contains(res.stdout, tip) {
		t.Errorf("the refusal: exit %d, want non-zero naming the version and --repair\n%s%s", res.code, res.stdout, res.stderr)
	}
	if res := run(t, "sync", "--repair", up, sink); res.code != 0 {
		t.Fatalf("sync --repair: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if got := strings.TrimSpace(readObject(t, sink, generate.MainRef)); got != tip {
		t.Errorf("after sync --repair main is %s, want %s", got, tip)
	}
	if res := run(t, "verify", sink); res.code != 0 {
		t.Errorf("verify: exit %d\n%s", res.code, res.stdout)
	}
}

// withdrawnTip is the mirror both pause tests of a withdrawn version start
// from: synced once (by B, allow_rewind) from a repository whose main then
// moves from v3 to V2 on W, a version on branch "old" that upstream then
// withdraws (its branch deleted, its folder gone). With W gone, V2's
// descent from v3 is unknown to the mirror.
type withdrawnTip struct {
	up               string
	repo             *branchedRepo
	w, v2            string // W and V2's ids
	prefix, sink     string // the mirror's prefix and its direct address
	env              []string
	configA, configB string // the paused run's config, and the others'
}

func newWithdrawnTip(t *testing.T, st fenceStore, prefix string) withdrawnTip {
	t.Helper()
	parent := t.TempDir()
	wt := withdrawnTip{up: filepath.Join(parent, "upstream"), prefix: prefix}
	wt.repo = newBranchedRepo(t, wt.up, 3, "old")
	wt.w = wt.repo.branches["refs/heads/old"]
	wt.sink, wt.env, wt.configA, wt.configB = st.configs(t, parent, wt.up, prefix)
	appendFile(t, wt.configB, "    allow_rewind: true\n")
	if res := run(t, "sync", "--config", wt.configB, "--mirror", "m"); res.code != 0 {
		t.Fatalf("first sync: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	// Upstream: V2 on W, on main; then W's branch and folder go.
	writeFile(t, filepath.Join(wt.up, "refs/heads/main"), wt.w+"\n")
	v2, err := generate.AddVersion(t.Context(), wt.up, 1, generate.Options{RowsPerFile: 10, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	wt.v2 = v2
	wt.repo.deleteBranch(t, "refs/heads/old")
	return wt
}
