package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// The repositories of issues 29 and 43, where what a run costs should
// follow what changed, not what exists: "wide", one version of -wide data
// files and then one new version of one file; "million", the same with
// -million files; "rows10m", one version whose catalog lists -rows data
// files that are not written, read by a dry run against an empty mirror.
// They take minutes to generate, and are generated once into -cache and
// reused by later runs.

// cached returns the repository name in the cache folder, generated with
// opts the first time. A folder without its ".complete" mark was cut short
// and is generated again.
func (b *bench) cached(ctx context.Context, name string, opts generate.Options) (string, error) {
	dir, err := filepath.Abs(filepath.Join(b.cfg.cache, name))
	if err != nil {
		return "", err
	}
	mark := filepath.Join(dir, ".complete")
	if _, err := os.Stat(mark); err == nil {
		logf("%s: reusing %s", name, dir)
		return dir, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	logf("%s: generating into %s (once; later runs reuse it)", name, dir)
	if _, err := generate.Generate(ctx, dir, opts); err != nil {
		return "", fmt.Errorf("generating %s: %w", name, err)
	}
	return dir, os.WriteFile(mark, nil, 0o644)
}

// wideRepo runs the full mirror of the wide repository and the one new
// version of one file after it, local→local and s3→s3: the local full
// mirror best of -full-runs like every full scenario, the rest once each
// (at 300,000 files a full mirror takes each tool half a minute on a
// disk, and three to five minutes through the gateway).
func (b *bench) wideRepo(ctx context.Context) error {
	return b.oneWideVersion(ctx, "wide", b.cfg.wideFiles, b.cfg.stores["s3"])
}

// millionRepo is wideRepo with -million files (issue 43), local→local
// only: through the gateway a million files would take each tool about
// half an hour.
func (b *bench) millionRepo(ctx context.Context) error {
	return b.oneWideVersion(ctx, "million", b.cfg.millionFiles, false)
}

// oneWideVersion runs repository name, one version of n data files
// generated once into the cache folder name-n, then one new version of
// one file: on the local disk if -stores has local, and through the
// gateway too if withS3.
// The upstream of the run is a hard-linked copy of the cached one, which
// the new version is added to (the generator replaces files, never
// writes into one, so the cache is left as it was).
func (b *bench) oneWideVersion(ctx context.Context, name string, n int, withS3 bool) error {
	base, err := b.cached(ctx, fmt.Sprintf("%s-%d", name, n), generate.Options{Versions: 1, FilesPerVersion: n, FastParquet: true})
	if err != nil {
		return err
	}
	dir := filepath.Join(b.work, name)
	up := filepath.Join(dir, "upstream")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var s3 *s3Pair
	defer func() {
		if b.cfg.keep {
			return
		}
		b.discard(dir)
		if s3 != nil {
			for _, bucket := range []string{s3.up, s3.fdl, s3.rclone} {
				b.discard(filepath.Join(b.gw.Dir, bucket))
			}
		}
	}()
	if out, err := exec.CommandContext(ctx, "cp", "-al", base, up).CombinedOutput(); err != nil {
		return fmt.Errorf("linking the cached repository: %v: %s", err, out)
	}
	b.repoDesc[name] = fmt.Sprintf("1 version of %d data files (generator -fast, cached in %s), then 1 version of 1 file", n, b.cfg.cache)
	if withS3 && b.cfg.stores["s3"] {
		if s3, err = b.newS3Pair(ctx, name, up); err != nil {
			return err
		}
	}
	local := pairIn(dir, up)
	for _, scenario := range []string{"full", "incremental (+1 version, 1 file)"} {
		if scenario != "full" {
			if _, err := generate.AddVersion(ctx, up, 1, generate.Options{FastParquet: true}); err != nil {
				return fmt.Errorf("adding a version: %w", err)
			}
		}
		if b.cfg.stores["local"] {
			g := &group{repo: name, scenario: scenario, stores: localStores}
			m, err := b.runFDL(ctx, nil, local.up, local.fdl)
			if err != nil {
				return fmt.Errorf("%s local→local: %w", scenario, err)
			}
			r, err := b.runRclone(ctx, nil, local.up, local.rclone)
			if err != nil {
				return fmt.Errorf("%s local→local: %w", scenario, err)
			}
			checkMain(m, local.up, local.fdl)
			checkMain(&r.measure, local.up, local.rclone)
			if scenario == "full" {
				// Best of -full-runs, as the other full scenarios: one
				// run of 300,000 files on this disk can take twice the
				// next, for either tool.
				if err := b.repeatFullLocal(ctx, g, m, &r.measure, local); err != nil {
					return fmt.Errorf("full local→local: %w", err)
				}
			}
			g.rows = append(g.rows, m, &r.measure)
			b.add(g)
		}
		if s3 != nil {
			if scenario != "full" {
				if err := b.seed(ctx, s3); err != nil {
					return err
				}
			}
			g := &group{repo: name, scenario: scenario, stores: "s3→s3"}
			for _, tool := range []string{"fdl-mirror", "rclone"} {
				off := b.gw.LogOffset()
				var m *measure
				var dst string
				if tool == "fdl-mirror" {
					dst = s3.fdl
					m, err = b.runFDL(ctx, b.gw.env(), b.gw.url(s3.up), b.gw.url(dst))
				} else {
					dst = s3.rclone
					var r *rcloneMeasure
					if r, err = b.runRclone(ctx, b.gw.env(), "gw:"+s3.up, "gw:"+dst); err == nil {
						m = &r.measure
					}
				}
				if err != nil {
					return fmt.Errorf("%s s3→s3: %w", scenario, err)
				}
				counts, err := b.gw.RequestsSince(off)
				if err != nil {
					return err
				}
				b.fromLog(m, counts, s3.up, dst)
				checkMain(m, s3.localUp, filepath.Join(b.gw.Dir, dst))
				g.rows = append(g.rows, m)
			}
			b.add(g)
		}
	}
	return nil
}

// rowsCatalog runs a dry run of the repository whose one catalog lists
// -rows data files against an empty mirror: what reading a catalog of
// that many rows costs, alone (no file is copied or looked for upstream).
// The catalog timeout is raised to ten minutes so that the figure is the
// read's, not the default limit's.
func (b *bench) rowsCatalog(ctx context.Context) error {
	n := b.cfg.rows
	name := fmt.Sprintf("rows%s", shortCount(n))
	base, err := b.cached(ctx, "rows-"+fmt.Sprint(n), generate.Options{Versions: 1, FilesPerVersion: 1, UnwrittenFiles: n - 1, FastParquet: true})
	if err != nil {
		return err
	}
	dir := filepath.Join(b.work, name)
	mirror := filepath.Join(dir, "mirror")
	if err := os.MkdirAll(mirror, 0o755); err != nil {
		return err
	}
	b.discard(dir)
	b.repoDesc[name] = fmt.Sprintf("1 version whose catalog lists %d data files, 1 of them written (cached in %s)", n, b.cfg.cache)
	argv := []string{b.fdl, "sync", "--dry-run", "--json", "--log-level", "warn", "--catalog-timeout", "10m",
		"--concurrency", fmt.Sprint(b.cfg.concurrency), base, mirror}
	c, err := runChild(ctx, nil, argv...)
	m := &measure{tool: "fdl-mirror sync --dry-run", srcReq: -1, dstReq: -1, seen: -1, bytes: -1}
	if c != nil {
		m.wall, m.rss = c.Wall, c.MaxRSS
	}
	var sum struct {
		OK      bool `json:"ok"`
		Refused []struct {
			Message string `json:"message"`
		} `json:"refused"`
	}
	if c != nil && json.Unmarshal([]byte(c.Stdout), &sum) == nil && !sum.OK {
		// A refusal (a limit the catalog passed) is this run's figure too.
		b.notes = append(b.notes, fmt.Sprintf("**The %s dry run refused the version**: %+v", name, sum.Refused))
		m.tool += " (**refused**)"
	} else if err != nil {
		return err
	}
	b.add(&group{repo: name, scenario: "dry run, empty mirror", stores: localStores, rows: []*measure{m}})
	return nil
}

// shortCount writes 10000000 as 10m, 300000 as 300k.
func shortCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dm", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
