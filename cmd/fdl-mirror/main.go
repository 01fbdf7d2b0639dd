// Command fdl-mirror mirrors FDL repositories: sync, prune, verify, daemon,
// status, version. This package parses flags and prints; the engine decides.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
)

// Exit codes, the same for every command.
const (
	exitOK      = 0 // everything mirrored / verified / current
	exitRefused = 1 // something refused, failed, or behind
	exitUsage   = 2 // usage or configuration error
)

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

const usage = `fdl-mirror: a read-only mirror of FDL repositories

usage:
  fdl-mirror sync [flags] SOURCE SINK [SINK...]
                                          mirror once (SOURCE: path, file://, s3://, gs://, http(s)://),
                                          to each SINK, reading the upstream once
  fdl-mirror sync --config FILE [--mirror NAME]
  fdl-mirror prune [--dry-run] [--max-delete N] SOURCE SINK
                                          remove from SINK what SOURCE withdrew (refs, expired or
                                          deleted versions, data files only they needed)
  fdl-mirror prune --config FILE [--mirror NAME]
  fdl-mirror verify [flags] TARGET        check a repository or mirror, trusting nothing
  fdl-mirror status SOURCE SINK | --config FILE
  fdl-mirror daemon --config FILE         run every configured mirror on its schedule
  fdl-mirror daemon --config FILE --check check the config and exit
  fdl-mirror version

Run 'fdl-mirror COMMAND -h' for a command's flags.
Exit codes: 0 all good, 1 something refused, failed or behind, 2 usage or configuration error.
`

// commands are the commands that take flags, by name. docs/usage.md has a
// section for each, naming every flag (TestUsageDocumentsEveryFlag).
var commands = map[string]func(args []string) int{
	"sync":   cmdSync,
	"prune":  cmdPrune,
	"verify": cmdVerify,
	"status": cmdStatus,
	"daemon": cmdDaemon,
}

// defaultMemoryLimit is a soft limit on the Go heap (GOMEMLIMIT overrides
// it): the garbage collector works harder near it rather than let a long
// run's heap double. DuckDB's own memory is bounded per catalog apart, in
// its reader.
//
// The heap's growth between collections is Go's default (GOGC=100). It was
// 50 while DuckDB ran in this process, when the medium S3->S3 benchmark
// peaked over 150 MiB with 100; with catalogs read in their own process,
// 50 cost this process 12 % more CPU in that run (and 8 % in a medium
// first mirror on a tmpfs) for 7 MiB less peak (99 against 106 MiB), below
// the peak of its readers either way.
const defaultMemoryLimit = 96 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(exitUsage)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var code int
	if run, ok := commands[cmd]; ok {
		os.Exit(run(args))
	}
	switch cmd {
	case "version", "--version", "-version":
		fmt.Println("fdl-mirror", versionString())
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "fdl-mirror: unknown command %q\n\n%s", cmd, usage)
		code = exitUsage
	}
	os.Exit(code)
}

func versionString() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", ""
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			return "dev-" + rev + dirty + " (" + info.GoVersion + ")"
		}
		return "dev (" + info.GoVersion + ")"
	}
	return "dev"
}
