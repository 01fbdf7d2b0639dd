package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/limiter"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// trustFlags are the signature flags shared by sync and verify.
type trustFlags struct {
	signers   string
	require   bool
	namespace string
}

func (t *trustFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.signers, "trusted-signers", "", "OpenSSH allowed_signers `file` of keys you trust, got from the publisher by another channel")
	fs.BoolVar(&t.require, "require-signatures", false, "refuse versions without a valid signature by a trusted key")
	fs.StringVar(&t.namespace, "signature-namespace", "fdl", "SSH signature namespace")
}

func cmdSync(args []string) int {
	fs := newFlagSet("sync", "sync [flags] SOURCE SINK [SINK...] | sync --config FILE [--mirror NAME | --shard I/N | --shards N]")
	concurrency := fs.Int("concurrency", 8, "files copied at once")
	dryRun := fs.Bool("dry-run", false, "print the plan; write nothing")
	force := fs.Bool("force", false, "mirror a source other than the one the sink was made from, where neither has a repository id (a repository that moved); records the new address")
	jsonOut := fs.Bool("json", false, "print a machine-readable summary on stdout")
	configPath := fs.String("config", "", "run the mirrors of this config `file` once")
	onlyMirror := fs.String("mirror", "", "with --config: only this mirror")
	notifyWait := fs.Duration("notify-wait", 30*time.Second, "with --config: how long to wait at exit for notifications still being sent")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	repair := fs.Bool("repair", false, "re-check every complete version's data files in the sink and copy back what is missing or of another size")
	var storeF storeFlags
	storeF.registerRun(fs)
	bwlimit := fs.String("bwlimit", "", "bandwidth limit of the run in bytes per second, shared by all transfers (e.g. 10M; K, M, G are powers of 1024; server-side copies are not limited)")
	var refPatterns, excludeRefs stringList
	fs.Var(&refPatterns, "refs", "mirror the refs matching `PATTERN` (repeatable; * within a segment, ** across; default refs/heads/** and refs/tags/**)")
	fs.Var(&excludeRefs, "exclude-refs", "do not mirror the refs matching `PATTERN` (repeatable)")
	allowRewind := fs.Bool("allow-rewind", false, "let branches follow upstream to a version that does not descend from the mirror's (rewound or diverged); the report still says so")
	var trust trustFlags
	trust.register(fs)
	var shardF shardFlags
	shardF.register(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return exitUsage
	}
	shard, ok := shardArgs(fs, "sync", &shardF, *configPath, *onlyMirror)
	if !ok {
		return exitUsage
	}
	if err := storeF.limits.check(); err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror sync:", shown(err))
		return exitUsage
	}
	log, err := newLogger(*logLevel, *jsonOut)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror sync:", shown(err))
		return exitUsage
	}
	defer log.Sync()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *configPath != "" {
		if len(pos) != 0 {
			fmt.Fprintln(os.Stderr, "fdl-mirror sync: --config takes no SOURCE or SINK")
			return exitUsage
		}
		if refuseUnreadWithConfig(fs, "shard", "shards", "dry-run", "force", "repair", "notify-wait") {
			return exitUsage
		}
		return syncFromConfig(ctx, *configPath, *onlyMirror, shard, configOverrides{dryRun: *dryRun, force: *force, repair: *repair}, *jsonOut, *notifyWait, log)
	}
	if len(pos) < 2 {
		fs.Usage()
		return exitUsage
	}
	if *concurrency < 1 {
		fmt.Fprintln(os.Stderr, "fdl-mirror sync: --concurrency must be at least 1")
		return exitUsage
	}
	rate, err := limiter.ParseRate(*bwlimit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror sync: --bwlimit:", shown(err))
		return exitUsage
	}
	for _, p := range append(append([]string{}, refPatterns...), excludeRefs...) {
		if err := repo.CheckRefPattern(p); err != nil {
			fmt.Fprintln(os.Stderr, "fdl-mirror sync:", shown(err))
			return exitUsage
		}
	}
	stores, err := storeF.stores(pos[0], "") // the sinks are RunSinks'
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror sync:", shown(err))
		return exitUsage
	}
	var rewind []string
	if *allowRewind {
		rewind = []string{"**"}
	}
	job := mirror.Job{
		Stores: stores, Refs: repo.RefSelection{Include: refPatterns, Exclude: excludeRefs}, AllowRewind: rewind, BWLimit: rate,
		TrustedSigners: trust.signers, RequireSignatures: trust.require, SignatureNamespace: trust.namespace,
		Concurrency: *concurrency, DryRun: *dryRun, Repair: *repair, Force: *force,
	}
	progress, done := newProgress(!*jsonOut)
	runs := mirror.RunSinks(ctx, job, pos[1:], log, progress)
	done()
	// A report per sink, in the order given (with --json, one object
	// each, as sync --config prints one per mirror); the exit code is the
	// worst of them, so a sink that failed fails the command.
	code := exitOK
	for i, r := range runs {
		job.Sink = r.Sink
		if !*jsonOut && i > 0 && r.Err != nil && r.Err == runs[i-1].Err {
			// The source's failure (or the trust settings'), which
			// RunSinks gives every sink alike: said once, and it counts
			// for each. With --json each sink keeps its object.
			code = max(code, exitFor(r.Err, false))
			continue
		}
		code = max(code, finishSync(os.Stdout, job, r.Report, r.Err, *jsonOut, log))
	}
	return code
}

