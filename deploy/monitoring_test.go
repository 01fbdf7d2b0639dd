package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/daemon"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"gopkg.in/yaml.v3"
)

const (
	dashboardPath = "grafana/fdl-mirror.json"
	alertsPath    = "prometheus/alerts.yaml"
)

// plannedMetrics are metrics the rules and dashboard already use that the
// daemon does not export yet (none now: the freeze detection of issue 12
// exports fdl_mirror_upstream_stale).
// Once the daemon exports one, it is checked like the others.
var plannedMetrics = []string{}

// promtool finds Debian's promtool (package prometheus); `make test`
// installs it where it can.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus; `make test` installs it with apt where it can): rules not checked")
	}
	return p
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The alert rules parse, and alerts_test.yaml's series make exactly the
// expected alerts fire (and not fire) at the expected times.
func TestAlertRulesPassPromtool(t *testing.T) {
	runPromtool(t, ".", "check", "rules", alertsPath)
	runPromtool(t, "prometheus", "test", "rules", "alerts_test.yaml")
}

// The check has teeth: a rule with a broken expression is rejected.
func TestPromtoolRejectsABrokenRule(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: max by (mirror (fdl_mirror_lag_refs)\n"), 0o644)
	out, err := exec.Command(promtool(t), "check", "rules", bad).CombinedOutput()
	if err == nil {
		t.Fatalf("promtool accepted a broken expression:\n%s", out)
	}
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// dashboardExprs returns every query of the dashboard, with Grafana's
// variables replaced by what Prometheus would receive.
func dashboardExprs(t *testing.T, d dashboard) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$mirror", ".*")
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q target %s has no query", p.Title, tg.RefID)
				continue
			}
			exprs[fmt.Sprintf("panel %d %q %s", p.ID, p.Title, tg.RefID)] = vars.Replace(tg.Expr)
		}
	}
	return exprs
}

// Every panel queries the data source chosen in the dashboard's variable
// (so an import asks for none), and every query is valid PromQL: promtool
// checks them as recording rules.
func TestDashboardQueriesAreValidPromQL(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard without uid, title or panels: %+v", d)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if p.Datasource.UID != "${datasource}" || p.Datasource.Type != "prometheus" {
			t.Errorf("panel %q: data source %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
	}
	exprs := dashboardExprs(t, d)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		q, _ := json.Marshal(exprs[k]) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      # %s\n      - record: dashboard:query_%d\n        expr: %s\n", k, i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, ".", "check", "rules", path)
}

// exportedMetrics returns the names of the metrics a daemon exports once
// its mirrors have run: every series is made by recording a clean run and
// a run with a refusal.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	m := daemon.NewMetrics()
	m.AddMirror("towns")
	m.SchedulePeriod("towns", 10*time.Minute)
	now := time.Now()
	m.Observe("towns", now, time.Second, daemon.ResultSuccess, &fdlsync.Report{FilesCopied: 1, BytesCopied: 10, Refs: []fdlsync.RefStatus{}})
	m.Observe("towns", now, time.Second, daemon.ResultRefused, &fdlsync.Report{
		Refused: []fdlsync.Refusal{{Version: "v", Reason: fdlsync.ReasonSHA256, Message: "m"}}, Lag: 1})
	m.Running("towns", true)
	m.Skipped("towns")
	m.ObserveUpstream("towns", now.Add(-time.Hour), time.Minute, now)
	m.ScrubPeriod("towns", 7*24*time.Hour)
	m.ObserveScrub("towns", daemon.ScrubStatus{Started: now, Ended: now, Result: daemon.ResultSuccess, FilesMissing: 1, FilesRestored: 1})
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	return names
}

var metricName = regexp.MustCompile(`\bfdl_mirror_[a-z0-9_]+\b`)

// The dashboard and the rules use only metrics the daemon exports (or the
// planned staleness metric), and cover what operators asked for.
func TestMonitoringUsesOnlyExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	if len(exported) < 10 || !exported["fdl_mirror_runs_total"] {
		t.Fatalf("exported metrics look wrong: %v", exported)
	}
	allowed := func(name string) bool { return exported[name] || slices.Contains(plannedMetrics, name) }

	used := map[string][]string{} // metric → where
	for where, q := range dashboardExprs(t, readDashboard(t)) {
		for _, name := range metricName.FindAllString(q, -1) {
			used[name] = append(used[name], "dashboard "+where)
		}
	}
	d := readDashboard(t)
	for _, v := range d.Templating.List {
		q, _ := json.Marshal(v.Query)
		for _, name := range metricName.FindAllString(string(q), -1) {
			used[name] = append(used[name], "dashboard variable "+v.Name)
		}
	}
	alerts := readAlerts(t)
	for alert, expr := range alerts {
		for _, name := range metricName.FindAllString(expr, -1) {
			used[name] = append(used[name], "alert "+alert)
		}
	}
	for name, where := range used {
		if !allowed(name) {
			t.Errorf("%s is not a metric the daemon exports; used by %v", name, where)
		}
	}
	// What the dashboard must show, and what the rules must alert on.
	for _, name := range []string{
		"fdl_mirror_last_success_timestamp_seconds", "fdl_mirror_lag_refs", "fdl_mirror_bytes_copied_total",
		"fdl_mirror_refused_total", "fdl_mirror_last_run_duration_seconds", "fdl_mirror_schedule_period_seconds",
	} {
		if !slices.ContainsFunc(used[name], func(w string) bool { return strings.HasPrefix(w, "dashboard") }) {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
	for _, alert := range []string{"FdlMirrorNotSucceeding", "FdlMirrorNeverSucceeded", "FdlMirrorRefusing", "FdlMirrorLagging", "FdlMirrorUpstreamStale", "FdlMirrorScrubOverdue"} {
		if _, ok := alerts[alert]; !ok {
			t.Errorf("no alert %s in %s", alert, alertsPath)
		}
	}
	// The rule counts schedule periods as the status page does.
	if !strings.Contains(alerts["FdlMirrorNotSucceeding"], fmt.Sprintf("%d * max by (mirror) (fdl_mirror_schedule_period_seconds)", daemon.StalePeriods)) {
		t.Errorf("FdlMirrorNotSucceeding does not alert at %d schedule periods:\n%s", daemon.StalePeriods, alerts["FdlMirrorNotSucceeding"])
	}

	// The check has teeth: a misspelt metric is caught.
	if allowed("fdl_mirror_lag_ref") {
		t.Error("a misspelt metric name passes")
	}
}

// readAlerts returns every alert's expression by name.
func readAlerts(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	out := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	return out
}
