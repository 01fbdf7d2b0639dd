// Command fdl-bench measures fdl-mirror beside rclone on the same
// generated repositories, in the same run, and prints a markdown table:
// wall time, requests to the source and the sink, bytes moved and peak RSS
// of each tool, for a first full mirror, a no-op rerun and an incremental
// run, local→local and s3→s3 (a Versity S3 Gateway started for the run),
// and one large file against cp. `make bench` runs it (scripts/bench).
//
// Times and peak RSS are of the built binaries run as child processes
// (rusage of the child). Requests are counted where each tool's requests
// can be seen: on S3, in the gateway's access log, for both tools alike;
// on a local disk, fdl-mirror's store calls are counted by running the
// engine in-process on a third copy with internal/backend/counting, and
// rclone's are estimated from its own stats (checks, transfers) and the
// directories it must list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

type config struct {
	bin         string
	rclone      string
	versitygw   string
	work        string
	tmpfs       string
	out         string
	svg         string
	keep        bool
	concurrency int
	repos       []string
	stores      map[string]bool
	small       shape
	medium      shape
	large       []int64
	bigSize     int64
	newFiles    int
	tags        int
	bigRuns     int
	fullRuns    int
	rcloneTuned bool
	cache       string
	wideFiles   int
	// millionFiles are the data files of the million repository.
	millionFiles int
	rows         int
	seed         string
}

// shape is versions × data files per version.
type shape struct{ versions, files int }