// finishSync prints a run's summary and returns its exit code; shared by
// plain sync and sync --config.
func finishSync(w io.Writer, job mirror.Job, report *fdlsync.Report, err error, jsonOut bool, log *zap.Logger) int {
	var rep any = report
	if report == nil {
		rep = &fdlsync.Report{Source: redact.URL(job.Source), Sink: redact.URL(job.Sink)}
	}
	return finishRun(w, "sync", job.Name, rep, report != nil && !report.OK(), err, jsonOut, log, func() { printSummary(w, job, report, err) })
}

func printSummary(w io.Writer, job mirror.Job, r *fdlsync.Report, err error) {
	name := ""
	if job.Name != "" {
		name = job.Name + ": "
	}
	if r == nil {
		fmt.Fprintf(w, "%ssync %s -> %s failed: %s\n", name, redact.URL(job.Source), redact.URL(job.Sink), shown(err))
		return
	}
	verb := "copied"
	if r.DryRun {
		verb = "would copy"
		fmt.Fprintf(w, "%sdry run: nothing written\n", name)
		for _, p := range r.Planned {
			fmt.Fprintf(w, "  would write %s\n", inert(p))
		}
		if r.PlannedMore > 0 {
			fmt.Fprintf(w, "  would write %d more data files\n", r.PlannedMore)
		}
	}
	fmt.Fprintf(w, "%s%s -> %s: %s %d files, %s, in %s\n", name, redact.URL(r.Source), redact.URL(r.Sink), verb,
		r.FilesCopied, mirror.HumanBytes(r.BytesCopied), r.Duration.Round(time.Millisecond))
	fmt.Fprintf(w, "  versions published: %d\n", len(r.VersionsPublished))
	for _, m := range r.RefsMoved {
		from := m.From
		if from == "" {
			from = "(new)"
		}
		fmt.Fprintf(w, "  ref %s: %s -> %s\n", inert(m.Ref), inert(from), inert(m.To))
	}
	if len(r.RefsMoved) == 0 {
		fmt.Fprintf(w, "  refs: none moved\n")
	}
	for _, f := range r.Distrusted {
		fmt.Fprintf(w, "  DISTRUSTED %s: an interrupted run (killed, or a power cut) wrote it with no barrier behind it; copied again, or treated as absent\n", inert(f))
	}
	for _, f := range r.Repaired {
		fmt.Fprintf(w, "  REPAIRED %s\n", inert(f))
	}
	for _, x := range r.Refused {
		fmt.Fprintf(w, "  REFUSED [%s] %s\n", x.Reason, inert(x.Message))
	}
	for _, p := range r.Pending {
		fmt.Fprintf(w, "  PENDING version %s since %s [%s]: retried at every run\n", inert(p.Version), p.Since.Format(time.RFC3339), p.Reason)
	}
	if err != nil {
		fmt.Fprintf(w, "  STOPPED: %s\n", shown(err))
	}
}
