package main

import (
	"strings"
	"testing"
	"time"
)

// Issue 29's targets are checked from the wide and rows runs' figures:
// the full copy at 2× rclone and under 150 MiB, the one new version in
// 0.5 s, under 150 MiB and at 10× rclone, the dry run under 300 MiB.
func TestTargetsCheckIssue29(t *testing.T) {
	const mb = 1 << 20
	run := func(wideFull, rcFull, wideInc, rcInc time.Duration, incRSS, rowsRSS int64) string {
		b := &bench{cfg: config{wideFiles: 300_000, rows: 10_000_000}}
		b.groups = []*group{
			{repo: "wide", scenario: "full (best of 2)", stores: "local→local", rows: []*measure{
				{tool: "fdl-mirror", wall: wideFull, rss: 110 * mb}, {tool: "rclone copy", wall: rcFull, rss: 550 * mb}}},
			{repo: "wide", scenario: "incremental (+1 version, 1 file)", stores: "local→local", rows: []*measure{
				{tool: "fdl-mirror", wall: wideInc, rss: incRSS}, {tool: "rclone copy", wall: rcInc, rss: 450 * mb}}},
			{repo: "rows10m", scenario: "dry run, empty mirror", stores: "local→local", rows: []*measure{
				{tool: "fdl-mirror sync --dry-run", wall: time.Minute, rss: rowsRSS}}},
		}
		return b.targets()
	}
	line := func(out, prefix string) string { return targetLine(t, out, prefix) }
	met := run(13*time.Second, 33*time.Second, 300*time.Millisecond, 5*time.Second, 120*mb, 220*mb)
	for _, p := range []string{"full copy of 300000 files", "one new version of one file", "catalog of 10000000 rows"} {
		if l := line(met, p); !strings.HasSuffix(l, ": met") {
			t.Errorf("want met: %s", l)
		}
	}
	missed := run(20*time.Second, 33*time.Second, 600*time.Millisecond, 5*time.Second, 120*mb, 320*mb)
	for _, p := range []string{"full copy of 300000 files", "one new version of one file", "catalog of 10000000 rows"} {
		if l := line(missed, p); !strings.HasSuffix(l, "**MISSED**") {
			t.Errorf("want missed: %s", l)
		}
	}
	if l := line(run(13*time.Second, 33*time.Second, 300*time.Millisecond, 2*time.Second, 120*mb, 220*mb), "one new version"); !strings.HasSuffix(l, "**MISSED**") {
		t.Errorf("6.7× rclone is not 10×: %s", l)
	}
	if l := line(run(13*time.Second, 33*time.Second, 300*time.Millisecond, 5*time.Second, 160*mb, 220*mb), "one new version"); !strings.HasSuffix(l, "**MISSED**") {
		t.Errorf("160 MiB is not under 150: %s", l)
	}
}

// Issue 43's fan-out targets: two sinks in at most 1.3× one sink's time,
// and the upstream's bytes of one sink, within 1 %.
func TestTargetsCheckIssue43FanOut(t *testing.T) {
	const mb = 1 << 20
	run := func(oneWall, twoWall time.Duration, oneRead, twoRead int64) string {
		b := &bench{}
		b.groups = []*group{
			{repo: "fanout", scenario: oneSink + " (best of 2)", stores: "s3→s3", rows: []*measure{
				{tool: "fdl-mirror", wall: oneWall, srcRead: oneRead}, {tool: "rclone copy", wall: 2 * oneWall, srcRead: oneRead}}},
			{repo: "fanout", scenario: twoSinks + " (best of 2)", stores: "s3→s3", rows: []*measure{
				{tool: "fdl-mirror", wall: twoWall, srcRead: twoRead}, {tool: "rclone copy, two runs", wall: 4 * oneWall, srcRead: 2 * oneRead}}},
		}
		return b.targets()
	}
	lines := func(out string) (wall, read string) {
		for _, l := range strings.Split(out, "\n") {
			switch {
			case strings.Contains(l, "two sinks from one upstream in at most 1.3×"):
				wall = l
			case strings.Contains(l, "two sinks read from the upstream what one does"):
				read = l
			}
		}
		if wall == "" || read == "" {
			t.Fatalf("no fan-out target lines in:\n%s", out)
		}
		return wall, read
	}
	w, r := lines(run(10*time.Second, 12*time.Second, 1000*mb, 1005*mb))
	if !strings.HasSuffix(w, ": met") || !strings.HasSuffix(r, ": met") {
		t.Errorf("want both met:\n%s\n%s", w, r)
	}
	w, r = lines(run(10*time.Second, 14*time.Second, 1000*mb, 2000*mb))
	if !strings.HasSuffix(w, "**MISSED**") || !strings.HasSuffix(r, "**MISSED**") {
		t.Errorf("1.4× and twice the bytes: want both missed:\n%s\n%s", w, r)
	}
}

