package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// Issue 43's fan-out: one upstream mirrored to two sinks in one run
// (fdl-mirror sync UP A B) beside the same upstream mirrored to one, on
// the medium repository's shape, local→local and s3→s3. The two-sink run
// reads the upstream's refs, records and catalogs once, and each data
// file once from the upstream (the second sink copies it from the first,
// internal/source's fanout.go); on S3 the bytes the upstream bucket sent
// in each run are taken from the gateway's access log. rclone copies to
// one destination per run, so its two sinks are two runs, one after the
// other.

const (
	oneSink  = "full, one sink"
	twoSinks = "full, two sinks in one run"
)

func (b *bench) fanoutRepo(ctx context.Context) error {
	dir := filepath.Join(b.work, "fanout")
	up := filepath.Join(dir, "upstream")
	var s3 *s3Pair
	var buckets []string
	defer func() {
		if b.cfg.keep {
			return
		}
		b.discard(dir)
		if s3 != nil {
			for _, bucket := range append([]string{s3.up}, buckets...) {
				b.discard(filepath.Join(b.gw.Dir, bucket))
			}
		}
	}()
	start := time.Now()
	sh := b.cfg.medium
	r, err := generate.Generate(ctx, up, generate.Options{Versions: sh.versions, FilesPerVersion: sh.files, LargeFiles: b.cfg.large, FastParquet: true})
	if err != nil {
		return fmt.Errorf("generating: %w", err)
	}
	b.repoDesc["fanout"] = fmt.Sprintf("the medium repository's shape again: %d versions, %d data files", len(r.Versions), len(r.DataFiles))
	logf("fanout: generated in %v", time.Since(start).Round(time.Millisecond))

	if b.cfg.stores["local"] {
		sink := func(name string) string { return filepath.Join(dir, name) }
		if err := b.fanoutRuns(ctx, localStores, nil, up, up, sink, func(string) error { return nil }); err != nil {
			return fmt.Errorf("%s: %w", localStores, err)
		}
	}
	if b.cfg.stores["s3"] {
		if s3, err = b.newS3Pair(ctx, "fanout", up); err != nil {
			return err
		}
		// newS3Pair made buckets for repoScenarios' runs too; these runs
		// use buckets of their own, named by the run.
		buckets = append(buckets, s3.fdl, s3.rclone, s3.tuned)
		sink := func(name string) string { return "fanout-" + name }
		mkdir := func(bucket string) error {
			buckets = append(buckets, bucket)
			_, err := runChild(ctx, b.gw.env(), b.cfg.rclone, "mkdir", "--config", b.work+"/rclone.conf", "gw:"+bucket)
			return err
		}
		if err := b.fanoutRuns(ctx, "s3→s3", s3, up, s3.up, sink, mkdir); err != nil {
			return fmt.Errorf("s3→s3: %w", err)
		}
	}
	return nil
}

