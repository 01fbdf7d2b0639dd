package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// A version whose parent is published in the mirror is read as its
// difference from the parent's catalog there (issue 29): an honest child
// has its one new file copied and no other file of the mirror touched; a
// hostile child whose catalog changes an old file's size has that file
// checked like a new one, refused as of another size than the mirror's
// (immutable), and nothing of the version published.
func TestSyncReadsAChildAsItsDifferenceFromThePublishedParent(t *testing.T) {
	_, up, sink := layout(t)
	r := gen(t, up, generate.Options{Versions: 2, FilesPerVersion: 3, FastParquet: true})
	if _, res := syncJSON(t, up, sink); res.code != 0 {
		t.Fatalf("first sync exited %d\n%s", res.code, res.stderr)
	}
	before := fdltest.States(t, sink)
	id, err := generate.AddVersion(context.Background(), up, 1, generate.Options{FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, res := syncJSON(t, up, sink, "--log-level", "debug")
	if res.code != 0 || !rep.OK() {
		t.Fatalf("sync of the child exited %d: %+v\n%s", res.code, rep.Refused, res.stderr)
	}
	if !strings.Contains(res.stderr, "catalog compared with its parent's") {
		t.Errorf("the child's catalog was not read as a difference:\n%s", res.stderr)
	}
	if got := readRef(t, sink, generate.MainRef); got != id {
		t.Fatalf("main is %q in the mirror, want %s", got, id)
	}
	after := fdltest.States(t, sink)
	var added []string
	for name, st := range after {
		if !strings.HasPrefix(name, "data/") {
			continue
		}
		if was, ok := before[name]; !ok {
			added = append(added, name)
		} else if was != st {
			t.Errorf("data file %s was written again", name)
		}
	}
	if len(added) != 1 || contains(r.DataFiles, added[0]) {
		t.Fatalf("data files added to the mirror: %v; want the child's one new file", added)
	}

	// The next child changes the size of an old file in its catalog.
	evil, err := generate.AddVersion(context.Background(), up, 1, generate.Options{FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	old := r.DataFiles[0]
	rewriteCatalog(t, up, evil, "UPDATE ducklake_data_file SET file_size_bytes = file_size_bytes + 1 WHERE path = '"+filepath.Base(old)+"'")
	before = fdltest.States(t, sink)
	rep, res = syncJSON(t, up, sink)
	if res.code != 1 {
		t.Fatalf("sync of the hostile child exited %d, want 1\n%s", res.code, res.stderr)
	}
	refused := false
	for _, ref := range rep.Refused {
		refused = refused || ref.Reason == fdlsync.ReasonSizeMismatch && ref.Version == evil && ref.File == old
	}
	if !refused {
		t.Fatalf("no %s refusal of %s over %s: %+v", fdlsync.ReasonSizeMismatch, evil, old, rep.Refused)
	}
	assertNotPublished(t, sink, evil)
	if got := readRef(t, sink, generate.MainRef); got != id {
		t.Errorf("main moved to %q", got)
	}
	if st := fdltest.States(t, sink)[old]; st != before[old] {
		t.Errorf("the old file %s was written: %+v, was %+v", old, st, before[old])
	}
}
