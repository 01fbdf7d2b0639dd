package sync_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	fdlmirror "github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsink "github.com/fdl-mirror/fdl-mirror/internal/sink"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// noIDRepo generates a repository whose fdl.json has no id, as a
// publisher that never set one writes it.
func noIDRepo(t *testing.T, dir string, versions int) *generate.Repo {
	t.Helper()
	g, err := generate.Generate(context.Background(), dir, generate.Options{Versions: versions, FilesPerVersion: 2, RowsPerFile: 5, FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, repo.SettingsFile)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "id")
	raw, _ = json.Marshal(doc)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

func recordedSource(t *testing.T, sink string) string {
	t.Helper()
	l, err := local.Open(sink)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rec, err := fdlsink.NewReader(l, nil).State().SourceRecord(context.Background())
	if err != nil || rec == nil {
		t.Fatalf("source record: %v %v", rec, err)
	}
	return rec.Address
}

func sinkMain(t *testing.T, dir string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(dir, "refs/heads/main"))
	return strings.TrimSpace(string(b))
}

// Two repositories without an id are never merged into one sink: the
// first run records its source's address in .fdl-mirror/source.json, and
// a run from another address stops (exit 1) naming both addresses and
// --force, before writing anything.
func TestASinkWithoutIDRefusesAnotherSource(t *testing.T) {
	parent := t.TempDir()
	a, b, sink := filepath.Join(parent, "a"), filepath.Join(parent, "b"), filepath.Join(parent, "mirror")
	ga := noIDRepo(t, a, 1)
	gb := noIDRepo(t, b, 2)
	ctx := context.Background()
	if rep, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: a, Sink: sink}}, nil, nil); err != nil || !rep.OK() {
		t.Fatalf("first run: %v %+v", err, rep)
	}
	if got := recordedSource(t, sink); got != a {
		t.Errorf("recorded source %q, want %q", got, a)
	}

	for _, dry := range []bool{true, false} {
		rep, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: b, Sink: sink}, DryRun: dry}, nil, nil)
		var other *fdlsink.OtherSourceError
		var fatal *fdlsync.FatalError
		if !errors.As(err, &fatal) || !errors.As(err, &other) {
			t.Fatalf("dry run %v from another address: err %v, want a FatalError of another source", dry, err)
		}
		if other.Recorded != a || other.Source != b {
			t.Errorf("refusal names %q and %q, want %q and %q", other.Recorded, other.Source, a, b)
		}
		for _, want := range []string{a, b, "--force", "force"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal does not name %q: %v", want, err)
			}
		}
		if rep != nil && (len(rep.VersionsPublished) > 0 || len(rep.RefsMoved) > 0) {
			t.Errorf("the refused run published %v, moved %+v", rep.VersionsPublished, rep.RefsMoved)
		}
	}
	for _, id := range gb.Versions {
		if _, err := os.Stat(filepath.Join(sink, "versions", id)); !os.IsNotExist(err) {
			t.Errorf("version %s of the other repository is in the sink: %v", id, err)
		}
	}
	if got := sinkMain(t, sink); got != ga.Versions[0] {
		t.Errorf("main is %s, want the first repository's %s", got, ga.Versions[0])
	}
	if got := recordedSource(t, sink); got != a {
		t.Errorf("a refused run changed the record to %q", got)
	}
}

// The same source given another way (relative, file://, a trailing
// slash) is the same source.
func TestTheSameSourceAnotherWayIsAccepted(t *testing.T) {
	parent := t.TempDir()
	a, sink := filepath.Join(parent, "a"), filepath.Join(parent, "mirror")
	noIDRepo(t, a, 1)
	ctx := context.Background()
	if _, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: a, Sink: sink}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	t.Chdir(parent)
	for _, addr := range []string{"a", "./a/", "file://" + a + "/", a + "/."} {
		if rep, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: addr, Sink: sink}}, nil, nil); err != nil || !rep.OK() {
			t.Errorf("source %q: %v %+v", addr, err, rep)
		}
	}
}

