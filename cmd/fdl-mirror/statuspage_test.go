package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fdl-mirror/fdl-mirror/internal/daemon"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// hostileRefName is a ref an upstream may list: markup that would run if
// the page did not escape it.
const hostileRefName = `refs/heads/<img src=x onerror=alert(document.domain)>`

// chromium finds Debian's Chromium; `make test` installs it where it can.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("Chromium not installed (Debian package chromium; `make test` installs it with apt where it can): the status page is not tested in a browser")
	return ""
}

// startChromium starts the browser at browser, its profile in dir, with
// opts besides the tests' own, and returns its context, ended with the
// test. The browser lives as long as that context: the timeouts go on the
// actions' contexts.
func startChromium(t *testing.T, browser, dir string, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewExecAllocator(context.Background(), append(append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox, // the tests may run as root, which Chromium's sandbox refuses
		chromedp.DisableGPU,
		chromedp.UserDataDir(filepath.Join(dir, "chromium-profile")),
	), opts...)...)
	t.Cleanup(cancel)
	ctx, cancel = chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// statusOf reads the daemon's /status.json.
func statusOf(t *testing.T, addr string) daemon.Status {
	t.Helper()
	code, body := httpGet("http://" + addr + "/status.json")
	var st daemon.Status
	if code != http.StatusOK {
		return st
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, body)
	}
	return st
}

// The status page of a real daemon process, read in headless Chromium: a
// healthy mirror and a failing one whose upstream lists a ref named with
// markup. The page shows both, the refusal with its reason, and the
// hostile name as text: no element made of it, no script run.
func TestStatusPageInABrowser(t *testing.T) {
	browser := chromium(t)
	parent := t.TempDir()
	good := testMirror{"towns", filepath.Join(parent, "up-towns"), filepath.Join(parent, "mirror-towns")}
	goodRepo := gen(t, good.up, generate.Options{Versions: 3, Tags: true})

	badUp := filepath.Join(parent, "up-rivers")
	badRepo := gen(t, badUp, generate.Options{Versions: 1, Seed: 5})
	writeFile(t, filepath.Join(badUp, "refs.json"),
		`{"refs/heads/main": "`+badRepo.Versions[0]+`", "`+strings.ReplaceAll(hostileRefName, `"`, `\"`)+`": "`+badRepo.Versions[0]+`"}`)
	web := testserver.HTTP(t, badUp)
	bad := testMirror{"rivers", web.URL, filepath.Join(parent, "mirror-rivers")}

	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, addr, good, bad)
	startDaemon(t, configPath, addr)

	waitUntil(t, "a run of both mirrors in /status.json", 60*time.Second, func() bool {
		st := statusOf(t, addr)
		if len(st.Mirrors) != 2 {
			return false
		}
		return st.Mirrors[0].LastSuccess != nil && st.Mirrors[1].LastRun != nil && len(st.Mirrors[1].LastRun.Refused) > 0
	})
	st := statusOf(t, addr)
	if g := st.Mirrors[0]; len(g.Refs) != len(goodRepo.Refs) || g.Behind {
		t.Errorf("towns: refs %+v, want %d current", g.Refs, len(goodRepo.Refs))
	}

	ctx := startChromium(t, browser, parent, chromedp.WindowSize(1100, 900))
	var dialogs atomic.Int32
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	step, cancelStep := context.WithTimeout(ctx, 60*time.Second)
	defer cancelStep()
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("chromium: %s: %v", what, err)
		}
	}
	// The mirrors run every second: a load may catch one mid-run (its
	// state "running"). Load again until it shows both between runs.
	var text string
	for attempt := 0; ; attempt++ {
		must(chromedp.Do(step, chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(chromedp.ID("mirror-rivers"))), "loading the page")
		var err error
		text, err = chromedp.Run(step, chromedp.Text(chromedp.CSS("body")))
		must(err, "reading the text")
		if !strings.Contains(strings.ToLower(text), "running") || attempt == 20 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	html, err := chromedp.Run(step, chromedp.OuterHTML(chromedp.CSS("html")))
	must(err, "reading the HTML")
	refresh, err := chromedp.Run(step, chromedp.AttributeValue(chromedp.CSS(`meta[http-equiv="refresh"]`), "content"))
	must(err, "reading the refresh")
	injected, err := chromedp.Run(step, chromedp.Evaluate[int](`document.querySelectorAll("img, script, iframe, object, embed, [onerror]").length`))
	must(err, "counting injected elements")
	sections, err := chromedp.Run(step, chromedp.Evaluate[int](`document.querySelectorAll("main > section").length`))
	must(err, "counting sections")
	screenshot, err := chromedp.Run(step, chromedp.FullScreenshot(100))
	must(err, "taking a screenshot")
	shot := filepath.Join(t.TempDir(), "status-page.png")
	if err := os.WriteFile(shot, screenshot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(screenshot))
	// FDL_MIRROR_SCREENSHOT=docs/status-page.png keeps a copy for the docs.
	if keep := os.Getenv("FDL_MIRROR_SCREENSHOT"); keep != "" {
		if err := os.WriteFile(keep, screenshot, 0o644); err != nil {
			t.Error(err)
		}
	}
	if len(screenshot) < 1000 || string(screenshot[1:4]) != "PNG" {
		t.Errorf("screenshot is not a PNG image (%d bytes)", len(screenshot))
	}

	lower := strings.ToLower(text)
	for _, want := range []string{
		"towns", "rivers", good.up, "ok", "failing",
		"refs/tags/", "refused in the last run", "[bad-ref]",
		strings.ToLower(hostileRefName), // shown as text
	} {
		if !strings.Contains(lower, strings.ToLower(want)) {
			t.Errorf("the page's text lacks %q", want)
		}
	}
	if sections != 2 {
		t.Errorf("%d mirror sections, want 2", sections)
	}
	if injected != 0 || dialogs.Load() != 0 {
		t.Errorf("the hostile ref name made %d elements and %d dialogs", injected, dialogs.Load())
	}
	if refresh.Value != fmt.Sprint(daemon.PageRefreshSeconds) {
		t.Error("the page does not refresh itself (no meta refresh)")
	}
	if t.Failed() {
		t.Logf("page text:\n%s\nHTML:\n%s", text, html)
	}

	// Without JavaScript the page reads the same: there is none to need.
	must(chromedp.Do(step,
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
			return err
		}),
		chromedp.Navigate("http://"+addr+"/"),
		chromedp.WaitVisible(chromedp.ID("mirror-rivers")),
	), "loading the page without JavaScript")
	noJSText, err := chromedp.Run(step, chromedp.Text(chromedp.CSS("body")))
	must(err, "reading the text without JavaScript")
	if !strings.Contains(noJSText, "rivers") || !strings.Contains(noJSText, hostileRefName) {
		t.Errorf("without JavaScript the page lacks its mirrors:\n%s", noJSText)
	}
}

