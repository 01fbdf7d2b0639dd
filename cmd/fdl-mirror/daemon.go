package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/daemon"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
)

func cmdDaemon(args []string) int {
	fs := newFlagSet("daemon", "daemon --config FILE [--shard I/N | --shards N] [flags]")
	configPath := fs.String("config", "", "config `file` listing the mirrors (see config.example.yaml)")
	check := fs.Bool("check", false, "check the config, print every problem, and exit (0 valid, 2 not)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	jsonLogs := fs.Bool("json", false, "log JSON even on a terminal")
	var shardF shardFlags
	shardF.register(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return exitUsage
	}
	if *configPath == "" || len(pos) != 0 {
		fs.Usage()
		return exitUsage
	}
	shard, ok := shardArgs(fs, "daemon", &shardF, *configPath, "")
	if !ok {
		return exitUsage
	}
	log, err := newLogger(*logLevel, *jsonLogs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror daemon:", shown(err))
		return exitUsage
	}
	defer log.Sync()

	d, err := daemon.New(daemon.Options{ConfigPath: *configPath, Shard: shard, Logger: log})
	if err != nil {
		printConfigError(os.Stderr, "daemon", *configPath, err)
		return exitUsage
	}
	if *check {
		if shard.Whole() {
			fmt.Printf("%s: valid; mirrors: %v\n", *configPath, d.Config().Names())
		} else {
			fmt.Printf("%s: valid; mirrors of shard %s: %v\n", *configPath, shard, d.Config().Names())
		}
		return exitOK
	}

	// SIGTERM and SIGINT stop the daemon; once they have, the default
	// action is restored so that a second one kills a stop that hangs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{}, 1)
	go func() {
		for range hup {
			log.Info("SIGHUP: reloading the config", zap.String("config", *configPath))
			select {
			case reload <- struct{}{}:
			default: // a reload is already pending
			}
		}
	}()

	log.Info("fdl-mirror daemon starting", zap.String("version", versionString()),
		zap.String("config", *configPath), zap.String("shard", shard.String()), zap.Strings("mirrors", d.Config().Names()))
	if err := d.Serve(ctx, reload); err != nil {
		log.Error("daemon could not start", zap.Error(err))
		return exitRefused
	}
	return exitOK
}

// printConfigError prints a config that cannot be used, every problem on a
// line of its own.
func printConfigError(w io.Writer, cmd, path string, err error) {
	var ps config.Problems
	if errors.As(err, &ps) {
		fmt.Fprintf(w, "fdl-mirror %s: %s does not validate (%d problems):\n", cmd, path, len(ps))
		for _, p := range ps {
			fmt.Fprintf(w, "  %s\n", p)
		}
		return
	}
	fmt.Fprintf(w, "fdl-mirror %s: %s\n", cmd, shown(err))
}

// selectMirrors returns the config's mirrors, or only the one named.
func selectMirrors(w io.Writer, cmd string, cfg *config.Config, name string) ([]config.Mirror, bool) {
	if name == "" {
		return cfg.Mirrors, true
	}
	m, ok := cfg.Mirror(name)
	if !ok {
		fmt.Fprintf(w, "fdl-mirror %s: %s has no mirror %q (it has %v)\n", cmd, cfg.Path, name, cfg.Names())
		return nil, false
	}
	return []config.Mirror{m}, true
}

// configOverrides are the flags sync --config reads besides the file:
// what one run asks for (a dry run, --force, --repair), never a setting
// of a mirror's.
type configOverrides struct{ dryRun, force, repair bool }

// syncFromConfig runs the config's mirrors (those of a shard, or the one
// named) once, one after the other, for CI and CronJobs. A mirror's failure
// does not stop the next; the exit code is the worst of theirs, as for a
// plain sync. Notifications go out as each mirror ends; at the end it
// waits at most notifyWait for those still being sent.
func syncFromConfig(ctx context.Context, configPath, onlyMirror string, shard config.Shard, over configOverrides, jsonOut bool, notifyWait time.Duration, log *zap.Logger) int {
	cfg, err := config.Load(configPath)
	if err != nil {
		printConfigError(os.Stderr, "sync", configPath, err)
		return exitUsage
	}
	cfg = selectShard(os.Stderr, "sync", cfg, shard)
	if !shard.Whole() {
		log.Info("running one shard of the config", zap.String("shard", shard.String()), zap.Strings("mirrors", cfg.Names()))
	}
	mirrors, ok := selectMirrors(os.Stderr, "sync", cfg, onlyMirror)
	if !ok {
		return exitUsage
	}
	notifier := daemon.NewNotifier(log, prometheus.NewRegistry(), daemon.NotifyOptions{})
	defer notifier.Close(notifyWait)
	code := exitOK
	for _, m := range mirrors {
		if ctx.Err() != nil {
			log.Warn("interrupted; mirror not run", zap.String("mirror", m.Name))
			code = max(code, exitRefused)
			continue
		}
		job := mirror.SyncJob(m)
		job.DryRun = over.dryRun
		job.Force = job.Force || over.force
		job.Repair = job.Repair || over.repair
		progress, done := newProgress(!jsonOut)
		runs := mirror.RunJob(ctx, job, log, progress)
		done()
		// A mirror of several sinks: a report, a notification and an exit
		// code per sink, each naming it.
		for _, r := range runs {
			job.Sink = r.Sink
			ran := m
			ran.Sink = r.Sink // the sink the events name and are read from
			notifier.AfterRun(ran, r.Report)
			code = max(code, finishSync(os.Stdout, job, r.Report, r.Err, jsonOut, log))
		}
	}
	return code
}
