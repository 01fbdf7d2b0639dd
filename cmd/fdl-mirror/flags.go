package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/httpstore"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
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
	if flagSetMade != nil {
		flagSetMade(fs)
	}
	return fs
}

// flagSetMade, when set, is given each command's FlagSet as it is made:
// the docs test collects the flags from it rather than from a list of its
// own, so that a flag added to a command and not to docs/usage.md fails.
var flagSetMade func(*flag.FlagSet)

// stringList is a repeatable flag (--http-header A --http-header B).
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ", ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// allowRedirectFlag is --http-allow-redirect, repeatable, shared by every
// command that reads an HTTP(S) source (sync, status, verify, prune):
// each entry is checked as it is given, so a bad one is a usage error.
type allowRedirectFlag []string

func (a *allowRedirectFlag) String() string { return strings.Join(*a, ", ") }
func (a *allowRedirectFlag) Set(v string) error {
	if err := httpstore.CheckAllowRedirect(v); err != nil {
		return err
	}
	*a = append(*a, v)
	return nil
}

func (a *allowRedirectFlag) register(fs *flag.FlagSet, what string) {
	fs.Var(a, "http-allow-redirect", "`HOST` or HOST:PORT an HTTP(S) "+what+" may redirect to besides its own origin (repeatable; never https to http)")
}

// catalogLimitFlags are the bounds on reading one catalog, shared by sync,
// verify and prune; zero keeps each default.
type catalogLimitFlags struct{ catalog.Limits }

func (c *catalogLimitFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&c.MaxFiles, "catalog-max-files", catalog.DefaultMaxFiles, "refuse a catalog listing more data and delete files than this")
	fs.DurationVar(&c.Timeout, "catalog-timeout", catalog.DefaultTimeout, "refuse a catalog whose reading takes longer than this")
	fs.Var(sizeFlag{&c.MemoryLimit}, "catalog-memory-limit", "DuckDB's memory limit for reading one catalog (default "+catalog.FormatBytes(catalog.DefaultMemoryLimit)+")")
	fs.Var(sizeFlag{&c.MaxSize}, "catalog-max-size", "refuse a catalog file larger than this (default "+catalog.FormatBytes(catalog.DefaultMaxSize)+")")
	fs.BoolVar(&c.RequireSandbox, "require-sandbox", false, "read no catalog in a reader without both Landlock and seccomp (config: require_sandbox)")
}

// check refuses limits that would refuse every catalog.
func (c *catalogLimitFlags) check() error {
	if c.MaxFiles <= 0 || c.Timeout <= 0 {
		return fmt.Errorf("--catalog-max-files and --catalog-timeout must be positive")
	}
	// Said once a run: a reader without a layer still runs apart, with
	// rlimits and an empty environment, and each version it reads is
	// refused where the sandbox is required.
	if l := catalog.ProbeSandbox(); len(l.Missing()) > 0 {
		what := "warning"
		if c.RequireSandbox {
			what = "--require-sandbox: no catalog will be read"
		}
		fmt.Fprintf(os.Stderr, "fdl-mirror: %s: catalog readers run %s\n", what, l)
	}
	return nil
}

// sizeFlag is a byte count given as 4GiB, 128MiB or a number of bytes.
type sizeFlag struct{ n *int64 }

func (s sizeFlag) String() string {
	if s.n == nil || *s.n == 0 {
		return ""
	}
	return catalog.FormatBytes(*s.n)
}

func (s sizeFlag) Set(v string) error {
	n, err := config.ParseSize(v)
	if err != nil {
		return err
	}
	*s.n = n
	return nil
}

// accessFlags say how the stores are reached besides their addresses,
// shared by sync, status, prune and verify.
type accessFlags struct {
	header         stringList
	allowRedirects allowRedirectFlag
	headerFile     string
	caFile         string
	insecureAuth   bool
}

