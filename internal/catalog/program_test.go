package catalog

import (
	"context"
	"debug/buildinfo"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// buildReaderBinary builds cmd/fdl-mirror-catalog-reader into a folder
// of its own, and puts beside it a copy of it named fdl-mirror: a
// mirror's binary of the same build, which findReaderExe is shown.
func buildReaderBinary(t *testing.T) (dir string) {
	t.Helper()
	dir = t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, ReaderProgram), "../../cmd/fdl-mirror-catalog-reader")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the reader binary: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, ReaderProgram))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fdl-mirror"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// findIn is findReaderExe for the fdl-mirror of dir.
func findIn(t *testing.T, dir string) readerExe {
	t.Helper()
	self := filepath.Join(dir, "fdl-mirror")
	fi, err := os.Stat(self)
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	return findReaderExe(self, fi, info)
}

// A mirror with the reader binary beside it starts its readers from
// that binary, confined as the re-executed mirror's are, and reads the
// same catalog; the binary has none of the test binary's misbehaviours.
func TestReadersRunTheReaderBinaryBesideTheMirror(t *testing.T) {
	requireBothLayers(t)
	dir := buildReaderBinary(t)
	exe := findIn(t, dir)
	if exe.Note != "" || exe.Shown != filepath.Join(dir, ReaderProgram) || !strings.HasPrefix(exe.path, "/proc/self/fd/") {
		t.Fatalf("the reader binary beside the mirror is not used: %+v", exe)
	}
	p := generatedCatalog(t)
	self, err := Read(context.Background(), p, catalogName, Limits{})
	if err != nil {
		t.Fatal(err)
	}

	withKnobs(t, readerKnobs{exe: &exe})
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	proc, err := startReader(context.Background(), f, Limits{}.WithDefaults(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink("/proc/" + strconv.Itoa(proc.cmd.Process.Pid) + "/exe"); err != nil || got != exe.Shown {
		t.Errorf("the reader runs %q (%v), want %s", got, err, exe.Shown)
	}
	if want := ProbeSandbox(); proc.layers != want {
		t.Errorf("the reader binary's layers are %+v, the kernel gives %+v", proc.layers, want)
	}
	proc.kill("test")
	proc.wait()

	bin, err := Read(context.Background(), p, catalogName, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(bin, self) || len(bin.Files) == 0 {
		t.Errorf("the reader binary read\n%+v\nthe test binary's reader\n%+v", bin, self)
	}

	_, err = misbehavingRead(t, p, "segfault", Limits{})
	var re *ReaderError
	if !errors.As(err, &re) || re.Cause != CauseExit || !strings.Contains(re.Detail, "status 72") || !strings.Contains(re.Detail, "without them") {
		t.Errorf("the reader binary asked to misbehave: %v, want its refusal (exit 72)", err)
	}
}

// The mirror's own binary is re-executed where the reader binary beside
// it is missing, may be replaced by more users than the mirror's, or is
// of another build; the note says which.
func TestAMirrorWithoutItsReaderBinaryReExecutesItself(t *testing.T) {
	dir := buildReaderBinary(t)
	reader := filepath.Join(dir, ReaderProgram)
	if err := os.Chmod(reader, 0o775); err != nil {
		t.Fatal(err)
	}
	if exe := findIn(t, dir); exe.path != "/proc/self/exe" || !strings.Contains(exe.Note, "may be written by more users") {
		t.Errorf("a group-writable reader binary: %+v", exe)
	}
	if err := os.Chmod(reader, 0o755); err != nil {
		t.Fatal(err)
	}
	if exe := findIn(t, dir); exe.Note != "" {
		t.Fatalf("the reader binary is not used: %+v", exe)
	}
	if err := os.Remove(reader); err != nil {
		t.Fatal(err)
	}
	if exe := findIn(t, dir); exe.path != "/proc/self/exe" || exe.Shown != filepath.Join(dir, "fdl-mirror") || !strings.Contains(exe.Note, "no "+ReaderProgram) {
		t.Errorf("no reader binary: %+v", exe)
	}
	if err := os.Mkdir(reader, 0o755); err != nil {
		t.Fatal(err)
	}
	if exe := findIn(t, dir); exe.path != "/proc/self/exe" || !strings.Contains(exe.Note, "not a regular file") {
		t.Errorf("a folder named %s: %+v", ReaderProgram, exe)
	}

	// Run by hand, the reader binary says what it is for.
	out, err := exec.Command(filepath.Join(dir, "fdl-mirror")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "fdl-mirror starts this program") {
		t.Errorf("the reader binary run by hand: %v\n%s", err, out)
	}
}

// Two builds differ where their Go, module, settings (but -ldflags) or
// a module the reader links differ.
func TestSameBuild(t *testing.T) {
	mine := &debug.BuildInfo{GoVersion: "go1.26.8",
		Main: debug.Module{Path: "github.com/fdl-mirror/fdl-mirror", Version: "(devel)"},
		Deps: []*debug.Module{{Path: "github.com/duckdb/duckdb-go/v2", Version: "v2.5.0", Sum: "h1:a="},
			{Path: "cloud.google.com/go/storage", Version: "v1.50.0", Sum: "h1:b="}},
		Settings: []debug.BuildSetting{{Key: "CGO_ENABLED", Value: "1"}, {Key: "vcs.revision", Value: "c4b8bc0"}, {Key: "vcs.modified", Value: "false"}}}
	if d := sameBuild(mine, mine); d != "" {
		t.Fatalf("a build differs from itself: %s", d)
	}
	for _, tc := range []struct {
		change func(*debug.BuildInfo)
		want   string // "": the same build
	}{
		{func(b *debug.BuildInfo) { b.GoVersion = "go1.26.7" }, "Go go1.26.7"},
		{func(b *debug.BuildInfo) { b.Main.Version = "v9.9.9" }, "module github.com/fdl-mirror/fdl-mirror v9.9.9"},
		{func(b *debug.BuildInfo) { b.Deps[0].Version = "v2.4.0" }, "module github.com/duckdb/duckdb-go/v2 v2.4.0"},
		{func(b *debug.BuildInfo) { b.Deps[0].Sum = "h1:c=" }, "module github.com/duckdb/duckdb-go/v2 v2.5.0"},
		{func(b *debug.BuildInfo) {
			b.Deps = append(b.Deps, &debug.Module{Path: "example.com/m", Version: "v1.0.0"})
		}, "module example.com/m"},
		{func(b *debug.BuildInfo) { b.Settings[2].Value = "true" }, "build setting vcs.modified"},
		{func(b *debug.BuildInfo) {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "-race", Value: "true"})
		}, "build setting -race"},
		{func(b *debug.BuildInfo) {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "-ldflags", Value: "-X main.version=1"})
		}, ""},
		{func(b *debug.BuildInfo) { b.Deps = b.Deps[:1] }, ""}, // the reader links fewer modules
	} {
		theirs := *mine
		theirs.Deps = make([]*debug.Module, len(mine.Deps))
		for i, m := range mine.Deps {
			c := *m
			theirs.Deps[i] = &c
		}
		theirs.Settings = append([]debug.BuildSetting(nil), mine.Settings...)
		tc.change(&theirs)
		if d := sameBuild(mine, &theirs); tc.want == "" && d != "" || !strings.Contains(d, tc.want) {
			t.Errorf("sameBuild says %q, want %q", d, tc.want)
		}
	}
}
