package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/counting"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// localPair are the folders of the local→local runs: one upstream, one
// mirror per tool, and the mirror of the in-process counted run.
type localPair struct{ up, fdl, rclone, counted, fdlTraced, rcloneTraced string }

// pairIn are the folders of the local→local runs below dir, from up.
func pairIn(dir, up string) localPair {
	return localPair{up: up, fdl: filepath.Join(dir, "fdl"), rclone: filepath.Join(dir, "rclone"), counted: filepath.Join(dir, "counted"),
		fdlTraced: filepath.Join(dir, "fdl-strace"), rcloneTraced: filepath.Join(dir, "rclone-strace")}
}

// Store pairs of local runs: folders on the scratch folder's disk, and on
// a tmpfs, where writing costs no disk and fsync nothing.
const (
	localStores = "local→local"
	tmpfsStores = "local→local (tmpfs)"
)

func (b *bench) localRun(ctx context.Context, repo, scenario, stores string, p localPair) (*group, error) {
	g := &group{repo: repo, scenario: scenario, stores: stores}
	m, err := b.runFDL(ctx, nil, p.up, p.fdl)
	if err != nil {
		return nil, err
	}
	// The same work in-process on a third mirror in the same state, with
	// every store call counted.
	src, dst, seen, rep, err := countedRun(ctx, p.up, p.counted, b.cfg.concurrency)
	if err != nil {
		return nil, err
	}
	if rep.FilesCopied != m.files {
		return nil, fmt.Errorf("the counted run copied %d files, the timed run %d: the two mirrors are not in the same state", rep.FilesCopied, m.files)
	}
	m.srcReq, m.dstReq, m.seen, m.srcRead = src.Requests(), dst.Requests(), seen, src.BytesRead
	m.ops = "source " + opsString(src) + "; sink " + opsString(dst)
	r, err := b.runRclone(ctx, nil, p.up, p.rclone)
	if err != nil {
		return nil, err
	}
	checkMain(m, p.up, p.fdl)
	checkMain(&r.measure, p.up, p.rclone)
	// On a local disk rclone's store calls cannot be seen from outside;
	// the file-system calls of both tools can (strace, on mirrors of their
	// own in the same state).
	if b.strace != "" {
		calls, detail, err := b.traced(ctx, b.fdlSync(p.up, p.fdlTraced))
		if err != nil {
			return nil, err
		}
		m.syscalls, m.syscallOps = calls, detail
		calls, detail, err = b.traced(ctx, b.rcloneCopy(p.up, p.rcloneTraced))
		if err != nil {
			return nil, err
		}
		r.syscalls, r.syscallOps = calls, detail
	}
	if strings.HasPrefix(scenario, "full") {
		if err := b.repeatFullLocal(ctx, g, m, &r.measure, p); err != nil {
			return nil, err
		}
	}
	g.rows = append(g.rows, m, &r.measure)
	return g, nil
}

// repeatFullLocal is repeatFull for a local pair: the runs after the
// first go into mirrors beside p's, removed when the bench ends.
func (b *bench) repeatFullLocal(ctx context.Context, g *group, m, r *measure, p localPair) error {
	err := b.repeatFull(ctx, g, m, r,
		func(i int) (*measure, error) { return b.runFDL(ctx, nil, p.up, fmt.Sprintf("%s-%d", p.fdl, i)) },
		func(i int) (*measure, error) {
			rr, err := b.runRclone(ctx, nil, p.up, fmt.Sprintf("%s-%d", p.rclone, i))
			if err != nil {
				return nil, err
			}
			return &rr.measure, nil
		})
	for i := 2; i <= b.cfg.fullRuns; i++ {
		b.discard(fmt.Sprintf("%s-%d", p.fdl, i))
		b.discard(fmt.Sprintf("%s-%d", p.rclone, i))
	}
	return err
}

