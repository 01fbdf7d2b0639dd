package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// refuseSink runs a sync whose sink cannot be opened: a configuration
// error (exit 2) whose message names what is wrong.
func refuseSink(t *testing.T, up, sink, why string) {
	t.Helper()
	res := run(t, "sync", up, sink)
	if res.code != exitUsage || !fdltest.Contains(res.stderr, sink, why) {
		t.Fatalf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", res.code, exitUsage, why, res.stdout, res.stderr)
	}
}

// A .fdl-mirror that is a symbolic link into data/ would have the next run
// make its lock and temporary folder in data/ and clear data/tmp: the run
// refuses the sink instead, and leaves data/ as it was.
func TestSyncRefusesAMirrorFolderThatIsASymbolicLink(t *testing.T) {
	_, up, sink := layout(t)
	genCopy(t, up, generate.Options{Versions: 1})
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("first sync: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	newID, err := generate.AddVersion(context.Background(), up, 1, generate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// What sits in data/tmp must survive too.
	writeFile(t, filepath.Join(sink, "data/tmp/keep"), "mine")
	if err := os.RemoveAll(filepath.Join(sink, ".fdl-mirror")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data", filepath.Join(sink, ".fdl-mirror")); err != nil {
		t.Fatal(err)
	}
	before := fdltest.States(t, filepath.Join(sink, "data"))

	refuseSink(t, up, sink, ".fdl-mirror is a symbolic link")
	assertNotPublished(t, sink, newID)
	if after := fdltest.States(t, filepath.Join(sink, "data")); !reflect.DeepEqual(before, after) {
		t.Errorf("data/ changed:\nbefore %v\nafter  %v", before, after)
	}
}

// The same for .fdl-mirror/tmp alone.
func TestSyncRefusesATemporaryFolderThatIsASymbolicLink(t *testing.T) {
	_, up, sink := layout(t)
	genCopy(t, up, generate.Options{Versions: 1})
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("first sync: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	writeFile(t, filepath.Join(sink, "data/keep"), "mine")
	tmp := filepath.Join(sink, ".fdl-mirror/tmp")
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../data", tmp); err != nil {
		t.Fatal(err)
	}
	before := fdltest.States(t, filepath.Join(sink, "data"))
	refuseSink(t, up, sink, ".fdl-mirror/tmp is a symbolic link")
	if after := fdltest.States(t, filepath.Join(sink, "data")); !reflect.DeepEqual(before, after) {
		t.Errorf("data/ changed:\nbefore %v\nafter  %v", before, after)
	}
}
