package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// parseInterleaved parses flags that may come before, between or after the
// positional arguments ("sync SRC DST --json" reads as well as
// "sync --json SRC DST"), and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// newFlagSet makes a FlagSet whose errors are usage errors, and whose help
// names the command.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: fdl-mirror %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// stringList is a repeatable flag (--http-header A --http-header B).
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ", ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
