package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// status judges upstream's refs as sync does: the refs sync refuses for
// breaking the rules are the refs status calls refused (behind: exit 1),
// shown inert, beside the good ref it calls current.
func TestStatusRefusesTheRefsSyncRefuses(t *testing.T) {
	_, up, sink := layout(t)
	r := gen(t, up, generate.Options{Versions: 1, FastParquet: true})
	writeFile(t, filepath.Join(up, "refs/heads/evil"), "../../../escaped\n")
	writeFile(t, filepath.Join(up, "refs/heads/Upper"), r.Versions[0]+"\n")
	rep, res := syncJSON(t, up, sink)
	var syncRefused []string
	for _, x := range rep.Refused {
		if x.Reason == fdlsync.ReasonBadRef {
			syncRefused = append(syncRefused, x.Ref)
		}
	}
	slices.Sort(syncRefused)
	if want := []string{"refs/heads/Upper", "refs/heads/evil"}; res.code != 1 || !slices.Equal(syncRefused, want) {
		t.Fatalf("sync: exit %d, refused %q; want exit 1 and %q", res.code, syncRefused, want)
	}

	res = run(t, "status", "--json", up, sink)
	var out struct {
		Behind bool                `json:"behind"`
		Refs   []fdlsync.RefStatus `json:"refs"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatal(err, res.stdout, res.stderr)
	}
	var statusRefused []string
	for _, st := range out.Refs {
		if st.State == fdlsync.RefRefused {
			statusRefused = append(statusRefused, st.Ref)
			if !st.Behind || st.Upstream != "" {
				t.Errorf("a refused ref: %+v, want behind with no upstream value", st)
			}
		} else if st.Ref != "refs/heads/main" || st.State != fdlsync.RefCurrent {
			t.Errorf("status: %+v, want refs/heads/main current", st)
		}
	}
	if res.code != 1 || !out.Behind || !slices.Equal(statusRefused, syncRefused) {
		t.Errorf("status --json: exit %d, behind %v, refused %q; want exit 1, behind, refused %q", res.code, out.Behind, statusRefused, syncRefused)
	}

	txt := run(t, "status", up, sink)
	for _, want := range []string{"behind on 2 of 3 refs", "refs/heads/evil", "refs/heads/Upper"} {
		if !strings.Contains(txt.stdout, want) {
			t.Errorf("status text lacks %q:\n%s", want, txt.stdout)
		}
	}
	if txt.code != 1 || strings.Count(txt.stdout, "refused") != 2 {
		t.Errorf("status text: exit %d, want 1 and two refused refs:\n%s", txt.code, txt.stdout)
	}
}
