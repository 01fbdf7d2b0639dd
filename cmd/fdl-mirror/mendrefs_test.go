package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
)

// Issue 42: refs.json and the ref files never disagree after a run that
// stopped between them, for longer than the next run takes to start. A
// sync is killed with its write of refs.json held (main's ref file and
// the refs-moving marker written, refs.json still on the older version).
// The next run, through the fault proxy, which logs its requests in
// order, takes the dead run's expired lock over and writes refs.json
// from the ref files before it reads anything else of the mirror: no
// request of it under the lock touches versions/ before refs.json is
// written.
func TestTheRunAfterOneStoppedAmongItsRefsMendsRefsJSONFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("stops runs on the test servers")
	}
	for _, st := range fenceStores(t) {
		t.Run(st.name, func(t *testing.T) {
			parent := t.TempDir()
			up := filepath.Join(parent, "upstream")
			genCopy(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 10, FastParquet: true})
			const prefix = "mend"
			sinkAddr, env, configA, configB := st.configs(t, parent, up, prefix)
			if res := run(t, "sync", "--config", configB, "--mirror", "m"); res.code != 0 {
				t.Fatalf("first sync: exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			older := refsJSONMain(t, sinkAddr)
			newer, err := generate.AddVersion(t.Context(), up, 1, generate.Options{RowsPerFile: 10, FastParquet: true})
			if err != nil {
				t.Fatal(err)
			}
			isRefsJSON := func(key string) bool { return key == prefix+"/"+repo.RefsFile }
			a := startPaused(t, st.proxy, writeOf(isRefsJSON), env, "sync", "--config", configA, "--mirror", "m", "--log-level", "debug")
			a.waitStopped(t)
			if err := a.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-a.exited
			marker := backend.ReservedPrefix + sink.RefsMovingFile
			mainFile := strings.TrimSpace(readObject(t, sinkAddr, generate.MainRef))
			if mainFile != newer || refsJSONMain(t, sinkAddr) != older || readObject(t, sinkAddr, marker) == "" {
				t.Fatalf("after the kill: main's file %s, refs.json's main %s, marker %q; want %s, %s and a marker: the test tests nothing",
					mainFile, refsJSONMain(t, sinkAddr), readObject(t, sinkAddr, marker), newer, older)
			}

			// The next run's requests, in order.
			var mu sync.Mutex
			var seen []string
			isLock := func(key string) bool { return key == prefix+"/"+backend.ReservedPrefix+"lock" }
			lockWrite, refsWrite := writeOf(isLock), writeOf(isRefsJSON)
			st.proxy.OnRequest(func(r *http.Request) {
				what := ""
				switch {
				case lockWrite(r):
					what = "lock"
				case refsWrite(r):
					what = "refs.json"
				case strings.Contains(r.URL.Path, prefix+"/"+repo.VersionsDir) ||
					strings.HasPrefix(r.URL.Query().Get("prefix"), prefix+"/"+repo.VersionsDir):
					what = "versions"
				default:
					return
				}
				mu.Lock()
				seen = append(seen, what)
				mu.Unlock()
			})
			c := runEnv(t, env, "sync", "--config", configA, "--mirror", "m", "--log-level", "debug")
			st.proxy.OnRequest(nil)
			if c.code != 0 {
				t.Fatalf("the next sync: exit %d\n%s", c.code, tail(c.stdout+c.stderr, 20))
			}
			mu.Lock()
			order := slices.Clone(seen)
			mu.Unlock()
			locked := slices.Index(order, "lock")
			if locked < 0 {
				t.Fatalf("the next sync took no lock: %v", order)
			}
			under := order[locked:]
			mended, read := slices.Index(under, "refs.json"), slices.Index(under, "versions")
			t.Logf("the next run's requests from its lock on: %v", compactRuns(under))
			if mended < 0 || (read >= 0 && read < mended) {
				t.Errorf("under its lock the next run read versions/ (request %d) before it wrote refs.json (request %d): %v", read, mended, compactRuns(under))
			}
			if !strings.Contains(c.stderr, "refs.json mended from the ref files") {
				t.Errorf("the next run does not say it mended refs.json:\n%s", grepLines(c.stderr, "refs"))
			}
			if got := refsJSONMain(t, sinkAddr); got != newer {
				t.Errorf("after the next run refs.json's main is %s, want %s", got, newer)
			}
			if readObject(t, sinkAddr, marker) != "" {
				t.Errorf("after the next run %s is still there", marker)
			}
			if res := run(t, "verify", sinkAddr); res.code != 0 {
				t.Errorf("verify: exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
		})
	}
}

// compactRuns is a log of labels with repeats counted: [lock refs.json
// versions×3].
func compactRuns(labels []string) []string {
	var out []string
	for i := 0; i < len(labels); {
		j := i
		for j < len(labels) && labels[j] == labels[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s×%d", labels[i], j-i))
		} else {
			out = append(out, labels[i])
		}
		i = j
	}
	return out
}