// fanoutRuns runs, cfg.fullRuns times in turn, fdl-mirror to one sink,
// fdl-mirror to two sinks, and rclone to two (two runs), into new sinks
// each time, keeping each row's best wall time and highest peak RSS. s3
// is nil for local runs; sink names a run's sink (a folder or a bucket),
// made by mkdir first.
func (b *bench) fanoutRuns(ctx context.Context, stores string, s3 *s3Pair, localUp, up string, sink func(string) string, mkdir func(string) error) error {
	addr, env, rcloneAddr := func(s string) string { return s }, []string(nil), func(s string) string { return s }
	if s3 != nil {
		addr, env, rcloneAddr = b.gw.url, b.gw.env(), func(s string) string { return "gw:" + s }
	}
	// upstreamSince is what the upstream bucket sent, and in how many
	// requests, since the access log's offset upstreamFrom gave; -1, -1
	// for a local upstream, whose reads are not counted here.
	upstreamFrom := func() int64 {
		if s3 == nil {
			return 0
		}
		return b.gw.LogOffset()
	}
	upstreamSince := func(off int64) (bytes, requests int64, err error) {
		if s3 == nil {
			return -1, -1, nil
		}
		counts, err := b.gw.RequestsSince(off)
		if c := counts[up]; err == nil && c != nil {
			return c.BytesSent, c.Requests, nil
		}
		return 0, 0, err
	}
	one := &group{repo: "fanout", scenario: oneSink, stores: stores}
	two := &group{repo: "fanout", scenario: twoSinks, stores: stores}
	// keep adds a tool's row to g, or keeps the best wall time and the
	// highest peak RSS and upstream bytes of its rows.
	keep := func(g *group, m *measure) {
		for _, have := range g.rows {
			if have.tool == m.tool {
				have.wall, have.rss, have.srcRead = min(have.wall, m.wall), max(have.rss, m.rss), max(have.srcRead, m.srcRead)
				return
			}
		}
		g.rows = append(g.rows, m)
	}
	for i := 1; i <= max(b.cfg.fullRuns, 1); i++ {
		names := []string{fmt.Sprintf("one-%d", i), fmt.Sprintf("two-%d-a", i), fmt.Sprintf("two-%d-b", i), fmt.Sprintf("rclone-%d-a", i), fmt.Sprintf("rclone-%d-b", i)}
		var sinks []string
		for _, n := range names {
			if err := mkdir(sink(n)); err != nil {
				return err
			}
			sinks = append(sinks, sink(n))
		}
		// One sink, then two: the same upstream, each into new sinks.
		for _, run := range []struct {
			g     *group
			sinks []string
		}{{one, sinks[:1]}, {two, sinks[1:3]}} {
			off := upstreamFrom()
			var dsts []string
			for _, s := range run.sinks {
				dsts = append(dsts, addr(s))
			}
			m, err := b.runFDLSinks(ctx, env, addr(up), dsts...)
			if err != nil {
				return err
			}
			if m.srcRead, m.srcReq, err = upstreamSince(off); err != nil {
				return err
			}
			if s3 != nil {
				m.ops = fmt.Sprintf("the upstream bucket sent %s", mib(m.srcRead))
			}
			for _, s := range run.sinks {
				mirror := s
				if s3 != nil {
					mirror = filepath.Join(b.gw.Dir, s)
				}
				checkMain(m, localUp, mirror)
				if m.stale {
					break
				}
			}
			keep(run.g, m)
		}
		// rclone: one destination per run, so two runs.
		var rcTwo *measure
		for _, dst := range sinks[3:] {
			off := upstreamFrom()
			rr, err := b.runRclone(ctx, env, rcloneAddr(up), rcloneAddr(dst))
			if err != nil {
				return err
			}
			if rr.srcRead, _, err = upstreamSince(off); err != nil {
				return err
			}
			if rcTwo == nil {
				m := rr.measure
				keep(one, &m)
				rcTwo = &measure{tool: "rclone copy, two runs", srcReq: -1, dstReq: -1, seen: -1}
			}
			rcTwo.wall += rr.wall
			rcTwo.rss = max(rcTwo.rss, rr.rss)
			rcTwo.bytes += rr.bytes
			rcTwo.files += rr.files
			if rr.srcRead < 0 || rcTwo.srcRead < 0 {
				rcTwo.srcRead = -1
			} else {
				rcTwo.srcRead += rr.srcRead
			}
		}
		keep(two, rcTwo)
	}
	if max(b.cfg.fullRuns, 1) > 1 {
		for _, g := range []*group{one, two} {
			g.scenario = fmt.Sprintf("%s (best of %d)", g.scenario, b.cfg.fullRuns)
		}
	}
	b.add(one)
	b.add(two)
	return nil
}

// runFDLSinks runs bin/fdl-mirror sync SRC DST... and reads its JSON
// summaries, one per sink, in order: the measure's files and bytes are
// their sums.
func (b *bench) runFDLSinks(ctx context.Context, env []string, src string, dsts ...string) (*measure, error) {
	c, err := runChild(ctx, env, append(b.fdlSync(src, dsts[0]), dsts[1:]...)...)
	if err != nil {
		return nil, err
	}
	m := &measure{tool: "fdl-mirror", wall: c.Wall, rss: c.MaxRSS, srcReq: -1, dstReq: -1, seen: -1}
	dec := json.NewDecoder(strings.NewReader(c.Stdout))
	for i := 0; ; i++ {
		var sum struct {
			OK          bool  `json:"ok"`
			FilesCopied int64 `json:"files_copied"`
			BytesCopied int64 `json:"bytes_copied"`
			Refused     []struct {
				Message string `json:"message"`
			} `json:"refused"`
		}
		err := dec.Decode(&sum)
		if errors.Is(err, io.EOF) {
			if i != len(dsts) {
				return nil, fmt.Errorf("fdl-mirror sync to %d sinks printed %d summaries:\n%s", len(dsts), i, tail(c.Stdout, 1000))
			}
			break
		}
		if err != nil {
			return nil, fmt.Errorf("fdl-mirror --json output: %w\n%s", err, tail(c.Stdout, 1000))
		}
		if !sum.OK {
			return nil, fmt.Errorf("fdl-mirror sync %s to sink %d of %d did not succeed: %+v", src, i+1, len(dsts), sum.Refused)
		}
		m.files += sum.FilesCopied
		m.bytes += sum.BytesCopied
	}
	return m, nil
}
