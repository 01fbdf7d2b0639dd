package daemon

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"go.uber.org/zap"
)

// PageRefreshSeconds is how often the status page reloads itself.
const PageRefreshSeconds = 15

// pageStyle is the page's only style sheet. The Content-Security-Policy
// allows exactly this text (by its hash) and nothing else: no script, no
// image, no other style, even if some markup ever got through.
const pageStyle = `
:root { --ok: #1a7f37; --running: #0969da; --behind: #9a6700; --failing: #cf222e; --stale: #8250df; --pending: #6e7781; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; background: #f6f8fa; }
header { padding: 16px 24px; background: #24292f; color: #fff; }
header h1 { margin: 0; font-size: 20px; }
header p { margin: 4px 0 0; color: #d0d7de; }
header a { color: #fff; }
main { padding: 16px 24px; display: grid; gap: 16px; }
section { background: #fff; border: 1px solid #d0d7de; border-left: 6px solid var(--pending); border-radius: 6px; padding: 12px 16px; }
section.ok { border-left-color: var(--ok); }
section.running { border-left-color: var(--running); }
section.behind { border-left-color: var(--behind); }
section.failing { border-left-color: var(--failing); }
section.stale { border-left-color: var(--stale); }
h2 { margin: 0 0 4px; font-size: 18px; display: flex; align-items: center; gap: 10px; overflow-wrap: anywhere; }
h3 { margin: 14px 0 6px; font-size: 15px; }
.badge { display: inline-block; padding: 1px 10px; border-radius: 12px; color: #fff; font-size: 13px; font-weight: 600; text-transform: uppercase; letter-spacing: .03em; background: var(--pending); }
.badge.ok { background: var(--ok); } .badge.running { background: var(--running); } .badge.behind { background: var(--behind); }
.badge.failing { background: var(--failing); } .badge.stale { background: var(--stale); }
.why { margin: 0 0 8px; color: #57606a; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
dt { color: #57606a; } dd { margin: 0; overflow-wrap: anywhere; }
code { font: 13px ui-monospace, SFMono-Regular, Menlo, monospace; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid #eaeef2; vertical-align: top; overflow-wrap: anywhere; }
th { color: #57606a; font-weight: 600; }
td.behind { color: var(--failing); font-weight: 600; } td.current { color: var(--ok); }
.error { margin: 8px 0 0; padding: 6px 10px; background: #ffebe9; border-radius: 4px; overflow-wrap: anywhere; }
ul.refusals { margin: 0; padding-left: 18px; }
ul.refusals li { margin: 2px 0; overflow-wrap: anywhere; }
.reason { font: 600 12px ui-monospace, monospace; color: var(--failing); }
.none { color: #57606a; margin: 0; }
`

var pageCSP = func() string {
	sum := sha256.Sum256([]byte(pageStyle))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
}()