// repeatFull runs each tool's first full mirror again into mirrors of its
// own, rclone first so that neither tool always runs first, and keeps the
// best time and the highest peak RSS. On a shared machine, and on a file
// system whose inode allocation slows down after many deletions, one run
// can be much slower than the next. Requests are those of the first run.
func (b *bench) repeatFull(ctx context.Context, g *group, m, r *measure, fdl, rclone func(i int) (*measure, error)) error {
	for i := 2; i <= b.cfg.fullRuns; i++ {
		rr, err := rclone(i)
		if err != nil {
			return err
		}
		r.wall, r.rss = min(r.wall, rr.wall), max(r.rss, rr.rss)
		mm, err := fdl(i)
		if err != nil {
			return err
		}
		m.wall, m.rss = min(m.wall, mm.wall), max(m.rss, mm.rss)
	}
	if b.cfg.fullRuns > 1 {
		g.scenario = fmt.Sprintf("%s (best of %d)", g.scenario, b.cfg.fullRuns)
	}
	return nil
}

// runFDL runs bin/fdl-mirror sync and reads its JSON summary.
func (b *bench) runFDL(ctx context.Context, env []string, src, dst string) (*measure, error) {
	return b.runFDLSinks(ctx, env, src, dst)
}

type rcloneMeasure struct {
	measure
	checks int64
}

