package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
)

// The command is tested as users run it: a built binary, its exit code,
// its output, and the folders it leaves.
var binary string

func TestMain(m *testing.M) {
	// The tests marked parallel (two daemon-replica tests) mostly wait:
	// all of them at once, rather than GOMAXPROCS (two on a small
	// machine) at a time, unless -parallel says otherwise.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", "8")
	}
	dir, err := os.MkdirTemp("", "fdl-mirror-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "fdl-mirror")
	// The catalog reader's binary beside it, as make installs them: the
	// tests' readers run it (internal/catalog, program.go). One go build
	// links both at once, statically as make does (Makefile's STATIC), and
	// without DWARF (-w), which no test reads: each link of DuckDB's cgo
	// binaries took some 16 s, 13 s without it.
	build := exec.Command("go", "build", "-ldflags=-w -linkmode external -extldflags '-static'",
		"-o", dir+string(filepath.Separator), ".", "../fdl-mirror-catalog-reader")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		panic("building fdl-mirror and its catalog reader: " + err.Error())
	}
	for _, b := range []string{binary, filepath.Join(dir, catalog.ReaderProgram)} {
		if _, err := os.Stat(b); err != nil {
			os.RemoveAll(dir)
			panic("go build left no " + b + ": " + err.Error())
		}
	}
	// Readers started in this process (fdltest.Complete's verify, for
	// one) run the same reader binary, not this -race test binary.
	if err := catalog.UseReaderBinary(filepath.Join(dir, catalog.ReaderProgram)); err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	code := m.Run()
	fdltest.RemoveTemplates()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	return runCtx(t, context.Background(), args...)
}

func runCtx(t *testing.T, ctx context.Context, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running fdl-mirror %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}