func (s *shape) String() string { return fmt.Sprintf("%dx%d", s.versions, s.files) }
func (s *shape) Set(v string) error {
	a, b, ok := strings.Cut(v, "x")
	var err1, err2 error
	s.versions, err1 = strconv.Atoi(a)
	s.files, err2 = strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || s.versions < 1 || s.files < 1 {
		return fmt.Errorf("%q: want VERSIONSxFILES, e.g. 50x400", v)
	}
	return nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("fdl-bench", flag.ContinueOnError)
	cfg := config{small: shape{10, 30}, medium: shape{50, 400}}
	var repos, stores, large, big string
	fs.StringVar(&cfg.bin, "bin", "bin", "folder holding the built fdl-mirror binary")
	fs.StringVar(&cfg.rclone, "rclone", "rclone", "rclone binary")
	fs.StringVar(&cfg.versitygw, "versitygw", ".cache/bin/versitygw", "Versity S3 Gateway binary (scripts/install-test-servers)")
	fs.StringVar(&cfg.work, "work", "", "scratch folder (default: a new folder in $TMPDIR, removed afterwards)")
	fs.StringVar(&cfg.out, "out", "", "also write the markdown report to this `file`")
	fs.StringVar(&cfg.svg, "svg", "", "also write a chart of the times (fdl-mirror and rclone copy per scenario) to this SVG `file`")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the scratch folder")
	fs.IntVar(&cfg.concurrency, "concurrency", 8, "fdl-mirror --concurrency, rclone --transfers and --checkers")
	fs.StringVar(&repos, "repos", "small,medium,big,refs,fanout,million", "repositories to run: small, medium, big, refs (the small one with -tags tags), fanout (the medium one's shape, to one sink and to two in one run), wide (-wide files in one version, then one of one file), million (the same with -million files, local→local only), rows10m (a dry run of a catalog of -rows rows)")
	fs.StringVar(&cfg.cache, "cache", "bin/bench-cache", "folder the wide, million and rows10m repositories are generated into once, and reused from")
	fs.IntVar(&cfg.wideFiles, "wide", 300_000, "data files of the wide repository's first version")
	fs.IntVar(&cfg.millionFiles, "million", 1_000_000, "data files of the million repository's first version")
	fs.StringVar(&cfg.seed, "seed", "files", "how upstream buckets are seeded (untimed): files (hard links, or copies, put in the gateway's bucket folder with the extended attributes the gateway would store) or rclone (rclone copy through the gateway)")
	fs.IntVar(&cfg.rows, "rows", 10_000_000, "data file rows of the rows10m repository's catalog")
	fs.StringVar(&stores, "stores", "local,tmpfs,s3", "store pairs to run: local (local→local), tmpfs (local→local on the -tmpfs folder, full mirror only), s3 (s3→s3)")
	fs.StringVar(&cfg.tmpfs, "tmpfs", "/dev/shm", "a folder on a tmpfs, for -stores tmpfs")
	fs.Var(&cfg.small, "small", "small repository: VERSIONSxFILES per version")
	fs.Var(&cfg.medium, "medium", "medium repository: VERSIONSxFILES per version")
	fs.StringVar(&large, "large", "256MiB,256MiB,256MiB", "large data files in the medium repository's first version")
	fs.StringVar(&big, "big", "2GiB", "size of the one large file of the big repository")
	fs.IntVar(&cfg.newFiles, "new-files", 10, "data files of the incremental run's new version")
	fs.IntVar(&cfg.tags, "tags", 20000, "tags of the refs repository (3 versions of 2 files)")
	fs.BoolVar(&cfg.rcloneTuned, "rclone-tuned", true, "on S3, also run rclone copy --fast-list --checksum")
	fs.IntVar(&cfg.fullRuns, "full-runs", 2, "runs of each tool's first full mirror (the best time is kept)")
	fs.IntVar(&cfg.bigRuns, "big-runs", 3, "runs of each tool on the big repository (the best time is kept)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cfg.seed != "files" && cfg.seed != "rclone" {
		fmt.Fprintf(os.Stderr, "fdl-bench: -seed %q: want files or rclone\n", cfg.seed)
		return 2
	}
	cfg.repos = splitList(repos)
	cfg.stores = map[string]bool{}
	for _, s := range splitList(stores) {
		cfg.stores[s] = true
	}
	for _, s := range splitList(large) {
		n, err := parseSize(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fdl-bench: -large:", err)
			return 2
		}
		cfg.large = append(cfg.large, n)
	}
	var err error
	if cfg.bigSize, err = parseSize(big); err != nil {
		fmt.Fprintln(os.Stderr, "fdl-bench: -big:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := newBench(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-bench:", err)
		return 1
	}
	err = b.run(ctx)
	b.close()
	report := b.markdown()
	fmt.Print(report)
	if cfg.out != "" {
		if werr := os.WriteFile(cfg.out, []byte(report), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, "fdl-bench:", werr)
			return 1
		}
	}
	if cfg.svg != "" {
		if werr := b.writeChart(cfg.svg); werr != nil {
			fmt.Fprintln(os.Stderr, "fdl-bench:", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdl-bench:", err)
		return 1
	}
	return 0
}

// writeChart writes the SVG chart of this run's times to path.
func (b *bench) writeChart(path string) error {
	var buf strings.Builder
	title := fmt.Sprintf("fdl-mirror and rclone copy, wall time per scenario (%s, %s)", b.started.UTC().Format("2006-01-02 15:04 MST"), b.fdlVersion)
	if err := writeSVG(&buf, title, b.chartRows()); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(buf.String()), 0o644)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = num, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive integer with an optional KiB, MiB or GiB", s)
	}
	return n * mult, nil
}

// bench holds one benchmark run's state and results.
type bench struct {
	cfg        config
	fdl        string // fdl-mirror binary
	work       string
	ownWork    bool
	gw         *gateway
	groups     []*group
	notes      []string
	started    time.Time
	machine    string
	rcloneV    string
	strace     string // strace binary, "" when absent
	fdlVersion string
	repoDesc   map[string]string
	discarded  []string // folders to remove when the bench ends (see discard)
}