// Issue 43's million-file targets are checked from the million runs'
// figures: the full copy at 2× rclone and under 150 MiB, the one new
// version in 0.5 s and under 150 MiB (no ratio to rclone asked); the wide
// repository's lines are not taken for them.
func TestTargetsCheckIssue43Million(t *testing.T) {
	const mb = 1 << 20
	run := func(full, rcFull time.Duration, fullRSS int64, inc, rcInc time.Duration, incRSS int64) string {
		b := &bench{cfg: config{wideFiles: 300_000, millionFiles: 1_000_000}}
		b.groups = []*group{
			// Wide figures that would meet every target: the million
			// lines must not read them.
			{repo: "wide", scenario: "full (best of 2)", stores: "local→local", rows: []*measure{
				{tool: "fdl-mirror", wall: time.Second, rss: 100 * mb}, {tool: "rclone copy", wall: time.Minute, rss: 550 * mb}}},
			{repo: "wide", scenario: "incremental (+1 version, 1 file)", stores: "local→local", rows: []*measure{
				{tool: "fdl-mirror", wall: 100 * time.Millisecond, rss: 100 * mb}, {tool: "rclone copy", wall: time.Minute, rss: 450 * mb}}},
			{repo: "million", scenario: "full (best of 2)", stores: "local→local", rows: []*measure{
				{tool: "fdl-mirror", wall: full, rss: fullRSS}, {tool: "rclone copy", wall: rcFull, rss: 1800 * mb}}},
			{repo: "million", scenario: "incremental (+1 version, 1 file)", stores: "local→local", rows: []*measure{
				{tool: "fdl-mirror", wall: inc, rss: incRSS}, {tool: "rclone copy", wall: rcInc, rss: 1500 * mb}}},
		}
		return b.targets()
	}
	line := func(out, prefix string) string { return targetLine(t, out, prefix) }
	const full, inc = "full copy of 1000000 files", "one new version of one file over 1000000"
	met := run(40*time.Second, 90*time.Second, 140*mb, 450*time.Millisecond, time.Second, 140*mb)
	for _, p := range []string{full, inc} {
		if l := line(met, p); !strings.HasSuffix(l, ": met") {
			t.Errorf("want met: %s", l)
		}
	}
	for name, c := range map[string]struct {
		out, prefix string
	}{
		"1.8× rclone is not 2×":     {run(50*time.Second, 90*time.Second, 140*mb, 450*time.Millisecond, time.Second, 140*mb), full},
		"a full copy at 150 MiB":    {run(40*time.Second, 90*time.Second, 150*mb, 450*time.Millisecond, time.Second, 140*mb), full},
		"0.6 s is not 0.5 s":        {run(40*time.Second, 90*time.Second, 140*mb, 600*time.Millisecond, time.Second, 140*mb), inc},
		"an incremental at 151 MiB": {run(40*time.Second, 90*time.Second, 140*mb, 450*time.Millisecond, time.Second, 151*mb), inc},
	} {
		if l := line(c.out, c.prefix); !strings.HasSuffix(l, "**MISSED**") {
			t.Errorf("%s: want missed: %s", name, l)
		}
	}
}

// targetLine is the line of targets' output out that contains prefix.
func targetLine(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, prefix) {
			return l
		}
	}
	t.Fatalf("no target line with %q in:\n%s", prefix, out)
	return ""
}
