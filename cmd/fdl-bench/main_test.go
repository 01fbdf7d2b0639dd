package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// The local file-system calls of the report are strace's summary: the
// parsed total is strace's own, and the breakdown adds up to it.
func TestStraceSummaryOfARealRun(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (scripts/bench installs it)")
	}
	dir := t.TempDir()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "summary")
	cmd := exec.Command(strace, "-f", "-c", "--seccomp-bpf", "-e", "trace="+straceSet, "-o", out, "ls", "-l", dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("strace: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	total, detail, err := parseStraceSummary(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var want int64 = -1
	var sum int64
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[len(f)-1] == "total" {
			fmt.Sscan(f[3], &want)
		}
	}
	for _, part := range strings.Split(detail, ", ") {
		var name string
		var n int64
		if _, err := fmt.Sscan(part, &name, &n); err != nil {
			t.Fatalf("breakdown %q: %v", detail, err)
		}
		sum += n
	}
	if total != want || sum != total || total < 5 {
		t.Errorf("parsed total %d, strace's %d, breakdown sums to %d (%s); ls -l of 5 files stats each", total, want, sum, detail)
	}
}

// The refs repository is a valid one with its tags: ref files and
// refs.json agree, and the repository's reader sees every tag.
func TestAddTagsMakesRefsEveryReaderSees(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "up")
	r, err := generate.Generate(context.Background(), dir, generate.Options{Versions: 3, FilesPerVersion: 1, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := addTags(dir, r.Versions, 25); err != nil {
		t.Fatal(err)
	}
	st, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	fromFiles, bad, err := repo.ReadRefs(context.Background(), st)
	if err != nil || len(bad) != 0 {
		t.Fatalf("reading refs: %v %v", err, bad)
	}
	raw, err := os.ReadFile(filepath.Join(dir, repo.RefsFile))
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, _, err := repo.ParseRefsJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(fromJSON) != 26 || fromJSON["refs/tags/t000024"] != r.Versions[24%3] || fromJSON["refs/heads/main"] == "" {
		t.Fatalf("refs.json holds %d refs: %v", len(fromJSON), fromJSON)
	}
	for name, id := range fromJSON {
		if fromFiles[name] != id {
			t.Errorf("%s: refs.json says %s, the reader %s", name, id, fromFiles[name])
		}
	}
}
