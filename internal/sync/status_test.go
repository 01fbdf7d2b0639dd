package sync_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// status (Compare) reads and judges upstream's refs as sync does: the refs
// a run refuses for breaking the rules (a content that climbs out, a
// version ID of two segments, a name outside the rules) are the refs
// status calls refused, behind, with no upstream value; the good ref
// beside them is current.
func TestStatusRefusesTheRefsSyncRefuses(t *testing.T) {
	_, up, mirror := fdltest.Layout(t)
	r := fdltest.GenerateCopy(t, up, generate.Options{FastParquet: true, Versions: 1})
	fdltest.WriteFile(t, filepath.Join(up, "refs/heads/evil"), "../../../escaped\n")
	fdltest.WriteFile(t, filepath.Join(up, "refs/heads/two"), r.Versions[0]+"/x\n")
	fdltest.WriteFile(t, filepath.Join(up, "refs/heads/Upper"), r.Versions[0]+"\n")
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	var syncRefused []string
	for _, x := range rep.Refused {
		if x.Reason == fdlsync.ReasonBadRef {
			syncRefused = append(syncRefused, x.Ref)
		}
	}
	slices.Sort(syncRefused)
	if want := []string{"refs/heads/Upper", "refs/heads/evil", "refs/heads/two"}; !slices.Equal(syncRefused, want) {
		t.Fatalf("sync refused %q, want %q", syncRefused, want)
	}

	src, err := local.Open(up)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := local.Open(mirror)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	got, err := fdlsync.Compare(context.Background(), source.New(src, nil, nil), sink.NewReader(dst, nil), repo.RefSelection{})
	if err != nil {
		t.Fatal(err)
	}
	var statusRefused []string
	for _, st := range got {
		switch st.Ref {
		case "refs/heads/main":
			if st.State != fdlsync.RefCurrent || st.Behind || st.Upstream != r.Versions[0] || st.Mirror != r.Versions[0] {
				t.Errorf("the good ref beside the bad ones: %+v, want current at %s", st, r.Versions[0])
			}
			continue
		}
		if st.State != fdlsync.RefRefused || !st.Behind || st.Upstream != "" || st.Mirror != "" {
			t.Errorf("a ref sync refuses: %+v, want refused, behind, no upstream or mirror value", st)
		}
		statusRefused = append(statusRefused, st.Ref)
	}
	if !slices.Equal(statusRefused, syncRefused) {
		t.Errorf("status refused %q, sync refused %q", statusRefused, syncRefused)
	}
	if len(got) != 4 || !slices.IsSortedFunc(got, func(a, b fdlsync.RefStatus) int {
		if a.Ref < b.Ref {
			return -1
		}
		return 1
	}) {
		t.Errorf("status listed %d refs (want 4), in name order: %+v", len(got), got)
	}
}
