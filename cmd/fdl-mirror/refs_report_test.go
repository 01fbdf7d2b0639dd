package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// The report compares every upstream ref with the mirror after the run:
// the ref whose version was refused is behind with the mirror's old value,
// the others current. The daemon's status page shows this list.
func TestSyncReportComparesEveryRef(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 3, Tags: true})
	bad := repo.Versions[len(repo.Versions)-1] // refs/heads/main's version
	f, err := os.OpenFile(filepath.Join(up, "versions", bad, "ducklake.duckdb"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()

	rep, res := syncJSON(t, up, sink)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1 (a version refused)\n%s", res.code, res.stderr)
	}
	if len(rep.Refs) != len(repo.Refs) {
		t.Fatalf("report compares %d refs, upstream has %d: %+v", len(rep.Refs), len(repo.Refs), rep.Refs)
	}
	behind := 0
	for _, r := range rep.Refs {
		if r.Upstream != repo.Refs[r.Ref] {
			t.Errorf("%s: upstream %s in the report, %s upstream", r.Ref, r.Upstream, repo.Refs[r.Ref])
		}
		if mine := readRef(t, sink, r.Ref); r.Mirror != mine {
			t.Errorf("%s: mirror %q in the report, %q in the mirror", r.Ref, r.Mirror, mine)
		}
		if r.Behind != (r.Mirror != r.Upstream) {
			t.Errorf("%s: behind %v with mirror %q and upstream %q", r.Ref, r.Behind, r.Mirror, r.Upstream)
		}
		if r.Behind {
			behind++
		}
	}
	if behind != rep.Lag || behind == 0 || behind == len(rep.Refs) {
		t.Errorf("%d refs behind, lag %d, of %d; want main behind and the tags current: %+v", behind, rep.Lag, len(rep.Refs), rep.Refs)
	}
}
