package catalog

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	gosync "sync"
	"sync/atomic"
	"syscall"
)

// ReaderProgram is the catalog reader's own binary (cmd/fdl-mirror-
// catalog-reader), installed beside fdl-mirror: the reader code and what
// it links (DuckDB, SQLite, the sandbox), nothing of the stores' SDKs.
// A reader starts once per catalog, and the mirror's binary spends most
// of its start in the initializers of packages a reader never uses
// (gRPC, OpenTelemetry, the AWS and GCS SDKs). OpenSSH split its
// per-connection code into sshd-session for the same reason.
//
// Where it is not beside fdl-mirror (a `go install` of cmd/fdl-mirror
// alone, a package's test binary), or is not of the same build, the
// mirror's own binary is re-executed instead, as it was before: the
// reader argument (readerCommand) makes any binary that links this
// package a reader. Both run the same reader code, confined alike; the
// reader binary only starts faster and smaller.
const ReaderProgram = "fdl-mirror-catalog-reader"

// readerExe is the program readers are started from.
type readerExe struct {
	path string // what exec runs: /proc/self/exe, or the reader binary's descriptor
	// Shown is its path for the operator, and Note why the mirror's own
	// binary is re-executed, where it is.
	Shown, Note string
}

// theReaderExe is found once, as the first reader starts, and kept open:
// every reader of this process runs the file that was found then, even
// once an upgrade replaces the one on disk with another build.
var theReaderExe = gosync.OnceValue(func() readerExe {
	exe, err := os.Executable()
	if err != nil {
		return selfExe("/proc/self/exe", fmt.Sprintf("where fdl-mirror's own binary is is not known: %v", err))
	}
	self, err := os.Stat("/proc/self/exe")
	if err != nil {
		return selfExe(exe, fmt.Sprintf("fdl-mirror's own binary: %v", err))
	}
	if l, _ := os.Readlink("/proc/self/exe"); strings.HasSuffix(l, " (deleted)") {
		// What is beside it now is of the build that replaced it.
		return selfExe(exe, "it was replaced since this process started")
	}
	info, _ := debug.ReadBuildInfo()
	return findReaderExe(exe, self, info)
})

// selfExe is the mirror's own binary, at exe, re-executed; note says why.
func selfExe(exe, note string) readerExe {
	return readerExe{path: "/proc/self/exe", Shown: exe, Note: note}
}

// findReaderExe opens the reader binary beside exe, the mirror's own
// binary (self, of the build info): the reader binary is used where it
// is a regular file that nobody may replace who may not replace the
// mirror's own binary (its owner, and who may write it), built alike
// (sameBuild). Else the mirror's own binary, and the note says why.
func findReaderExe(exe string, self os.FileInfo, info *debug.BuildInfo) readerExe {
	selfExe := func(note string) readerExe { return selfExe(exe, note) }
	path := filepath.Join(filepath.Dir(exe), ReaderProgram)
	f, err := os.Open(path)
	if err != nil {
		return selfExe(fmt.Sprintf("no %s: %v", ReaderProgram, err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return selfExe(fmt.Sprintf("%s: %v", path, err))
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	selfSt, selfOK := self.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return selfExe(path + " is not a regular file")
	case !ok || !selfOK || st.Uid != selfSt.Uid && st.Uid != 0:
		return selfExe(path + " is owned by another user than fdl-mirror's own binary")
	case fi.Mode().Perm()&0o022&^self.Mode().Perm() != 0 || fi.Mode().Perm()&0o020 != 0 && st.Gid != selfSt.Gid:
		return selfExe(fmt.Sprintf("%s may be written by more users than fdl-mirror's own binary (mode %v)", path, fi.Mode().Perm()))
	}
	theirs, err := buildinfo.Read(f)
	if err != nil {
		return selfExe(fmt.Sprintf("%s: reading its build: %v", path, err))
	}
	if info == nil {
		return selfExe("fdl-mirror's own build is not known")
	}
	if d := sameBuild(info, theirs); d != "" {
		return selfExe(fmt.Sprintf("%s is of another build: %s", path, d))
	}
	exec, err := keepForExec(f)
	if err != nil {
		return selfExe(fmt.Sprintf("%s: %v", path, err))
	}
	return readerExe{path: exec, Shown: path}
}

// sameBuild says how the reader binary's build differs from the
// mirror's: the Go release, the main module's version and VCS state,
// the build settings but -ldflags (which set the mirror's version
// string), or the version of a module the reader links. "" where they
// do not.
func sameBuild(mine, theirs *debug.BuildInfo) string {
	if mine.GoVersion != theirs.GoVersion {
		return fmt.Sprintf("Go %s, fdl-mirror's %s", theirs.GoVersion, mine.GoVersion)
	}
	if mine.Main.Path != theirs.Main.Path || mine.Main.Version != theirs.Main.Version || mine.Main.Sum != theirs.Main.Sum {
		return fmt.Sprintf("module %s %s, fdl-mirror's %s %s", theirs.Main.Path, theirs.Main.Version, mine.Main.Path, mine.Main.Version)
	}
	settings := func(bi *debug.BuildInfo) map[string]string {
		m := map[string]string{}
		for _, s := range bi.Settings {
			if s.Key != "-ldflags" {
				m[s.Key] = s.Value
			}
		}
		return m
	}
	a, b := settings(mine), settings(theirs)
	for k := range merge(a, b) {
		if a[k] != b[k] {
			return fmt.Sprintf("build setting %s=%q, fdl-mirror's %q", k, b[k], a[k])
		}
	}
	deps := map[string]string{}
	for _, m := range mine.Deps {
		deps[m.Path] = m.Version + " " + m.Sum
	}
	for _, m := range theirs.Deps {
		if v, ok := deps[m.Path]; !ok || v != m.Version+" "+m.Sum {
			return fmt.Sprintf("module %s %s, fdl-mirror's %q", m.Path, m.Version, v)
		}
	}
	return ""
}

func merge(a, b map[string]string) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

// ReaderNow says which program catalog readers are started from: the
// reader binary's path, or fdl-mirror's own with why.
func ReaderNow() (path, note string) {
	e := currentReaderExe()
	return e.Shown, e.Note
}

// readerBinary, once UseReaderBinary has set it, is the program readers
// start from in place of theReaderExe's.
var readerBinary atomic.Pointer[readerExe]

// UseReaderBinary makes this process start its readers from the reader
// binary at path, whatever its build. It is for the test binaries of the
// packages that read catalogs (fdltest.UseReaderBinary): a test binary
// has no reader beside it and would re-execute itself, a binary built
// with -race that runs every initializer of the packages it tests, for
// about three times a reader binary's start. The mirror never calls it:
// it finds its reader beside itself and checks its build (theReaderExe).
func UseReaderBinary(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	exec, err := keepForExec(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	readerBinary.Store(&readerExe{path: exec, Shown: path})
	return nil
}

// currentReaderExe is the program readers start from now.
func currentReaderExe() readerExe {
	if e := readerBinary.Load(); e != nil {
		return *e
	}
	return theReaderExe()
}
