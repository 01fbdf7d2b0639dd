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

	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/prune"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
)

func cmdPrune(args []string) int {
	fs := newFlagSet("prune", "prune [flags] SOURCE SINK | prune --config FILE [--mirror NAME]")
	dryRun := fs.Bool("dry-run", false, "list every ref, version and file that would be removed; remove nothing")
	maxDelete := fs.Int("max-delete", prune.DefaultMaxDelete, "refuse, removing nothing, when more than `N` objects would be removed")
	now := fs.Bool("now", false, "remove what is unreferenced at once, without the grace period; on an object store refused: see --now-unsafe-on-object-stores")
	nowUnsafe := fs.Bool("now-unsafe-on-object-stores", false, "remove at once on an object store too: a prune paused past its lock's lease can then remove files a sync just relied on")
	jsonOut := fs.Bool("json", false, "print a machine-readable summary on stdout")
	configPath := fs.String("config", "", "prune the mirrors of this config `file`")
	onlyMirror := fs.String("mirror", "", "with --config: only this mirror")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var storeF storeFlags
	storeF.registerRun(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return exitUsage
	}
	if err := storeF.limits.check(); err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror prune:", shown(err))
		return exitUsage
	}
	if *maxDelete < 1 {
		fmt.Fprintln(os.Stderr, "fdl-mirror prune: --max-delete must be at least 1")
		return exitUsage
	}
	log, err := newLogger(*logLevel, *jsonOut)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror prune:", shown(err))
		return exitUsage
	}
	defer log.Sync()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var jobs []mirror.PruneJob
	switch {
	case *configPath != "" && len(pos) == 0:
		if refuseUnreadWithConfig(fs, "dry-run", "max-delete", "now", "now-unsafe-on-object-stores") {
			return exitUsage
		}
		cfg, err := config.Load(*configPath)
		if err != nil {
			printConfigError(os.Stderr, "prune", *configPath, err)
			return exitUsage
		}
		mirrors, ok := selectMirrors(os.Stderr, "prune", cfg, *onlyMirror)
		if !ok {
			return exitUsage
		}
		for _, m := range mirrors {
			// A mirror of several sinks is pruned sink by sink, each
			// under its own lock.
			for _, sink := range m.AllSinks() {
				job := mirror.PruneJobOf(m)
				job.Sink = sink
				job.DryRun, job.Now, job.NowUnsafe = *dryRun, *now, *nowUnsafe
				if flagSet(fs.Visit, "max-delete") {
					job.MaxDelete = *maxDelete
				}
				jobs = append(jobs, job)
			}
		}
	case *configPath != "":
		fmt.Fprintln(os.Stderr, "fdl-mirror prune: --config takes no SOURCE or SINK")
		return exitUsage
	case len(pos) == 2:
		stores, err := storeF.stores(pos[0], pos[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "fdl-mirror prune:", shown(err))
			return exitUsage
		}
		jobs = append(jobs, mirror.PruneJob{Stores: stores, DryRun: *dryRun, MaxDelete: *maxDelete, Now: *now, NowUnsafe: *nowUnsafe})
	default:
		fs.Usage()
		return exitUsage
	}
	code := exitOK
	for _, job := range jobs {
		if ctx.Err() != nil {
			log.Warn("interrupted; mirror not pruned", zap.String("mirror", job.Name))
			code = max(code, exitRefused)
			continue
		}
		rep, err := mirror.Prune(ctx, job, log)
		code = max(code, finishPrune(os.Stdout, job, rep, err, *jsonOut, log))
	}
	return code
}

// flagSet says whether a flag was given on the command line.
func flagSet(visit func(func(*flag.Flag)), name string) bool {
	set := false
	visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// finishPrune prints a prune's summary and returns its exit code.
func finishPrune(w io.Writer, job mirror.PruneJob, rep *prune.Report, err error, jsonOut bool, log *zap.Logger) int {
	var report any = rep
	if rep == nil {
		report = &prune.Report{Source: redact.URL(job.Source), Sink: redact.URL(job.Sink)}
	}
	return finishRun(w, "prune", job.Name, report, false, err, jsonOut, log, func() { printPrune(w, job, rep, err) })
}

func printPrune(w io.Writer, job mirror.PruneJob, r *prune.Report, err error) {
	name := ""
	if job.Name != "" {
		name = job.Name + ": "
	}
	if r == nil {
		fmt.Fprintf(w, "%sprune %s against %s failed: %s\n", name, redact.URL(job.Sink), redact.URL(job.Source), shown(err))
		return
	}
	verb, objects := "removed", len(r.Removed)
	if r.DryRun {
		verb, objects = "would remove", r.Deletions
		fmt.Fprintf(w, "%sdry run: nothing removed\n", name)
	}
	fmt.Fprintf(w, "%s%s (against %s): %s %d refs, %d versions, %d data files (%d objects), in %s\n", name, redact.URL(r.Sink), redact.URL(r.Source), verb,
		len(r.RefsRemoved), len(r.VersionsRemoved), len(r.DataFilesRemoved), objects, r.Duration.Round(time.Millisecond))
	for _, ref := range r.RefsRemoved {
		fmt.Fprintf(w, "  %s ref %s (was %s): upstream no longer has it\n", verb, inert(ref.Ref), inert(ref.Version))
	}
	if r.HeadRemoved != "" {
		fmt.Fprintf(w, "  %s HEAD: it names %s\n", verb, inert(r.HeadRemoved))
	}
	for _, v := range r.VersionsRemoved {
		why := "expired upstream"
		if v.Reason == prune.ReasonGone {
			why = "no longer upstream"
		}
		if !v.Complete {
			why += "; the rest of a folder an interrupted run left"
		}
		fmt.Fprintf(w, "  %s version %s: %s\n", verb, inert(v.Version), why)
	}
	for _, f := range r.DataFilesRemoved {
		fmt.Fprintf(w, "  %s data file %s\n", verb, inert(f))
	}
	if r.DryRun {
		for _, o := range r.Removed {
			fmt.Fprintf(w, "  would remove %s\n", inert(o))
		}
	}
	for _, o := range r.MaybeRemoved {
		fmt.Fprintf(w, "  may have removed %s: its removal was sent, and the run stopped before the answer came\n", inert(o))
	}
	for _, f := range r.Unnamed {
		fmt.Fprintf(w, "  left %s: no catalog in the mirror names it\n", inert(f))
	}
	if r.Candidates > 0 {
		fmt.Fprintf(w, "  held %d unreferenced objects for the grace period (%s)", r.Candidates, r.Grace)
		if r.NextDue != nil {
			fmt.Fprintf(w, "; the first may go at %s", r.NextDue.Format(time.RFC3339))
		}
		fmt.Fprintln(w)
	}
	if err != nil {
		fmt.Fprintf(w, "  STOPPED: %s\n", shown(err))
	}
}