// --force mirrors the other address and records it, but bypasses no
// branch policy: main, whose new value does not descend from the
// mirror's, is still refused as diverged; its versions are mirrored.
func TestForceTakesTheNewSourceButNotItsDivergedBranch(t *testing.T) {
	parent := t.TempDir()
	a, b, sink := filepath.Join(parent, "a"), filepath.Join(parent, "b"), filepath.Join(parent, "mirror")
	ga := noIDRepo(t, a, 1)
	gb := noIDRepo(t, b, 1)
	ctx := context.Background()
	if _, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: a, Sink: sink}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	rep, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: b, Sink: sink}, Force: true}, nil, nil)
	if err != nil {
		t.Fatalf("forced run: %v", err)
	}
	if got := recordedSource(t, sink); got != b {
		t.Errorf("after --force the record is %q, want %q", got, b)
	}
	diverged := false
	for _, r := range rep.Refused {
		if r.Ref == "refs/heads/main" && r.Reason == fdlsync.ReasonDiverged {
			diverged = true
		}
	}
	if !diverged {
		t.Errorf("main not refused as diverged under --force: %+v", rep.Refused)
	}
	if got := sinkMain(t, sink); got != ga.Versions[0] {
		t.Errorf("main is %s under --force, want it left at %s", got, ga.Versions[0])
	}
	if _, err := os.Stat(filepath.Join(sink, repo.VersionFile(gb.Versions[0], repo.RecordFile))); err != nil {
		t.Errorf("the new source's version was not mirrored: %v", err)
	}
	// The first address is now the other one.
	if _, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: a, Sink: sink}}, nil, nil); err == nil {
		t.Error("after --force recorded b, a run from a was accepted")
	}
}

// A mirror made before the address was recorded (fdl.json without id, no
// record) adopts the source of its next run, even one with nothing to
// copy, and refuses another after it.
func TestAMirrorWithoutRecordAdoptsItsNextSource(t *testing.T) {
	parent := t.TempDir()
	a, b, sink := filepath.Join(parent, "a"), filepath.Join(parent, "b"), filepath.Join(parent, "mirror")
	noIDRepo(t, a, 1)
	noIDRepo(t, b, 1)
	ctx := context.Background()
	if _, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: a, Sink: sink}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(sink, ".fdl-mirror", fdlsink.SourceFile)); err != nil {
		t.Fatal(err)
	}
	if rep, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: a, Sink: sink}}, nil, nil); err != nil || rep.FilesCopied != 0 {
		t.Fatalf("run with nothing to copy: %v %+v", err, rep)
	}
	if got := recordedSource(t, sink); got != a {
		t.Errorf("recorded %q, want %q", got, a)
	}
	if _, err := fdlmirror.Run(ctx, fdlmirror.Job{Stores: fdlmirror.Stores{Source: b, Sink: sink}}, nil, nil); err == nil {
		t.Error("another source accepted after the record was made")
	}
}

// With an id upstream, the id decides and no address is recorded: the
// same repository may be read from any address.
func TestARepositoryWithIDRecordsNoSource(t *testing.T) {
	parent := t.TempDir()
	a, sink := filepath.Join(parent, "a"), filepath.Join(parent, "mirror")
	if _, err := generate.Generate(context.Background(), a, generate.Options{Versions: 1, FilesPerVersion: 1, RowsPerFile: 5, FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := fdlmirror.Run(context.Background(), fdlmirror.Job{Stores: fdlmirror.Stores{Source: a, Sink: sink}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sink, ".fdl-mirror", fdlsink.SourceFile)); !os.IsNotExist(err) {
		t.Errorf("a source was recorded for a repository with an id: %v", err)
	}
}

// Addresses are compared cleaned: credentials, query and trailing slash
// dropped, scheme and host lower-cased, local paths absolute.
func TestCleanAddress(t *testing.T) {
	wd, _ := os.Getwd()
	for in, want := range map[string]string{
		"https://user:secret@Data.Example.ORG/Towns/?token=x#frag": "https://data.example.org/Towns",
		"HTTP://data.example.org/towns":                            "http://data.example.org/towns",
		"s3://Bucket/prefix/?endpoint=http://127.0.0.1:1&region=x": "s3://bucket/prefix",
		"gs://bucket/prefix/":                                      "gs://bucket/prefix",
		"rel/dir/":                                                 filepath.Join(wd, "rel/dir"),
		"file:///srv/mirror/../up/":                                "/srv/up",
	} {
		if got := location.Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}
