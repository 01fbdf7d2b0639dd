package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// removalOf matches a request that removes an object whose key (the
// bucket's, prefix included) want accepts: an S3 DELETE (path style) or a
// GCS object DELETE.
func removalOf(want func(key string) bool) func(*http.Request) bool {
	return func(r *http.Request) bool {
		if r.Method != http.MethodDelete {
			return false
		}
		path := strings.TrimPrefix(r.URL.Path, "/")
		if rest, ok := strings.CutPrefix(path, "storage/v1/b/"); ok {
			_, name, ok := strings.Cut(rest, "/o/")
			return ok && want(name)
		}
		_, key, ok := strings.Cut(path, "/")
		return ok && want(key)
	}
}

var reportStart = regexp.MustCompile(`\{\s*"mirror"`)

// A prune stopped in its removals past its lease, while another run takes
// the lock over, must not go on removing when it wakes, and must not
// exit 0 (issue 42): it stops at its next removal, by its own clock,
// exits 1, and its JSON says the lock was lost and what it removed
// before it noticed: the one removal it had sent before the pause.
func TestAPruneThatLostItsLockStopsAndExitsOne(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and takes over runs on the test servers")
	}
	for _, st := range fenceStores(t) {
		t.Run(st.name, func(t *testing.T) {
			parent := t.TempDir()
			up := filepath.Join(parent, "upstream")
			r := newBranchedRepo(t, up, 3, "old")
			w := r.branches["refs/heads/old"]
			prefix := "lost"
			sink, env, configA, configB := st.configs(t, parent, up, prefix)
			if res := run(t, "sync", "--config", configB, "--mirror", "m"); res.code != 0 {
				t.Fatalf("first sync: exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			r.deleteBranch(t, "refs/heads/old")

			a := startPaused(t, st.proxy, removalOf(func(key string) bool {
				return strings.HasPrefix(key, prefix+"/") && key != prefix+"/"+lock.Name
			}), env, "prune", "--config", configA, "--mirror", "m", "--json", "--log-level", "error",
				"--now-unsafe-on-object-stores")
			a.waitStopped(t)
			// Past the lease, another run takes the lock over.
			time.Sleep(fenceTTL + fenceTTL/2)
			dst, closeDst, err := location.OpenWritable(context.Background(), sink, location.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer closeDst()
			thief := fmt.Sprintf(`{"owner":"thief","expires":%q,"token":"stolen"}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
			if err := dst.Put(context.Background(), lock.Name, strings.NewReader(thief), int64(len(thief))); err != nil {
				t.Fatal(err)
			}
			a.resumeAndWait(t)
			out := a.out.String()
			if a.code != 1 {
				t.Fatalf("the prune that lost its lock exited %d, want 1\n%s", a.code, out)
			}
			loc := reportStart.FindStringIndex(out)
			if loc == nil {
				t.Fatalf("no JSON report in the output:\n%s", out)
			}
			var rep struct {
				OK       bool     `json:"ok"`
				Error    string   `json:"error"`
				LockLost bool     `json:"lock_lost"`
				Removed  []string `json:"removed"`
				Maybe    []string `json:"maybe_removed"`
			}
			if err := json.NewDecoder(strings.NewReader(out[loc[0]:])).Decode(&rep); err != nil {
				t.Fatalf("report: %v\n%s", err, out)
			}
			t.Logf("stopped at %s; report: lock_lost %v, removed %v, maybe removed %v, error %q", a.pause.Request, rep.LockLost, rep.Removed, rep.Maybe, rep.Error)
			if rep.OK || !rep.LockLost || !strings.Contains(rep.Error, "lost the mirror's lock") {
				t.Errorf("report: ok %v, lock_lost %v, error %q; want a failed prune that says it lost the lock", rep.OK, rep.LockLost, rep.Error)
			}
			// The removal held across the pause landed; none after it.
			// Its answer came in as the run was stopped for the lost
			// lock, so the report lists it as removed or, where the
			// cancel won, as maybe removed: never as neither.
			if n := len(rep.Removed) + len(rep.Maybe); n != 1 {
				t.Errorf("the report lists %d objects removed or maybe removed, want only the 1 sent before the pause: removed %v, maybe %v", n, rep.Removed, rep.Maybe)
			}
			for _, name := range append(rep.Removed, rep.Maybe...) {
				if _, err := dst.Stat(context.Background(), strings.TrimPrefix(name, prefix+"/")); !backend.IsNotExist(err) {
					t.Errorf("%s, reported removed or maybe removed, is still in the mirror (stat: %v)", name, err)
				}
			}
			if _, err := backend.ReadAll(context.Background(), dst, repo.VersionFile(w, repo.RecordFile), 1<<20); err != nil {
				t.Errorf("the withdrawn version's record, removed after the prune woke: %v", err)
			}
			if got := readObject(t, sink, lock.Name); !strings.Contains(got, "stolen") {
				t.Errorf("the other run's lock was touched: %q", got)
			}
		})
	}
}
