package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// The command's side of a sync: its exit codes, its report on stdout and
// the messages a person reads. What the engine publishes and refuses is
// specified in internal/sync, calling sync.Run in-process.

// The scaffolding these tests share with internal/sync's.
var (
	layout             = fdltest.Layout
	gen                = fdltest.Generate
	readRef            = fdltest.ReadRef
	writeFile          = fdltest.WriteFile
	published          = fdltest.Published
	rewriteCatalog     = fdltest.RewriteCatalog
	assertNotPublished = fdltest.AssertNotPublished
	contains           = slices.Contains[[]string]
)

func syncJSON(t *testing.T, args ...string) (fdlsync.Report, result) {
	t.Helper()
	res := run(t, append([]string{"sync", "--json"}, args...)...)
	var rep fdlsync.Report
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("sync --json printed no report (exit %d): %v\nstdout: %s\nstderr: %s", res.code, err, res.stdout, res.stderr)
	}
	return rep, res
}

// refusal runs a sync that must refuse, and checks the exit code and that
// the message names the culprit.
func refusal(t *testing.T, up, sink string, culprit ...string) result {
	t.Helper()
	res := run(t, "sync", up, sink)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	if !fdltest.Contains(res.stdout+res.stderr, culprit...) {
		t.Errorf("no message naming %v:\nstdout: %s\nstderr: %s", culprit, res.stdout, res.stderr)
	}
	return res
}

// A refusal exits 1, and says on stdout which reason, which version and
// which file; --json carries the same refusal as the engine's report.
func TestSyncExitsOneNamingWhatItRefused(t *testing.T) {
	_, up, sink := layout(t)
	repo := genCopy(t, up, generate.Options{Versions: 2})
	bad := repo.Versions[1]
	fdltest.Append(t, filepath.Join(up, "versions", bad, "ducklake.duckdb"), []byte{0})
	res := refusal(t, up, sink, bad, "sha256 mismatch")
	if !strings.Contains(res.stdout, fdlsync.ReasonSHA256) {
		t.Errorf("the reason %s is not printed:\n%s", fdlsync.ReasonSHA256, res.stdout)
	}
	rep, again := syncJSON(t, up, sink)
	if again.code != 1 || len(rep.Refused) == 0 || rep.Refused[0].Reason != fdlsync.ReasonSHA256 || rep.Refused[0].Version != bad {
		t.Errorf("--json: exit %d, refused %+v; want exit 1 and %s refused for %s", again.code, rep.Refused, bad, fdlsync.ReasonSHA256)
	}
}

// A run stopped as a whole (the sink holds another repository) exits 1
// too, naming why, and writes nothing.
func TestSyncExitsOneWhenTheRunStops(t *testing.T) {
	_, up, sink := layout(t)
	genCopy(t, up, generate.Options{Versions: 1})
	other := `{"fdl": "0.1", "id": "0190aaaa-0000-7000-8000-000000000000"}`
	writeFile(t, filepath.Join(sink, "fdl.json"), other)
	refusal(t, up, sink, "another repository", "0190aaaa-0000-7000-8000-000000000000")
	if files := fdltest.Files(t, sink); len(files) != 1 {
		t.Errorf("the other repository's mirror was changed: %d files", len(files))
	}
}

func TestSyncDryRunWritesNothing(t *testing.T) {
	parent, up, sink := layout(t)
	genCopy(t, up, generate.Options{Versions: 2})
	res := run(t, "sync", "--dry-run", up, sink)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stdout, "would write refs/heads/main") {
		t.Errorf("dry run does not print its plan:\n%s", res.stdout)
	}
	if _, err := os.Stat(sink); !os.IsNotExist(err) {
		t.Errorf("dry run made the sink: %v", err)
	}
	_ = parent
}

func TestVerifyFindsAChangedCatalogAndATruncatedDataFile(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 2, FilesPerVersion: 2})
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("sync: exit %d", res.code)
	}
	if res := run(t, "verify", sink); res.code != 0 {
		t.Fatalf("verify of a good mirror: exit %d\n%s", res.code, res.stdout)
	}
	cat := filepath.Join(sink, "versions", repo.Versions[1], "ducklake.duckdb")
	f, _ := os.OpenFile(cat, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{1})
	f.Close()
	data := filepath.Join(sink, repo.DataFiles[0])
	st, _ := os.Stat(data)
	os.Truncate(data, st.Size()/2)

	res := run(t, "verify", sink)
	if res.code != 1 {
		t.Fatalf("verify: exit %d, want 1\n%s", res.code, res.stdout)
	}
	if !fdltest.Contains(res.stdout, repo.Versions[1], "sha256 mismatch") {
		t.Errorf("verify did not name the changed catalog:\n%s", res.stdout)
	}
	if !fdltest.Contains(res.stdout, repo.DataFiles[0], "bytes") {
		t.Errorf("verify did not name the truncated file:\n%s", res.stdout)
	}
}

func TestSyncTakesFileURLs(t *testing.T) {
	_, up, sink := layout(t)
	genCopy(t, up, generate.Options{Versions: 1})
	if res := run(t, "sync", "file://"+up, "file://"+sink); res.code != 0 {
		t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	fdltest.AssertMirrored(t, up, sink, nil)
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"sync"}, {"sync", "only-one"}, {"sync", "--no-such-flag", "a", "b"}, {"bogus"},
		{"sync", "a", "https://example.org/mirror/"}, {"verify"},
		{"sync", "--require-signatures", "a", "b"},
	} {
		if res := run(t, args...); res.code != 2 {
			t.Errorf("fdl-mirror %v: exit %d, want 2\n%s", args, res.code, res.stderr)
		}
	}
}