// stateText explains each state in a sentence on the page.
var stateText = map[string]string{
	StatePending: "No run has ended yet.",
	StateRunning: "A run is going.",
	StateOK:      "The last run ended clean: every upstream ref is mirrored.",
	StateBehind:  "Upstream has what the mirror lacks, and no run here has completed it yet (another writer may hold the lock).",
	StateFailing: "The last run failed or refused something: see below.",
	StateStale:   fmt.Sprintf("No clean run for %d schedule periods, and no failed one to say why: another writer may hold the lock, or no run ever ends.", StalePeriods),
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"when":      when,
	"ago":       ago,
	"bytes":     mirror.HumanBytes,
	"seconds":   humanSeconds,
	"stateText": func(s string) string { return stateText[s] },
	"subject":   refusalSubject,
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fdl-mirror: {{.Summary}}</title>
<style>{{.Style}}</style>
</head>
<body>
<header>
<h1>fdl-mirror</h1>
<p>{{.Summary}} · as of {{when .Status.Generated}} · refreshes every {{.Refresh}} s · <a href="status.json">status.json</a> · <a href="metrics">metrics</a></p>
<p{{if .SandboxMissing}} class="error"{{end}}>Catalog readers {{.Sandbox}}.</p>
</header>
<main>
{{- range .Status.Mirrors}}
<section class="{{.State}}" id="mirror-{{.Mirror}}{{with .SinkIndex}}-sink-{{.}}{{end}}">
<h2><span class="badge {{.State}}">{{.State}}</span> {{.Mirror}}{{with .SinkIndex}} <span class="none">sink {{.}}</span>{{end}}</h2>
<p class="why">{{stateText .State}}{{with .RunningSince}} Running since {{when .}} ({{ago .}}).{{end}}</p>
<dl>
<dt>Source</dt><dd><code>{{.Source}}</code></dd>
<dt>Sink</dt><dd><code>{{.Sink}}</code></dd>
<dt>Schedule</dt><dd><code>{{.Schedule}}</code></dd>
{{- with .LastRun}}
<dt>Last run</dt><dd>{{when .Ended}} ({{ago .Ended}}): {{.Result}}, took {{seconds .DurationSeconds}}</dd>
<dt>Last run copied</dt><dd>{{.FilesCopied}} files, {{bytes .BytesCopied}}; {{.VersionsPublished}} versions published, {{.RefsMoved}} refs moved</dd>
{{- else}}
<dt>Last run</dt><dd>none yet</dd>
{{- end}}
<dt>Last success</dt><dd>{{with .LastSuccess}}{{when .}} ({{ago .}}){{else}}none yet{{end}}</dd>
{{- with .LastTrigger}}
<dt>Last trigger</dt><dd>{{when .At}} ({{ago .At}}): {{.Result}}</dd>
{{- end}}
{{- if .Scrub}}
<dt>Scrub</dt><dd><code>{{.Scrub}}</code></dd>
{{- end}}
{{- with .LastScrub}}
<dt>Last scrub</dt><dd>{{when .Ended}} ({{ago .Ended}}): {{.Result}}; {{.FilesMissing}} data files found missing, {{.FilesRestored}} restored</dd>
{{- else}}{{if .Scrub}}
<dt>Last scrub</dt><dd>none yet</dd>
{{- end}}{{end}}
</dl>
{{- with .Error}}
<p class="error">Error: {{.}}</p>
{{- end}}
<h3>Refs: {{.Lag}} of {{len .Refs}} behind{{with .RefsCompared}} <span class="none">(compared {{ago .}})</span>{{end}}</h3>
{{- if .Refs}}
<table>
<thead><tr><th>Ref</th><th>Upstream version</th><th>Mirror version</th><th></th></tr></thead>
<tbody>
{{- range .Refs}}
<tr><td><code>{{.Ref}}</code></td><td><code>{{.Upstream}}</code></td><td><code>{{if .Mirror}}{{.Mirror}}{{else}}-{{end}}</code></td>{{if .Behind}}<td class="behind">behind</td>{{else}}<td class="current">current</td>{{end}}</tr>
{{- end}}
</tbody>
</table>
{{- else}}
<p class="none">No refs compared yet.</p>
{{- end}}
{{- with .LastRun}}{{if .Refused}}
<h3>Refused in the last run: {{.RefusedCount}}</h3>
<ul class="refusals">
{{- range .Refused}}
<li><span class="reason">[{{.Reason}}]</span> {{with subject .}}<code>{{.}}</code>: {{end}}{{.Message}}</li>
{{- end}}
</ul>
{{- if .RefusedMore}}
<p class="none">and {{.RefusedMore}} more, not listed</p>
{{- end}}
{{- end}}{{end}}
</section>
{{- else}}
<p>No mirrors configured.</p>
{{- end}}
</main>
</body>
</html>
`))

type pageData struct {
	Status         Status
	Summary        string
	Sandbox        string // catalog.Layers.String of the readers
	SandboxMissing bool   // a layer is missing
	Refresh        int
	Style          template.CSS
}

// summary counts the mirrors by state, worst first: "2 mirrors: 1 failing,
// 1 ok". Where a mirror has several sinks, each has a state of its own, and
// the states are counted by sink: "2 mirrors, 3 sinks: 1 behind, 2 ok".
func summary(st Status) string {
	counts := map[string]int{}
	mirrors := 0
	for _, m := range st.Mirrors {
		counts[m.State]++
		if m.SinkIndex <= 1 {
			mirrors++
		}
	}
	var parts []string
	for _, s := range []string{StateFailing, StateStale, StateBehind, StateRunning, StatePending, StateOK} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	noun := "mirrors"
	if mirrors == 1 {
		noun = "mirror"
	}
	head := fmt.Sprintf("%d %s", mirrors, noun)
	if mirrors != len(st.Mirrors) {
		head += fmt.Sprintf(", %d sinks", len(st.Mirrors))
	}
	if len(parts) == 0 {
		return head
	}
	return head + ": " + strings.Join(parts, ", ")
}

// Status returns what the status page shows.
func (d *Daemon) Status() Status {
	st := d.board.snapshot(d.Config(), time.Now())
	d.trig.addToStatus(&st)
	return st
}

// servePage serves the status page: HTML made on the server, no script.
// html/template escapes every value by context, and everything from an
// upstream (ref names, version IDs, messages) is only ever a value.
func (d *Daemon) servePage(w http.ResponseWriter, r *http.Request) {
	st := d.Status()
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, pageData{Status: st, Summary: summary(st), Sandbox: catalog.SandboxNow().String(), SandboxMissing: len(catalog.SandboxNow().Missing()) > 0, Refresh: PageRefreshSeconds, Style: template.CSS(pageStyle)}); err != nil {
		d.log.Error("rendering the status page", zap.Error(err))
		http.Error(w, "cannot render the status page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}

// serveStatusJSON serves the page's content as JSON.
func (d *Daemon) serveStatusJSON(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(d.Status())
}

func when(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

func ago(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%.1f h ago", d.Hours())
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

func humanSeconds(s float64) string {
	if s < 10 {
		return fmt.Sprintf("%.2f s", s)
	}
	return (time.Duration(s) * time.Second).Round(time.Second).String()
}

// refusalSubject names what a refusal is about: its ref, else its version,
// else its file.
func refusalSubject(r fdlsync.Refusal) string {
	switch {
	case r.Ref != "":
		return r.Ref
	case r.Version != "":
		return r.Version
	}
	return r.File
}