// discard has dir removed when the bench ends, not now. On ext4 without a
// journal (this machine's disk) the inode allocator skips inodes freed in
// the last minutes, scanning for others: right after a mirror of 20,000
// files was removed, the next 20,000 files took up to twice as long to
// create (a third of a run's CPU in recently_deleted() and the block
// lookups under it, perf), for whichever tool came next.
func (b *bench) discard(dir string) { b.discarded = append(b.discarded, dir) }

// group is one scenario on one repository and one pair of stores: a row
// per tool.
type group struct {
	repo, scenario, stores string
	rows                   []*measure
}

// measure is one tool's run.
type measure struct {
	tool   string
	wall   time.Duration
	rss    int64
	srcReq int64 // -1: not known
	dstReq int64
	approx bool   // request counts are an estimate (rclone on a local disk)
	ops    string // breakdown of requests
	seen   int64  // objects the tool examined (listed or stat'ed); -1 unknown
	bytes  int64  // bytes written to the sink, by the tool's own account
	files  int64
	// srcRead is what fdl-mirror's engine read from the source, counted
	// in-process: each file once means srcRead ≈ bytes.
	srcRead int64
	// syscalls are the file-system calls of the same run under strace
	// (local runs); -1 or 0 when not measured.
	syscalls   int64
	syscallOps string
	// stale: after the run the mirror's refs/heads/main was not upstream's.
	stale bool
}

func newBench(ctx context.Context, cfg config) (*bench, error) {
	b := &bench{cfg: cfg, started: time.Now(), repoDesc: map[string]string{}}
	var err error
	if b.fdl, err = filepath.Abs(filepath.Join(cfg.bin, "fdl-mirror")); err != nil {
		return nil, err
	}
	if _, err := os.Stat(b.fdl); err != nil {
		return nil, fmt.Errorf("fdl-mirror binary: %w (run make build)", err)
	}
	binaries := []string{b.fdl}
	if rc, err := exec.LookPath(cfg.rclone); err == nil {
		binaries = append(binaries, rc)
	}
	evictFromPageCache(binaries...)
	if c, err := runChild(ctx, nil, b.fdl, "version"); err == nil {
		b.fdlVersion = strings.TrimSpace(c.Stdout)
	}
	c, err := runChild(ctx, nil, cfg.rclone, "version")
	if err != nil {
		return nil, fmt.Errorf("rclone: %w (scripts/bench installs Debian's rclone)", err)
	}
	b.rcloneV, _, _ = strings.Cut(c.Stdout, "\n")
	if cfg.work == "" {
		if b.work, err = os.MkdirTemp("", "fdl-bench-"); err != nil {
			return nil, err
		}
		b.ownWork = true
	} else {
		if b.work, err = filepath.Abs(cfg.work); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(b.work, 0o755); err != nil {
			return nil, err
		}
	}
	// rclone reads no user config: its remote comes from the environment.
	if err := os.WriteFile(filepath.Join(b.work, "rclone.conf"), nil, 0o600); err != nil {
		return nil, err
	}
	b.machine = machineInfo(ctx, b.work)
	if p, err := exec.LookPath("strace"); err == nil {
		b.strace = p
	} else {
		b.notes = append(b.notes, "strace was not found: the file-system calls of local runs were not counted.")
	}
	return b, nil
}

