package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// deleteOf matches a request that removes an object whose key (the
// bucket's, prefix included) want accepts: an S3 DELETE (path style) or
// a GCS objects.delete.
func deleteOf(want func(key string) bool) func(*http.Request) bool {
	return func(r *http.Request) bool {
		if r.Method != http.MethodDelete {
			return false
		}
		p := r.URL.Path
		if rest, ok := strings.CutPrefix(p, "/storage/v1/b/"); ok {
			_, key, ok := strings.Cut(rest, "/o/")
			return ok && want(key)
		}
		_, key, ok := strings.Cut(strings.TrimPrefix(p, "/"), "/")
		return ok && want(key)
	}
}

// backdateCandidates moves every candidate's first sighting back by
// age: the grace (a day by default) passes without the test waiting it.
func backdateCandidates(t *testing.T, addr string, age time.Duration) int {
	t.Helper()
	var list sink.Candidates
	if err := json.Unmarshal([]byte(readObject(t, addr, backend.ReservedPrefix+sink.CandidatesFile)), &list); err != nil {
		t.Fatal(err)
	}
	for name, c := range list.Objects {
		c.Since = c.Since.Add(-age)
		list.Objects[name] = c
	}
	raw, err := json.Marshal(&list)
	if err != nil {
		t.Fatal(err)
	}
	putObject(t, addr, backend.ReservedPrefix+sink.CandidatesFile, string(raw))
	return len(list.Objects)
}

// The issue-42 interleaving, which lost files in 25 of 29 rounds before
// a sync made what it relies on its own: upstream moves main to V2, a
// child of W, and withdraws W. A prune lists W's objects; its grace
// passes (backdated). A second prune, through the fault proxy, is
// stopped in its removals of W's data files, one round per pause:
//   - at its first DELETE, held in flight;
//   - once its first DELETE was answered (the file removed), the answer
//     held;
//   - at a DELETE chosen at random, held;
//   - on a timer, 0–40 ms after its first DELETE was answered, wherever
//     it has got to.
//
// A sync takes the expired lock over and publishes V2, copying the
// listed files it needs again with new tokens. The prune resumes: a
// removal of it that comes after, conditional on the token it listed, is
// refused, it exits 1, and every ref resolves to a complete version.
func TestAPrunePausedInItsRemovalsLosesNoFileASyncNeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and takes over runs on the test servers")
	}
	type pauseAt struct {
		name  string
		start func(t *testing.T, st fenceStore, isW func(string) bool, files int, env []string, args ...string) *pausedRun
	}
	pauses := []pauseAt{
		{"the first removal held", func(t *testing.T, st fenceStore, isW func(string) bool, _ int, env []string, args ...string) *pausedRun {
			return startStopped(t, st.proxy.StopOn, deleteOf(isW), env, args...)
		}},
		{"the first removal's answer held", func(t *testing.T, st fenceStore, isW func(string) bool, _ int, env []string, args ...string) *pausedRun {
			return startStopped(t, st.proxy.StopAfterAnswer, deleteOf(isW), env, args...)
		}},
		{"a removal at random held", func(t *testing.T, st fenceStore, isW func(string) bool, files int, env []string, args ...string) *pausedRun {
			k, n := int64(1+rand.IntN(files)), atomic.Int64{}
			t.Logf("stopping at removal %d of %d", k, files)
			return startStopped(t, st.proxy.StopOn, deleteOf(func(key string) bool { return isW(key) && n.Add(1) == k }), env, args...)
		}},
		{"a timer after the first removal", func(t *testing.T, st fenceStore, isW func(string) bool, _ int, env []string, args ...string) *pausedRun {
			d := time.Duration(rand.IntN(40)) * time.Millisecond
			t.Logf("stopping %s after the first removal", d)
			later := func(t testing.TB, pid int, match func(*http.Request) bool) *testserver.Pause {
				return st.proxy.StopLater(t, pid, match, d)
			}
			return startStopped(t, later, deleteOf(isW), env, args...)
		}},
	}
	for _, st := range fenceStores(t) {
		t.Run(st.name, func(t *testing.T) {
			for round, pause := range pauses {
				wt := newWithdrawnTip(t, st, fmt.Sprintf("claims-%d", round))
				r, w, v2, prefix, sinkAddr := wt.repo, wt.w, wt.v2, wt.prefix, wt.sink
				env, configA, configB := wt.env, wt.configA, wt.configB

				if res := run(t, "prune", "--config", configB, "--mirror", "m"); res.code != 0 {
					t.Fatalf("round %d: the prune that lists W: exit %d\n%s%s", round, res.code, res.stdout, res.stderr)
				}
				if n := backdateCandidates(t, sinkAddr, 48*time.Hour); n < len(r.only[w])+1 {
					t.Fatalf("round %d: %d candidates listed; want W's version.json and its %d data files at least", round, n, len(r.only[w]))
				}
				onlyW := map[string]bool{}
				for _, f := range r.only[w] {
					onlyW[prefix+"/"+f] = true
				}
				a := pause.start(t, st, func(key string) bool { return onlyW[key] }, len(onlyW),
					env, "prune", "--config", configA, "--mirror", "m", "--log-level", "debug")
				a.waitStopped(t)
				b := run(t, "sync", "--config", configB, "--mirror", "m", "--json")
				a.resumeAndWait(t)
				mainFile := strings.TrimSpace(readObject(t, sinkAddr, generate.MainRef))
				t.Logf("round %d (%s): the prune stopped at %s, exited %d; the sync exited %d; main …%s (V2 …%s)",
					round, pause.name, a.pause.Request, a.code, b.code, idTail(mainFile), idTail(v2))
				if b.code != 0 || mainFile != v2 {
					t.Errorf("round %d: the sync over the paused prune exited %d with main at %s, want 0 and V2 %s\n%s", round, b.code, mainFile, v2, tail(b.stdout+b.stderr, 12))
				}
				if !strings.Contains(b.stdout, `"claimed"`) {
					t.Errorf("round %d: the sync's report claims nothing:\n%s", round, tail(b.stdout, 20))
				}
				if a.code != 1 {
					t.Errorf("round %d: the resumed prune exited %d, want 1 (its removal refused, the lock lost)\n%s", round, a.code, tail(a.out.String(), 12))
				}
				var missing []string
				for _, f := range r.only[w] {
					if readObject(t, sinkAddr, f) == "" {
						missing = append(missing, f)
					}
				}
				if len(missing) > 0 {
					t.Errorf("round %d: the paused prune removed %d data files V2 names: %v\n%s", round, len(missing), missing, tail(a.out.String(), 20))
				}
				if res := run(t, "verify", sinkAddr); res.code != 0 {
					t.Errorf("round %d: verify: exit %d\n%s%s", round, res.code, res.stdout, res.stderr)
				}
				if res := run(t, "sync", "--config", configB, "--mirror", "m"); res.code != 0 {
					t.Errorf("round %d: the next plain sync: exit %d\n%s", round, res.code, tail(res.stdout+res.stderr, 12))
				}
			}
		})
	}
}
