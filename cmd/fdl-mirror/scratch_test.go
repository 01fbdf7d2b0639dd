package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// stallingUpstream serves dir over HTTP; while stall is set, a GET of a
// catalog sends its first 64 KiB and then nothing until the client goes.
func stallingUpstream(t *testing.T, dir string) (addr string, stall *atomic.Bool) {
	t.Helper()
	stall = &atomic.Bool{}
	stall.Store(true)
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stall.Load() && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/ducklake.duckdb") {
			st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(r.URL.Path)))
			if err != nil {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
			w.WriteHeader(http.StatusOK)
			w.Write(make([]byte, 64<<10))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/", stall
}

// runFolders lists the run folders in a scratch place.
func runFolders(t *testing.T, place string) []string {
	t.Helper()
	entries, err := os.ReadDir(place)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "run-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// killDuringCatalogDownload starts the binary with args and TMPDIR=tmpdir,
// waits until a catalog's temporary copy has bytes in place, runs
// whileAlive (if any), and kills it with SIGKILL: nothing of its own
// clean-up runs.
func killDuringCatalogDownload(t *testing.T, tmpdir, place string, whileAlive func(), args ...string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmpdir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		matches, _ := filepath.Glob(filepath.Join(place, "run-*", "catalogs-*", "catalog-*"))
		if len(matches) > 0 {
			if st, err := os.Stat(matches[0]); err == nil && st.Size() > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no catalog download appeared in %s", place)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if whileAlive != nil {
		whileAlive()
	}
	if err := cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if got := runFolders(t, place); len(got) != 1 {
		t.Fatalf("after SIGKILL: run folders %v in %s, want the killed run's", got, place)
	}
}

func runWithTMPDIR(t *testing.T, tmpdir string, args ...string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmpdir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fdl-mirror %v: %v\n%s", args, err, out)
	}
}

// A sync killed with SIGKILL while a catalog downloads leaves its
// temporary copy behind; the next run in the same place removes it. For a
// local mirror the place is the mirror's .fdl-mirror/scratch/ and TMPDIR
// stays empty; for a dry run it is $TMPDIR/fdl-mirror-<uid>/.
func TestKilledRunsCatalogsAreRemovedByTheNextRun(t *testing.T) {
	_, up, sink := layout(t)
	gen(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 5, FastParquet: true})
	addr, stall := stallingUpstream(t, up)

	t.Run("local mirror", func(t *testing.T) {
		stall.Store(true)
		tmpdir := t.TempDir()
		place := filepath.Join(sink, ".fdl-mirror", "scratch")
		killDuringCatalogDownload(t, tmpdir, place, nil, "sync", "--log-level", "error", addr, sink)
		stall.Store(false)
		runWithTMPDIR(t, tmpdir, "sync", "--log-level", "error", addr, sink)
		if got := runFolders(t, place); len(got) != 0 {
			t.Errorf("after the next run: run folders %v left in %s", got, place)
		}
		if entries, _ := os.ReadDir(tmpdir); len(entries) != 0 {
			t.Errorf("runs into a local mirror wrote to TMPDIR: %v", entries)
		}
	})

	t.Run("dry run", func(t *testing.T) {
		stall.Store(true)
		tmpdir := t.TempDir()
		dry := filepath.Join(t.TempDir(), "missing-mirror")
		place := filepath.Join(tmpdir, "fdl-mirror-"+strconv.Itoa(os.Getuid()))
		// A run starting in the same place (verify uses it too) while
		// the first is alive leaves the live run's folder alone.
		alive := func() {
			before := runFolders(t, place)
			runWithTMPDIR(t, tmpdir, "verify", "--log-level", "error", up)
			if after := runFolders(t, place); len(before) != 1 || len(after) != 1 || after[0] != before[0] {
				t.Errorf("a run started beside a live one: run folders %v before, %v after; want the live run's kept", before, after)
			}
		}
		killDuringCatalogDownload(t, tmpdir, place, alive, "sync", "--dry-run", "--log-level", "error", addr, dry)
		stall.Store(false)
		runWithTMPDIR(t, tmpdir, "sync", "--dry-run", "--log-level", "error", addr, dry)
		if got := runFolders(t, place); len(got) != 0 {
			t.Errorf("after the next run: run folders %v left in %s", got, place)
		}
		if st, err := os.Stat(place); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, %v; want a 0700 folder", place, st.Mode(), err)
		}
		if _, err := os.Stat(dry); !os.IsNotExist(err) {
			t.Errorf("the dry runs made the mirror: %v", err)
		}
	})
}