func (b *bench) close() {
	b.gw.stop()
	if !b.cfg.keep {
		for _, dir := range b.discarded {
			os.RemoveAll(dir)
		}
	}
	if b.ownWork && !b.cfg.keep {
		os.RemoveAll(b.work)
	} else {
		logf("scratch folder kept: %s", b.work)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s fdl-bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) run(ctx context.Context) error {
	if b.cfg.stores["s3"] {
		bin, err := filepath.Abs(b.cfg.versitygw)
		if err != nil {
			return err
		}
		if b.gw, err = startGateway(bin, filepath.Join(b.work, "gw")); err != nil {
			return err
		}
		logf("Versity S3 Gateway at %s", b.gw.Endpoint)
	}
	var failed []string
	for _, name := range b.cfg.repos {
		var err error
		switch name {
		case "small":
			err = b.repoScenarios(ctx, "small", b.cfg.small, nil, 0)
		case "medium":
			err = b.repoScenarios(ctx, "medium", b.cfg.medium, b.cfg.large, 0)
		case "refs":
			err = b.repoScenarios(ctx, "refs", shape{3, 2}, nil, b.cfg.tags)
		case "big":
			err = b.bigFile(ctx)
		case "wide":
			err = b.wideRepo(ctx)
		case "million":
			err = b.millionRepo(ctx)
		case "rows10m":
			err = b.rowsCatalog(ctx)
		case "fanout":
			err = b.fanoutRepo(ctx)
		default:
			err = fmt.Errorf("unknown repository %q (small, medium, big, refs, fanout, wide, million, rows10m)", name)
		}
		if err != nil {
			// The other repositories are still measured; the report says
			// what failed.
			failed = append(failed, fmt.Sprintf("%s: %v", name, err))
			b.notes = append(b.notes, fmt.Sprintf("**The %s runs failed**: %v", name, err))
			logf("%s failed: %v", name, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

func (b *bench) add(g *group) {
	b.groups = append(b.groups, g)
	for _, m := range g.rows {
		logf("%s %s %s %s: %v, %s, src %d, sink %d requests, %s",
			g.repo, g.scenario, g.stores, m.tool, m.wall.Round(time.Millisecond), mib(m.rss), m.srcReq, m.dstReq, mib(m.bytes))
	}
}

// repoScenarios runs the full mirror, the no-op rerun and the incremental
// run on one generated repository, with tags tags besides main, on every
// store pair asked for.
func (b *bench) repoScenarios(ctx context.Context, name string, sh shape, large []int64, tags int) error {
	dir := filepath.Join(b.work, name)
	up := filepath.Join(dir, "upstream")
	var s3 *s3Pair
	defer func() {
		if b.cfg.keep {
			return
		}
		b.discard(dir)
		if s3 != nil {
			// The gateway's posix backend keeps a bucket as a folder.
			for _, bucket := range append([]string{s3.up, s3.fdl, s3.rclone, s3.tuned}, s3.extra...) {
				b.discard(filepath.Join(b.gw.Dir, bucket))
			}
		}
	}()
	start := time.Now()
	gopts := generate.Options{Versions: sh.versions, FilesPerVersion: sh.files, LargeFiles: large, FastParquet: true}
	r, err := generate.Generate(ctx, up, gopts)
	if err != nil {
		return fmt.Errorf("generating: %w", err)
	}
	var total int64
	for _, f := range r.DataFiles {
		if fi, err := os.Stat(filepath.Join(up, filepath.FromSlash(f))); err == nil {
			total += fi.Size()
		}
	}
	if tags > 0 {
		if err := addTags(up, r.Versions, tags); err != nil {
			return fmt.Errorf("adding tags: %w", err)
		}
	}
	desc := fmt.Sprintf("%d versions, %d data files, %s", len(r.Versions), len(r.DataFiles), mib(total))
	if tags > 0 {
		desc += fmt.Sprintf(", %d refs", tags+1)
	}
	if len(large) > 0 {
		desc += fmt.Sprintf(" (%d of them large: %s)", len(large), sizesString(large))
	}
	b.repoDesc[name] = desc
	logf("%s: generated %s in %v", name, desc, time.Since(start).Round(time.Millisecond))

	if b.cfg.stores["s3"] {
		if s3, err = b.newS3Pair(ctx, name, up); err != nil {
			return err
		}
	}
	local := pairIn(dir, up)
	if b.cfg.stores["tmpfs"] && tags == 0 {
		// The first full mirror only: on a tmpfs the difference the disk
		// makes is gone, and what is left is each tool's own work.
		if err := b.tmpfsFull(ctx, name, up); err != nil {
			return fmt.Errorf("full %s: %w", tmpfsStores, err)
		}
	}
	for _, scenario := range []string{"full", "no-op", "incremental"} {
		if scenario == "incremental" {
			if _, err := generate.AddVersion(ctx, up, b.cfg.newFiles, generate.Options{FastParquet: true}); err != nil {
				return fmt.Errorf("adding a version: %w", err)
			}
		}
		label := scenario
		if scenario == "incremental" {
			label = fmt.Sprintf("incremental (+1 version, %d files)", b.cfg.newFiles)
		}
		if b.cfg.stores["local"] {
			g, err := b.localRun(ctx, name, label, localStores, local)
			if err != nil {
				return fmt.Errorf("%s local→local: %w", scenario, err)
			}
			b.add(g)
		}
		if s3 != nil {
			g, err := b.s3Run(ctx, name, label, s3)
			if err != nil {
				return fmt.Errorf("%s s3→s3: %w", scenario, err)
			}
			b.add(g)
		}
	}
	return nil
}

// addTags gives the repository at dir n tags (refs/tags/t000000…) over
// its versions, in ref files and refs.json.
func addTags(dir string, versions []string, n int) error {
	tags := repo.Refs{}
	for i := range n {
		tags[fmt.Sprintf("refs/tags/t%06d", i)] = versions[i%len(versions)]
	}
	_, err := generate.SetRefs(dir, tags)
	return err
}

// tmpfsFull copies the upstream at up to a folder on the tmpfs and runs
// the first full mirror there, both tools alike.
func (b *bench) tmpfsFull(ctx context.Context, name, up string) error {
	dir, err := os.MkdirTemp(b.cfg.tmpfs, "fdl-bench-"+name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tup := filepath.Join(dir, "upstream")
	if out, err := exec.CommandContext(ctx, "cp", "-a", up, tup).CombinedOutput(); err != nil {
		return fmt.Errorf("copying the upstream to %s: %v: %s", b.cfg.tmpfs, err, out)
	}
	g, err := b.localRun(ctx, name, "full", tmpfsStores, pairIn(dir, tup))
	if err != nil {
		return err
	}
	b.add(g)
	return nil
}

func sizesString(sizes []int64) string {
	var parts []string
	for _, s := range sizes {
		parts = append(parts, mib(s))
	}
	return strings.Join(parts, ", ")
}

// rcloneArgs are the flags every rclone copy gets: the same parallelism
// as fdl-mirror, final stats as JSON on stderr, no user config.
func (b *bench) rcloneCopy(src, dst string, extra ...string) []string {
	n := strconv.Itoa(b.cfg.concurrency)
	args := []string{b.cfg.rclone, "copy", src, dst, "--transfers", n, "--checkers", n,
		"--config", filepath.Join(b.work, "rclone.conf"),
		"--use-json-log", "--stats", "1h", "--stats-log-level", "NOTICE"}
	return append(args, extra...)
}

func (b *bench) fdlSync(src, dst string) []string {
	return []string{b.fdl, "sync", "--json", "--log-level", "warn", "--concurrency", strconv.Itoa(b.cfg.concurrency), src, dst}
}

// markdown is the report: the machine, the repositories, one table row
// per tool run, and the targets of issue 6 checked against the figures.
func (b *bench) markdown() string {
	var w strings.Builder
	fmt.Fprintf(&w, "## Results (%s, %v)\n\n", b.started.UTC().Format("2006-01-02 15:04 MST"), time.Since(b.started).Round(time.Second))
	fmt.Fprintf(&w, "%s\n", b.machine)
	fmt.Fprintf(&w, "- fdl-mirror: `%s`\n", b.fdlVersion)
	fmt.Fprintf(&w, "- rclone: %s; parallelism: fdl-mirror `--concurrency %d`, rclone `--transfers %d --checkers %d`\n",
		b.rcloneV, b.cfg.concurrency, b.cfg.concurrency, b.cfg.concurrency)
	names := make([]string, 0, len(b.repoDesc))
	for n := range b.repoDesc {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&w, "- repository %s: %s\n", n, b.repoDesc[n])
	}
	w.WriteString("\n| repo | scenario | stores | tool | time | ÷ fdl-mirror | requests to source | requests to sink | objects listed | fs calls (strace) | bytes written | peak RSS |\n")
	w.WriteString("|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, g := range b.groups {
		var base time.Duration
		for _, m := range g.rows {
			if m.tool == "fdl-mirror" {
				base = m.wall
			}
		}
		for _, m := range g.rows {
			ratio := "–"
			if base > 0 {
				ratio = fmt.Sprintf("%.2f×", float64(m.wall)/float64(base))
			}
			sys := int64(-1)
			if m.syscalls > 0 {
				sys = m.syscalls
			}
			fmt.Fprintf(&w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				g.repo, g.scenario, g.stores, toolName(m), seconds(m.wall), ratio,
				count(m.srcReq, m.approx), count(m.dstReq, m.approx), count(m.seen, m.approx), count(sys, false), mib(m.bytes), mib(m.rss))
		}
	}
	var ops []string
	for _, g := range b.groups {
		for _, m := range g.rows {
			if m.ops != "" {
				ops = append(ops, fmt.Sprintf("- %s, %s, %s, %s: %s", g.repo, g.scenario, g.stores, m.tool, m.ops))
			}
			if m.syscallOps != "" {
				ops = append(ops, fmt.Sprintf("- %s, %s, %s, %s, file-system calls: %s", g.repo, g.scenario, g.stores, m.tool, m.syscallOps))
			}
		}
	}
	if len(ops) > 0 {
		w.WriteString("\nRequests by kind:\n\n" + strings.Join(ops, "\n") + "\n")
	}
	w.WriteString("\n" + b.targets())
	for _, n := range b.notes {
		w.WriteString("\n" + n + "\n")
	}
	return w.String()
}

func toolName(m *measure) string {
	if m.stale {
		return m.tool + " (**main not updated**)"
	}
	return m.tool
}

func seconds(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	if d < 10*time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func count(n int64, approx bool) string {
	if n < 0 {
		return "–"
	}
	s := strconv.FormatInt(n, 10)
	if approx {
		return "≈" + s
	}
	return s
}

func mib(n int64) string {
	switch {
	case n < 0:
		return "–"
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
}

// machineInfo describes the machine as the report must: cores, memory,
// CPU model, the disk under the scratch folder.
func machineInfo(ctx context.Context, work string) string {
	var lines []string
	if c, err := runChild(ctx, nil, "nproc"); err == nil {
		lines = append(lines, "- `nproc`: "+strings.TrimSpace(c.Stdout))
	}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				lines = append(lines, "- CPU: "+strings.TrimSpace(v))
				break
			}
		}
	}
	if c, err := runChild(ctx, nil, "free", "-h"); err == nil {
		lines = append(lines, "- `free -h`:\n\n```\n"+strings.TrimRight(c.Stdout, "\n")+"\n```\n")
	}
	if c, err := runChild(ctx, nil, "df", "-hT", work); err == nil {
		lines = append(lines, "- disk under the scratch folder (`df -hT`):\n\n```\n"+strings.TrimRight(c.Stdout, "\n")+"\n```\n")
	}
	if c, err := runChild(ctx, nil, "findmnt", "-no", "SOURCE,FSTYPE,OPTIONS", "-T", work); err == nil {
		lines = append(lines, "- its mount: `"+strings.TrimSpace(c.Stdout)+"`")
	}
	if c, err := runChild(ctx, nil, "uname", "-sr"); err == nil {
		lines = append(lines, "- kernel: "+strings.TrimSpace(c.Stdout))
	}
	return strings.Join(lines, "\n")
}