// register adds the flags; what is the store they reach ("source",
// "target").
func (a *accessFlags) register(fs *flag.FlagSet, what string) {
	fs.Var(&a.header, "http-header", "`Name: value` sent to an HTTP(S) "+what+" (repeatable)")
	a.allowRedirects.register(fs, what)
	fs.StringVar(&a.headerFile, "http-header-file", "", "`file` of headers sent to an HTTP(S) "+what+", one \"Name: value\" a line, readable by its owner only: keeps a token out of argv")
	fs.StringVar(&a.caFile, "ca-file", "", "PEM `file` of certificates trusted besides the system's roots, for HTTPS "+what+"s and S3/GCS endpoints")
	fs.BoolVar(&a.insecureAuth, "http-allow-insecure-auth", false, "send headers and a password in the address over plain http:// to a host other than loopback")
}

// headers checks the CA file and returns the --http-header values, then
// the header file's.
func (a *accessFlags) headers() ([]string, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	flagged := []string(a.header)
	redact.HeaderSecrets(flagged)
	if a.headerFile == "" {
		return flagged, nil
	}
	fromFile, err := config.ReadHeaderFile(a.headerFile)
	if err != nil {
		return nil, fmt.Errorf("--http-header-file: %w", err)
	}
	return append(append([]string{}, flagged...), fromFile...), nil
}

// check refuses a CA file that holds no certificate, before any run.
func (a *accessFlags) check() error {
	if _, err := location.CertPool(a.caFile); err != nil {
		return fmt.Errorf("--ca-file: %w", err)
	}
	return nil
}

// storeFlags are how a command reaches and locks its stores and bounds
// the catalogs it reads, the command line's mirror.Stores, built in one
// place (stores) as a configured mirror's is in mirror.StoresOf. Each
// command registers the flags it reads; those it does not are zero, each
// store's default.
type storeFlags struct {
	access   accessFlags
	lockWait time.Duration
	retries  int
	limits   catalogLimitFlags
}

// registerRun registers the flags of a run that locks the mirror (sync,
// prune): the access flags for the source, --lock-wait, --retries and
// the catalog limits.
func (s *storeFlags) registerRun(fs *flag.FlagSet) {
	s.access.register(fs, "source")
	fs.DurationVar(&s.lockWait, "lock-wait", 0, "how long to wait for another run's lock on the sink")
	fs.IntVar(&s.retries, "retries", 0, "retries of one request on 5xx, 429, resets and timeouts, with backoff (0: the default, 8)")
	s.limits.register(fs)
}

// stores is the flags' mirror.Stores for the stores at source and sink
// ("" where the command has none): the CA file checked, the header file
// read.
func (s *storeFlags) stores(source, sink string) (mirror.Stores, error) {
	headers, err := s.access.headers()
	if err != nil {
		return mirror.Stores{}, err
	}
	return mirror.Stores{
		Source: source, Sink: sink, HTTPHeaders: headers, HTTPAllowRedirects: s.access.allowRedirects,
		HTTPAllowInsecureAuth: s.access.insecureAuth, CAFile: s.access.caFile,
		LockWait: s.lockWait, Retries: s.retries, CatalogLimits: s.limits.Limits,
	}, nil
}

// refuseUnreadWithConfig refuses, naming them, the flags given beside
// --config that the command does not read with it (read, besides
// --config, --mirror, --log-level and --json): each mirror's settings come
// from the file, and a flag dropped without a word (sync --config FILE
// --concurrency 2, --http-header, --catalog-timeout) would run with other
// settings than the operator asked for. It says whether it refused.
func refuseUnreadWithConfig(fs *flag.FlagSet, read ...string) bool {
	allowed := map[string]bool{"config": true, "mirror": true, "log-level": true, "json": true}
	for _, name := range read {
		allowed[name] = true
	}
	var unread []string
	fs.Visit(func(f *flag.Flag) {
		if !allowed[f.Name] {
			unread = append(unread, "--"+f.Name)
		}
	})
	if len(unread) == 0 {
		return false
	}
	fmt.Fprintf(os.Stderr, "fdl-mirror %s: not read with --config: %s; set it in the config file (docs/usage.md names its key beside the flag), or run without --config\n", fs.Name(), strings.Join(unread, ", "))
	return true
}