// /status.json holds, per mirror, what `status --json` prints for it: the
// same keys, and once the mirror is current the same values.
func TestStatusJSONMatchesTheStatusCommand(t *testing.T) {
	parent := t.TempDir()
	m := testMirror{"towns", filepath.Join(parent, "up"), filepath.Join(parent, "mirror")}
	gen(t, m.up, generate.Options{Versions: 2, Tags: true})
	addr := freeAddr(t)
	configPath := filepath.Join(parent, "fdl-mirror.yaml")
	writeDaemonConfig(t, configPath, addr, m)
	startDaemon(t, configPath, addr)
	waitUntil(t, "a clean run in /status.json", 60*time.Second, func() bool {
		st := statusOf(t, addr)
		return len(st.Mirrors) == 1 && st.Mirrors[0].LastSuccess != nil
	})
	_, page := httpGet("http://" + addr + "/status.json")
	var fromDaemon struct {
		Mirrors []map[string]json.RawMessage `json:"mirrors"`
	}
	if err := json.Unmarshal([]byte(page), &fromDaemon); err != nil || len(fromDaemon.Mirrors) != 1 {
		t.Fatalf("/status.json: %v\n%s", err, page)
	}
	res := run(t, "status", "--config", configPath, "--json")
	if res.code != 0 {
		t.Fatalf("status --json: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	var fromCommand map[string]json.RawMessage
	if err := json.Unmarshal([]byte(res.stdout), &fromCommand); err != nil {
		t.Fatalf("status --json: %v\n%s", err, res.stdout)
	}
	for key, want := range fromCommand {
		got, ok := fromDaemon.Mirrors[0][key]
		if !ok {
			t.Errorf("/status.json lacks %q, which status --json prints", key)
			continue
		}
		var g, w any
		json.Unmarshal(got, &g)
		json.Unmarshal(want, &w)
		if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("%s: /status.json has %s, status --json %s", key, got, want)
		}
	}
}