// runRclone runs rclone copy and reads its final stats (JSON log).
func (b *bench) runRclone(ctx context.Context, env []string, src, dst string, extra ...string) (*rcloneMeasure, error) {
	c, err := runChild(ctx, env, b.rcloneCopy(src, dst, extra...)...)
	if err != nil {
		return nil, err
	}
	var stats struct {
		Bytes     int64 `json:"bytes"`
		Checks    int64 `json:"checks"`
		Transfers int64 `json:"transfers"`
		Errors    int64 `json:"errors"`
	}
	found := false
	for _, line := range strings.Split(c.Stderr, "\n") {
		var l struct {
			Stats *json.RawMessage `json:"stats"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Stats != nil {
			if err := json.Unmarshal(*l.Stats, &stats); err == nil {
				found = true
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("rclone printed no stats:\n%s", tail(c.Stderr, 1000))
	}
	if stats.Errors > 0 {
		return nil, fmt.Errorf("rclone copy %s %s: %d errors:\n%s", src, dst, stats.Errors, tail(c.Stderr, 2000))
	}
	return &rcloneMeasure{
		measure: measure{tool: strings.Join(append([]string{"rclone copy"}, extra...), " "), wall: c.Wall, rss: c.MaxRSS, srcReq: -1, dstReq: -1, seen: -1,
			bytes: stats.Bytes, files: stats.Transfers},
		checks: stats.Checks,
	}, nil
}

// countedRun runs the engine in-process from src to dst with every store
// call counted, and every object a listing returned. The sink's lock
// (taken by the CLI, not the engine) is not part of it.
func countedRun(ctx context.Context, srcAddr, dstAddr string, concurrency int) (src, dst counting.Counts, seen int64, rep *fdlsync.Report, err error) {
	s, closeSrc, err := location.Open(ctx, srcAddr, location.Options{})
	if err != nil {
		return src, dst, 0, nil, err
	}
	defer closeSrc()
	d, closeDst, err := location.OpenWritable(ctx, dstAddr, location.Options{})
	if err != nil {
		return src, dst, 0, nil, err
	}
	defer closeDst()
	var n atomic.Int64
	cs, cd := counting.Wrap(s), counting.WrapBackend(d)
	rep, err = fdlsync.Run(ctx, source.New(listed{cs, &n}, nil, nil), sink.New(listedBackend{cd, &n}, sink.Options{}),
		fdlsync.Options{Concurrency: concurrency})
	if err != nil {
		return src, dst, 0, rep, err
	}
	if !rep.OK() {
		return src, dst, 0, rep, fmt.Errorf("counted run refused: %+v", rep.Refused)
	}
	return cs.Counts(), cd.Counts(), n.Load(), rep, nil
}

// listed counts the objects a store's listings return.
type listed struct {
	backend.Reader
	n *atomic.Int64
}

func (l listed) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	return l.Reader.List(ctx, prefix, func(fi backend.FileInfo) error {
		l.n.Add(1)
		return fn(fi)
	})
}

func (l listed) ListPage(ctx context.Context, prefix, from string) ([]backend.FileInfo, bool, error) {
	return listPageCounted(ctx, l.Reader, l.n, prefix, from)
}

func (l listed) Unwrap() backend.Reader { return l.Reader }

// listPageCounted lists a page of r, counting its names in n.
func listPageCounted(ctx context.Context, r backend.Reader, n *atomic.Int64, prefix, from string) ([]backend.FileInfo, bool, error) {
	pl := backend.PageListerOf(r)
	if pl == nil {
		return nil, false, fmt.Errorf("%s: listing a page: %w", r.Location(), backend.ErrNotSupported)
	}
	page, more, err := pl.ListPage(ctx, prefix, from)
	n.Add(int64(len(page)))
	return page, more, err
}

type listedBackend struct {
	backend.Backend
	n *atomic.Int64
}

func (l listedBackend) List(ctx context.Context, prefix string, fn func(backend.FileInfo) error) error {
	return l.Backend.List(ctx, prefix, func(fi backend.FileInfo) error {
		l.n.Add(1)
		return fn(fi)
	})
}

func (l listedBackend) ListPage(ctx context.Context, prefix, from string) ([]backend.FileInfo, bool, error) {
	return listPageCounted(ctx, l.Backend, l.n, prefix, from)
}

func (l listedBackend) Unwrap() backend.Reader { return l.Backend }

func opsString(c counting.Counts) string {
	var parts []string
	for _, kv := range []struct {
		k string
		v int64
	}{{"open", c.Open}, {"stat", c.Stat}, {"list", c.List}, {"put", c.Put}, {"create", c.Create}, {"remove", c.Remove}, {"copy", c.Copy}} {
		if kv.v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", kv.k, kv.v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// s3Pair are the buckets of the s3→s3 runs on the gateway: the upstream
// (seeded from the local upstream, untimed: see seed) and one mirror per
// tool.
type s3Pair struct {
	localUp         string
	up, fdl, rclone string
	tuned           string   // rclone with rcloneTunedFlags
	extra           []string // buckets of repeated full runs
}

func (b *bench) newS3Pair(ctx context.Context, name, localUp string) (*s3Pair, error) {
	p := &s3Pair{localUp: localUp, up: name + "-upstream", fdl: name + "-fdl", rclone: name + "-rclone", tuned: name + "-rclone-tuned"}
	for _, bucket := range []string{p.up, p.fdl, p.rclone, p.tuned} {
		if _, err := runChild(ctx, b.gw.env(), b.cfg.rclone, "mkdir", "--config", b.work+"/rclone.conf", "gw:"+bucket); err != nil {
			return nil, err
		}
	}
	return p, b.seed(ctx, p)
}

// seed copies the local upstream into the upstream bucket (not timed in
// the report; its time is logged). The gateway is a posix one on a local
// folder, whose bucket folder seedPosix fills directly (-seed files, see
// seed.go); with -seed rclone, or where the bucket is not a folder here
// or its file system keeps no extended attributes, rclone copy uploads
// the files through the gateway.
func (b *bench) seed(ctx context.Context, p *s3Pair) error {
	start := time.Now()
	if b.cfg.seed == "files" && b.gw.Dir != "" {
		bucketDir := filepath.Join(b.gw.Dir, p.up)
		if fi, err := os.Stat(bucketDir); err == nil && fi.IsDir() {
			st, err := seedPosix(ctx, p.localUp, bucketDir, seedWorkers())
			if err == nil {
				logf("seeded bucket %s in its folder: %v, in %v", p.up, st, time.Since(start).Round(time.Millisecond))
				return nil
			}
			if !errors.Is(err, errNoXattr) {
				return fmt.Errorf("seeding bucket %s in its folder: %w", p.up, err)
			}
			logf("seeding bucket %s in its folder: %v; uploading with rclone instead", p.up, err)
		}
	}
	if _, err := runChild(ctx, b.gw.env(), b.rcloneCopy(p.localUp, "gw:"+p.up)...); err != nil {
		return fmt.Errorf("seeding bucket %s: %w", p.up, err)
	}
	logf("seeded bucket %s with rclone copy in %v", p.up, time.Since(start).Round(time.Millisecond))
	return nil
}

func (b *bench) s3Run(ctx context.Context, repo, scenario string, p *s3Pair) (*group, error) {
	if strings.HasPrefix(scenario, "incremental") {
		if err := b.seed(ctx, p); err != nil {
			return nil, err
		}
	}
	g := &group{repo: repo, scenario: scenario, stores: "s3→s3"}
	off := b.gw.LogOffset()
	m, err := b.runFDL(ctx, b.gw.env(), b.gw.url(p.up), b.gw.url(p.fdl))
	if err != nil {
		return nil, err
	}
	counts, err := b.gw.RequestsSince(off)
	if err != nil {
		return nil, err
	}
	b.fromLog(m, counts, p.up, p.fdl)
	checkMain(m, p.localUp, filepath.Join(b.gw.Dir, p.fdl))

	off = b.gw.LogOffset()
	r, err := b.runRclone(ctx, b.gw.env(), "gw:"+p.up, "gw:"+p.rclone)
	if err != nil {
		return nil, err
	}
	if counts, err = b.gw.RequestsSince(off); err != nil {
		return nil, err
	}
	b.fromLog(&r.measure, counts, p.up, p.rclone)
	checkMain(&r.measure, p.localUp, filepath.Join(b.gw.Dir, p.rclone))
	if strings.HasPrefix(scenario, "full") {
		bucket := func(base string, i int) (string, error) {
			name := fmt.Sprintf("%s-%d", base, i)
			_, err := runChild(ctx, b.gw.env(), b.cfg.rclone, "mkdir", "--config", b.work+"/rclone.conf", "gw:"+name)
			p.extra = append(p.extra, name)
			return name, err
		}
		err := b.repeatFull(ctx, g, m, &r.measure,
			func(i int) (*measure, error) {
				name, err := bucket(p.fdl, i)
				if err != nil {
					return nil, err
				}
				return b.runFDL(ctx, b.gw.env(), b.gw.url(p.up), b.gw.url(name))
			},
			func(i int) (*measure, error) {
				name, err := bucket(p.rclone, i)
				if err != nil {
					return nil, err
				}
				rr, err := b.runRclone(ctx, b.gw.env(), "gw:"+p.up, "gw:"+name)
				if err != nil {
					return nil, err
				}
				return &rr.measure, nil
			})
		if err != nil {
			return nil, err
		}
	}
	g.rows = append(g.rows, m, &r.measure)

	// A no-op changes nothing: the engine alone runs it again in-process,
	// without the CLI's sink lock and process start, to show what those
	// fixed costs are. Its requests are store calls, counted by
	// internal/backend/counting, and their list pages.
	if scenario == "no-op" {
		for _, kv := range b.gw.env() {
			k, v, _ := strings.Cut(kv, "=")
			if strings.HasPrefix(k, "AWS_") {
				os.Setenv(k, v) // the gateway's own keys, for the SDK's chain in this process
			}
		}
		start := time.Now()
		src, dst, _, rep, err := countedRun(ctx, b.gw.url(p.up), b.gw.url(p.fdl), b.cfg.concurrency)
		if err != nil {
			return nil, err
		}
		if rep.FilesCopied != 0 {
			return nil, fmt.Errorf("the in-process no-op copied %d files", rep.FilesCopied)
		}
		g.rows = append(g.rows, &measure{tool: "fdl-mirror engine, in-process (no lock, no process start)",
			wall: time.Since(start), rss: -1, srcReq: src.Requests(), dstReq: dst.Requests(), seen: -1, bytes: rep.BytesCopied,
			ops: fmt.Sprintf("store calls: source %s (%d list pages); sink %s (%d list pages)", opsString(src), src.ListPages, opsString(dst), dst.ListPages)})
	}

	// rclone as someone who knows S3 would run it: one listing per bucket
	// and no per-object HEAD for modification times, into a bucket of its
	// own.
	if b.cfg.rcloneTuned {
		off = b.gw.LogOffset()
		t, err := b.runRclone(ctx, b.gw.env(), "gw:"+p.up, "gw:"+p.tuned, rcloneTunedFlags...)
		if err != nil {
			return nil, err
		}
		if counts, err = b.gw.RequestsSince(off); err != nil {
			return nil, err
		}
		b.fromLog(&t.measure, counts, p.up, p.tuned)
		checkMain(&t.measure, p.localUp, filepath.Join(b.gw.Dir, p.tuned))
		g.rows = append(g.rows, &t.measure)
	}
	return g, nil
}

// rcloneTunedFlags make rclone list each bucket once (--fast-list) and
// compare sizes and MD5 checksums from the listing (ETags), without a HEAD
// per object for its modification time. (--size-only would save the same
// requests but miss a moved ref: a ref file keeps its size.)
var rcloneTunedFlags = []string{"--fast-list", "--checksum"}

// fromLog fills a measure's requests from the gateway's access log.
func (b *bench) fromLog(m *measure, counts map[string]*testserver.BucketRequests, src, dst string) {
	get := func(bucket string) *testserver.BucketRequests {
		if c := counts[bucket]; c != nil {
			return c
		}
		return &testserver.BucketRequests{Ops: map[string]int64{}}
	}
	s, d := get(src), get(dst)
	m.srcReq, m.dstReq = s.Requests, d.Requests
	m.ops = "source " + gwOps(s) + "; sink " + gwOps(d)
	var other []string
	for bucket, c := range counts {
		if bucket != src && bucket != dst {
			other = append(other, fmt.Sprintf("%s: %d", bucket, c.Requests))
		}
	}
	if len(other) > 0 {
		sort.Strings(other)
		m.ops += "; elsewhere " + strings.Join(other, ", ")
	}
}

func gwOps(c *testserver.BucketRequests) string {
	if c.Requests == 0 {
		return "none"
	}
	keys := make([]string, 0, len(c.Ops))
	for k := range c.Ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, c.Ops[k]))
	}
	s := strings.Join(parts, ", ")
	if c.Errors > 0 {
		s += fmt.Sprintf(" (%d answered ≥400)", c.Errors)
	}
	return s
}

// checkMain marks a run after which the mirror's refs/heads/main is not
// upstream's: a copier that missed the moved ref.
func checkMain(m *measure, up, mirror string) {
	want, err1 := os.ReadFile(filepath.Join(up, "refs", "heads", "main"))
	got, err2 := os.ReadFile(filepath.Join(mirror, "refs", "heads", "main"))
	m.stale = err1 != nil || err2 != nil || string(want) != string(got)
}

// straceSet is what the local runs count: calls that name a file
// (open, stat, mkdir, rename, link, unlink…) and directory reads. Data
// reads and writes are not in it.
const straceSet = "%file,getdents64"

// traced runs argv under strace -f -c and returns its count of straceSet
// calls, with the breakdown.
func (b *bench) traced(ctx context.Context, argv []string) (int64, string, error) {
	out, err := os.CreateTemp(b.work, "strace-*.txt")
	if err != nil {
		return 0, "", err
	}
	out.Close()
	defer os.Remove(out.Name())
	full := append([]string{b.strace, "-f", "-c", "--seccomp-bpf", "-e", "trace=" + straceSet, "-o", out.Name()}, argv...)
	if _, err := runChild(ctx, nil, full...); err != nil {
		return 0, "", err
	}
	raw, err := os.ReadFile(out.Name())
	if err != nil {
		return 0, "", err
	}
	return parseStraceSummary(string(raw))
}

// parseStraceSummary reads strace -c's table: "% time seconds usecs/call
// calls [errors] syscall", then a total line.
func parseStraceSummary(s string) (int64, string, error) {
	type sc struct {
		name  string
		calls int64
	}
	var rows []sc
	var total int64 = -1
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || strings.HasPrefix(line, "%") || strings.HasPrefix(line, "-") {
			continue
		}
		n, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			continue
		}
		name := f[len(f)-1]
		if name == "total" {
			total = n
			continue
		}
		rows = append(rows, sc{name, n})
	}
	if total < 0 {
		return 0, "", fmt.Errorf("no total in strace's summary:\n%s", tail(s, 1000))
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].calls > rows[j].calls })
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %d", r.name, r.calls))
	}
	return total, strings.Join(parts, ", "), nil
}
