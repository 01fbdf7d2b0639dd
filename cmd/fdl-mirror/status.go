package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

func cmdStatus(args []string) int {
	fs := newFlagSet("status", "status [flags] SOURCE SINK | status --config FILE [--mirror NAME | --shard I/N | --shards N]")
	configPath := fs.String("config", "", "compare the mirrors of this config `file`")
	onlyMirror := fs.String("mirror", "", "with --config: only this mirror")
	jsonOut := fs.Bool("json", false, "print one JSON object per mirror on stdout")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	var storeF storeFlags // the access flags only: status takes no lock, reads no catalog
	storeF.access.register(fs, "source")
	var shardF shardFlags
	shardF.register(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return exitUsage
	}
	shard, ok := shardArgs(fs, "status", &shardF, *configPath, *onlyMirror)
	if !ok {
		return exitUsage
	}
	log, err := newLogger(*logLevel, *jsonOut)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror status:", shown(err))
		return exitUsage
	}
	defer log.Sync()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var jobs []mirror.Job
	switch {
	case *configPath != "" && len(pos) == 0:
		if refuseUnreadWithConfig(fs, "shard", "shards") {
			return exitUsage
		}
		cfg, err := config.Load(*configPath)
		if err != nil {
			printConfigError(os.Stderr, "status", *configPath, err)
			return exitUsage
		}
		cfg = selectShard(os.Stderr, "status", cfg, shard)
		mirrors, ok := selectMirrors(os.Stderr, "status", cfg, *onlyMirror)
		if !ok {
			return exitUsage
		}
		for _, m := range mirrors {
			for _, sink := range m.AllSinks() { // a status per sink
				job := mirror.SyncJob(m)
				job.Sink = sink
				jobs = append(jobs, job)
			}
		}
	case *configPath == "" && *onlyMirror == "" && len(pos) == 2:
		stores, err := storeF.stores(pos[0], pos[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "fdl-mirror status:", shown(err))
			return exitUsage
		}
		jobs = []mirror.Job{{Stores: stores}}
	default:
		fs.Usage()
		return exitUsage
	}

	code := exitOK
	for _, job := range jobs {
		refs, err := mirror.Status(ctx, job, log)
		var pending []fdlsync.PendingVersion
		var more int
		if err == nil {
			pending, more, err = mirror.Pending(ctx, job, log)
		}
		code = max(code, printStatus(os.Stdout, job, refs, pending, more, err, *jsonOut, log))
	}
	return code
}

// printStatus prints one mirror's refs and returns its exit code: 0 current,
// 1 behind or unreadable, 2 for a job that cannot work (bad address).
// Ancestors the mirror keeps to retry (pending) make it behind too.
// pendingMore counts the pending versions the mirror's list left out.
func printStatus(w io.Writer, job mirror.Job, refs []fdlsync.RefStatus, pending []fdlsync.PendingVersion, pendingMore int, err error, jsonOut bool, log *zap.Logger) int {
	code := exitOK
	behind := 0
	for _, r := range refs {
		if r.Behind {
			behind++
		}
	}
	lastChange, stale := upstreamStale(job, refs, time.Now())
	var cfgErr *mirror.ConfigError
	switch {
	case errors.As(err, &cfgErr):
		code = exitUsage
	case err != nil || behind > 0 || stale || len(pending) > 0:
		code = exitRefused
	}
	if jsonOut {
		out := struct {
			Mirror string              `json:"mirror,omitempty"`
			Source string              `json:"source"`
			Sink   string              `json:"sink"`
			Behind bool                `json:"behind"`
			Refs   []fdlsync.RefStatus `json:"refs"`
			Error  string              `json:"error,omitempty"`
			// UpstreamStale: no selected ref changed upstream for longer
			// than max_upstream_age (a frozen upstream).
			UpstreamStale      bool      `json:"upstream_stale"`
			UpstreamLastChange time.Time `json:"upstream_last_change,omitzero"`
			// Pending: ancestors not mirrored yet, retried at every run.
			Pending     []fdlsync.PendingVersion `json:"pending"`
			PendingMore int                      `json:"pending_more,omitempty"` // left out of pending
			// CatalogSandbox: the layers that would confine its catalog
			// readers on this machine.
			CatalogSandbox catalog.SandboxStatus `json:"catalog_sandbox"`
		}{PendingMore: pendingMore, Mirror: job.Name, Source: redact.URL(job.Source), Sink: redact.URL(job.Sink), Behind: behind > 0 || len(pending) > 0, Refs: refs,
			UpstreamStale: stale, UpstreamLastChange: lastChange, Pending: pending, CatalogSandbox: catalog.SandboxNow().Status()}
		if out.Pending == nil {
			out.Pending = []fdlsync.PendingVersion{}
		}
		if out.Refs == nil {
			out.Refs = []fdlsync.RefStatus{}
		}
		if err != nil {
			out.Error = redact.Text(err.Error())
		}
		writeJSON(w, out)
		return code
	}
	name := ""
	if job.Name != "" {
		name = job.Name + ": "
	}
	if err != nil {
		log.Debug("status failed", zap.Error(err))
		fmt.Fprintf(w, "%s%s -> %s: cannot compare: %s\n", name, redact.URL(job.Source), redact.URL(job.Sink), shown(err))
		return code
	}
	state := "current"
	if behind > 0 {
		state = fmt.Sprintf("behind on %d of %d refs", behind, len(refs))
	}
	if len(pending) > 0 {
		if state == "current" {
			state = "refs current"
		}
		state += fmt.Sprintf("; %d ancestor versions not mirrored yet", len(pending)+pendingMore)
	}
	fmt.Fprintf(w, "%s%s -> %s: %s\n", name, redact.URL(job.Source), redact.URL(job.Sink), state)
	for _, p := range pending {
		fmt.Fprintf(w, "  PENDING version %s since %s [%s]: %s\n", inert(p.Version), p.Since.Format(time.RFC3339), p.Reason, inert(p.Message))
	}
	if pendingMore > 0 {
		fmt.Fprintf(w, "  PENDING and %d more versions, not listed\n", pendingMore)
	}
	if stale {
		since := "never recorded"
		if !lastChange.IsZero() {
			since = "last change " + lastChange.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  upstream stale: no selected ref changed for longer than %s (%s)\n", job.MaxUpstreamAge, since)
	}
	if len(refs) == 0 {
		fmt.Fprintln(w, "  (no refs upstream)")
		return code
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  REF\tUPSTREAM\tMIRROR\tSTATE")
	for _, r := range refs {
		mirror, st := r.Mirror, "current"
		if mirror == "" {
			mirror = "-"
		}
		if r.State != "" {
			st = r.State
		} else if r.Behind {
			st = "behind"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", inert(r.Ref), inert(r.Upstream), inert(mirror), st)
	}
	tw.Flush()
	return code
}

// upstreamStale says whether no selected upstream ref changed for longer
// than the job's MaxUpstreamAge (a frozen upstream), and when the last
// change the mirror recorded was.
func upstreamStale(job mirror.Job, refs []fdlsync.RefStatus, now time.Time) (time.Time, bool) {
	var last time.Time
	for _, r := range refs {
		if r.State != fdlsync.RefExcluded && r.LastChange.After(last) {
			last = r.LastChange
		}
	}
	return last, job.MaxUpstreamAge > 0 && len(refs) > 0 && now.Sub(last) > job.MaxUpstreamAge
}
