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

// A real daemon scrubs each sink of a mirror of two: a data file lost
// from the second sink only is copied back there, and the first sink's
// scrubs find nothing missing. /status.json, the metrics (under a sink
// label) and the status page read in headless Chromium (a section per
// sink, each naming its sink) say so sink by sink. Scrubs run every
// second: the second sink's last one may be the one that restored the
// file or one after it, so the counters say what was restored.
func TestDaemonScrubsEachSinkAndThePageShowsEach(t *testing.T) {
	browser := chromium(t)
	parent := t.TempDir()
	up := filepath.Join(parent, "up")
	a, b := filepath.Join(parent, "a"), filepath.Join(parent, "b")
	g := genCopy(t, up, generate.Options{Versions: 2, FilesPerVersion: 2, RowsPerFile: 5, FastParquet: true})
	if res := run(t, "sync", up, a, b); res.code != 0 {
		t.Fatalf("sync: exit %d\n%s", res.code, res.stderr)
	}
	lost := g.DataFiles[0]
	if err := os.Remove(filepath.Join(b, lost)); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeFile(t, configPath, fmt.Sprintf("listen: %s\nmirrors:\n  - name: towns\n    source: %s\n    sinks: [%s, %s]\n    schedule: \"@every 1h\"\n    scrub: \"@every 1s\"\n", addr, up, a, b))
	startDaemon(t, configPath, addr)

	scrubs := map[string]*daemon.ScrubStatus{}
	waitUntil(t, "a scrub of each sink in /status.json", 60*time.Second, func() bool {
		st := statusOf(t, addr)
		if len(st.Mirrors) != 2 {
			return false
		}
		for i, m := range st.Mirrors {
			if m.Mirror != "towns" || m.SinkIndex != i+1 {
				t.Fatalf("/status.json entry %d: mirror %q, sink_index %d", i, m.Mirror, m.SinkIndex)
			}
			if m.LastScrub == nil {
				return false
			}
			scrubs[m.Sink] = m.LastScrub
		}
		return scrape(t, addr)[fmt.Sprintf(`fdl_mirror_scrub_restored_files_total{mirror="towns",sink=%q}`, b)] >= 1
	})
	if s := scrubs[a]; s == nil || s.Result != daemon.ResultSuccess || s.FilesMissing != 0 || s.FilesRestored != 0 {
		t.Errorf("the first sink's scrub: %+v, want success with nothing missing", s)
	}
	if s := scrubs[b]; s == nil || s.Result != daemon.ResultSuccess || s.FilesMissing != s.FilesRestored {
		t.Errorf("the second sink's scrub: %+v, want success, what it found missing restored", s)
	}
	if _, err := os.Stat(filepath.Join(b, lost)); err != nil {
		t.Errorf("the file lost from the second sink is not back: %v", err)
	}
	m := scrape(t, addr)
	for series, want := range map[string]float64{
		fmt.Sprintf(`fdl_mirror_scrub_missing_files_total{mirror="towns",sink=%q}`, a):  0,
		fmt.Sprintf(`fdl_mirror_scrub_restored_files_total{mirror="towns",sink=%q}`, a): 0,
		fmt.Sprintf(`fdl_mirror_scrub_missing_files_total{mirror="towns",sink=%q}`, b):  1,
		fmt.Sprintf(`fdl_mirror_scrub_restored_files_total{mirror="towns",sink=%q}`, b): 1,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if _, ok := m[`fdl_mirror_scrub_restored_files_total{mirror="towns"}`]; ok {
		t.Error("the mirror of two sinks has a series without its sink")
	}

	ctx := startChromium(t, browser, parent)
	step, cancelStep := context.WithTimeout(ctx, 60*time.Second)
	defer cancelStep()
	if err := chromedp.Do(step, chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(chromedp.ID("mirror-towns-sink-2"))); err != nil {
		t.Fatalf("chromium: loading the page: %v", err)
	}
	for i, sink := range []string{a, b} {
		text, err := chromedp.Run(step, chromedp.Text(chromedp.ID(fmt.Sprintf("mirror-towns-sink-%d", i+1))))
		if err != nil {
			t.Fatalf("chromium: reading the text: %v", err)
		}
		for _, want := range []string{"towns", fmt.Sprintf("sink %d", i+1), sink, "Last scrub", daemon.ResultSuccess + ";"} {
			if !strings.Contains(text, want) {
				t.Errorf("the section of sink %d lacks %q:\n%s", i+1, want, text)
			}
		}
	}
}
