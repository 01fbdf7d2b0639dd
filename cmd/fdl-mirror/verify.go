package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	gosync "sync"
	"syscall"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/scratch"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

func cmdVerify(args []string) int {
	fs := newFlagSet("verify", "verify [flags] TARGET")
	jsonOut := fs.Bool("json", false, "print the problems as JSON on stdout")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	concurrency := fs.Int("concurrency", 8, "size checks at once")
	deep := fs.Bool("deep", false, "also read each data file's head and tail: Parquet and puffin magic, footer length against the catalog")
	var storeF storeFlags // no lock: verify only reads
	storeF.access.register(fs, "target")
	var trust trustFlags
	trust.register(fs)
	storeF.limits.register(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return exitUsage
	}
	if err := storeF.limits.check(); err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror verify:", shown(err))
		return exitUsage
	}
	if len(pos) != 1 {
		fs.Usage()
		return exitUsage
	}
	log, err := newLogger(*logLevel, *jsonOut)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror verify:", shown(err))
		return exitUsage
	}
	defer log.Sync()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	job := mirror.Job{TrustedSigners: trust.signers, RequireSignatures: trust.require, SignatureNamespace: trust.namespace}
	policy, err := job.Policy()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror verify:", shown(err))
		return exitUsage
	}
	stores, err := storeF.stores(pos[0], "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror verify:", shown(err))
		return exitUsage
	}
	target, closeTarget, err := location.Open(ctx, stores.Source, stores.SourceOptions(log))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror verify:", shown(err))
		return exitUsage
	}
	defer closeTarget()
	tmp, err := scratch.Private()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-mirror verify:", shown(err))
		return exitRefused
	}
	defer tmp.Close()
	var notesMu gosync.Mutex
	notes := []verify.Problem{}
	note := func(p verify.Problem) {
		notesMu.Lock()
		notes = append(notes, p)
		notesMu.Unlock()
	}
	problems, err := verify.CheckRepository(ctx, source.New(target, policy.AsTrust(), nil), verify.CheckOptions{Concurrency: *concurrency, Deep: *deep, Note: note, CatalogLimits: stores.CatalogLimits, TempDir: tmp.Path()})
	if err != nil {
		log.Error("verify stopped", zap.Error(err))
		fmt.Fprintln(os.Stderr, "fdl-mirror verify:", shown(err))
		return exitRefused
	}
	if *jsonOut {
		writeJSON(os.Stdout, struct {
			Target   string           `json:"target"`
			OK       bool             `json:"ok"`
			Problems []verify.Problem `json:"problems"`
			Notes    []verify.Problem `json:"notes"`
		}{target.Location(), len(problems) == 0, append([]verify.Problem{}, problems...), notes})
	} else {
		sort.Slice(notes, func(i, j int) bool { return notes[i].Version < notes[j].Version })
		for _, n := range notes {
			fmt.Println("NOTE", inert(n.Message))
		}
		for _, p := range problems {
			fmt.Println("PROBLEM", inert(p.Message))
		}
		if len(problems) == 0 {
			fmt.Printf("%s: OK, every ref resolves to a complete version\n", target.Location())
		} else {
			fmt.Printf("%s: %d problems\n", target.Location(), len(problems))
		}
	}
	if len(problems) > 0 {
		return exitRefused
	}
	return exitOK
}
