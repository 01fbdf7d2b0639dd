package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fdl-mirror/fdl-mirror/internal/daemon"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// The status page of a real daemon, read in headless Chromium, shows a
// mirror's scrub and what its last one found. The data file the test
// deletes is gone on both sides, so every scrub finds the same: one file
// missing, none restored, and no timestamp of a successful scrub.
func TestStatusPageShowsTheLastScrubInABrowser(t *testing.T) {
	browser := chromium(t)
	parent := t.TempDir()
	up, sink := filepath.Join(parent, "up"), filepath.Join(parent, "mirror")
	g := gen(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 5, FastParquet: true})
	if res := run(t, "sync", up, sink); res.code != 0 {
		t.Fatalf("sync: exit %d\n%s", res.code, res.stderr)
	}
	lost := g.DataFiles[0]
	for _, dir := range []string{up, sink} {
		if err := os.Remove(filepath.Join(dir, lost)); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeFile(t, configPath, fmt.Sprintf("listen: %s\nmirrors:\n  - name: towns\n    source: %s\n    sink: %s\n    schedule: \"@every 1h\"\n    scrub: \"@every 1s\"\n", addr, up, sink))
	startDaemon(t, configPath, addr)

	var last *daemon.ScrubStatus
	waitUntil(t, "a scrub in /status.json", 60*time.Second, func() bool {
		st := statusOf(t, addr)
		if len(st.Mirrors) != 1 || st.Mirrors[0].LastScrub == nil {
			return false
		}
		last = st.Mirrors[0].LastScrub
		return true
	})
	if last.Result != daemon.ResultRefused || last.FilesMissing != 1 || last.FilesRestored != 0 {
		t.Errorf("/status.json: last scrub %+v, want refused with the 1 file deleted missing and 0 restored", last)
	}
	if m := scrape(t, addr); m[`fdl_mirror_scrub_missing_files_total{mirror="towns"}`] < 1 ||
		m[`fdl_mirror_scrub_restored_files_total{mirror="towns"}`] != 0 {
		t.Errorf("metrics: %v", m)
	}

	ctx := startChromium(t, browser, parent)
	step, cancelStep := context.WithTimeout(ctx, 60*time.Second)
	defer cancelStep()
	if err := chromedp.Do(step, chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(chromedp.ID("mirror-towns"))); err != nil {
		t.Fatalf("chromium: loading the page: %v", err)
	}
	text, err := chromedp.Run(step, chromedp.Text(chromedp.ID("mirror-towns")))
	if err != nil {
		t.Fatalf("chromium: reading the text: %v", err)
	}
	for _, want := range []string{
		"Scrub", "@every 1s", "Last scrub",
		fmt.Sprintf("%s; %d data files found missing, %d restored", daemon.ResultRefused, 1, 0),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the page's section lacks %q:\n%s", want, text)
		}
	}
}
