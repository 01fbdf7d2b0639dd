package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// An ancestor refused while its catalog is missing upstream is reported by
// sync and status as pending (status exits 1: the mirror lacks history),
// and mirrored by the first sync after it comes back (issue 10).
func TestStatusReportsAPendingAncestorUntilMirrored(t *testing.T) {
	_, up, sink := layout(t)
	r := gen(t, up, generate.Options{Versions: 3, FastParquet: true})
	mid := r.Versions[1]
	cat := filepath.Join(up, "versions", mid, "ducklake.duckdb")
	os.Rename(cat, cat+".away")
	res := run(t, "sync", up, sink)
	if res.code != 1 || !strings.Contains(res.stdout, "PENDING version "+mid) {
		t.Fatalf("sync with an ancestor's catalog missing: exit %d\n%s", res.code, res.stdout)
	}
	st := run(t, "status", up, sink)
	if st.code != 1 || !strings.Contains(st.stdout, "PENDING version "+mid) || !strings.Contains(st.stdout, "1 ancestor versions not mirrored yet") {
		t.Fatalf("status: exit %d\n%s", st.code, st.stdout)
	}
	os.Rename(cat+".away", cat)
	if res := run(t, "sync", up, sink); res.code != 0 || strings.Contains(res.stdout, "PENDING") {
		t.Fatalf("sync after the catalog came back: exit %d\n%s", res.code, res.stdout)
	}
	if st := run(t, "status", up, sink); st.code != 0 || strings.Contains(st.stdout, "PENDING") {
		t.Fatalf("status after: exit %d\n%s", st.code, st.stdout)
	}
	if v := run(t, "verify", sink); v.code != 0 {
		t.Fatalf("verify: exit %d\n%s", v.code, v.stdout)
	}
}
