// Tests that keep the documentation true to the program: every config key
// the parser accepts, every refusal reason the engine reports and every metric the daemon exports is
// documented, nothing documented is gone, and every
// relative link resolves. Each list is taken from the program itself
// (its syntax trees, its parser, its registry), never kept here by hand; a
// command's flags are checked the same way in cmd/fdl-mirror
// (TestUsageDocumentsEveryFlag), where the flag sets are.
package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"gopkg.in/yaml.v3"
)

// root is the repository, seen from this package's folder.
const root = ".."

const modulePath = "github.com/fdl-mirror/fdl-mirror/"

func readText(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// parseDir parses the Go files of a folder of the repository, tests left
// out.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}

// stringConsts returns a package's constants (package-level or declared in
// a function) whose values are string literals or constants of another
// package of this module, resolved.
func stringConsts(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range parseDir(t, dir) {
		imports := map[string]string{} // local name → folder
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			rel, ok := strings.CutPrefix(p, modulePath)
			if !ok {
				continue
			}
			name := filepath.Base(rel)
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = rel
		}
		ast.Inspect(f, func(n ast.Node) bool {
			gd, ok := n.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				return true
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					switch v := vs.Values[i].(type) {
					case *ast.BasicLit:
						if s, err := strconv.Unquote(v.Value); err == nil && v.Kind == token.STRING {
							out[id.Name] = s
						}
					case *ast.SelectorExpr:
						pkg, ok := v.X.(*ast.Ident)
						if !ok || imports[pkg.Name] == "" {
							continue
						}
						s, ok := stringConsts(t, imports[pkg.Name])[v.Sel.Name]
						if !ok {
							t.Fatalf("%s: %s = %s.%s: not a string constant there", dir, id.Name, pkg.Name, v.Sel.Name)
						}
						out[id.Name] = s
					}
				}
			}
			return true
		})
	}
	return out
}

// tableRows returns the first cell of every table row of a markdown text
// whose first cell is in backticks, without them ("| `x` | ..." gives x;
// "| `a{b}`, `c` |" gives a{b} and c).
func tableRows(doc string) []string {
	var out []string
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			out = append(out, m[1])
		}
	}
	return out
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// section returns the part of a markdown text under the heading that
// starts with prefix, up to the next heading of the same or a higher
// level; "" where there is none.
func section(doc, prefix string) string {
	level := strings.IndexFunc(prefix, func(r rune) bool { return r != '#' })
	lines := strings.Split(doc, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		var body []string
		for _, l := range lines[i+1:] {
			if h := strings.IndexFunc(l, func(r rune) bool { return r != '#' }); h > 0 && h <= level && strings.HasPrefix(l[h:], " ") {
				break
			}
			body = append(body, l)
		}
		return strings.Join(body, "\n")
	}
	return ""
}

// diff returns what want has and got lacks, sorted.
func diff(want, got []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// --- config keys ---

// configKeys returns every key the config parser knows: the string cases
// of each `switch key` in internal/config, by the function holding it
// (parse: the top level, mirror: an entry of mirrors:, notifyTargets: an
// entry of a notify: list).
func configKeys(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, f := range parseDir(t, "internal/config") {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sw, ok := n.(*ast.SwitchStmt)
				if !ok {
					return true
				}
				if tag, ok := sw.Tag.(*ast.Ident); !ok || tag.Name != "key" {
					return true
				}
				for _, stmt := range sw.Body.List {
					for _, e := range stmt.(*ast.CaseClause).List {
						if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, _ := strconv.Unquote(lit.Value)
							out[fn.Name.Name] = append(out[fn.Name.Name], s)
						}
					}
				}
				return true
			})
		}
	}
	return out
}

// acceptedSomewhere says whether the parser takes key at the top level, in
// a mirror or in a notify entry: whatever it says of the value, it does not
// call the key unknown.
func acceptedSomewhere(key string) bool {
	docs := []string{
		fmt.Sprintf("mirrors: [{name: a, source: /a, sink: /b}]\n%s: null\n", key),
		fmt.Sprintf("mirrors: [{name: a, source: /a, sink: /b, %s: null}]\n", key),
		fmt.Sprintf("mirrors: [{name: a, source: /a, sink: /b}]\nnotify: [{%s: null}]\n", key),
	}
	for _, doc := range docs {
		_, err := config.Parse([]byte(doc), "", func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), "unknown key "+strconv.Quote(key)) {
			return true
		}
	}
	return false
}

// keyLine is a key in config.example.yaml, set or commented out.
func keyInExample(example, key string) bool {
	return regexp.MustCompile(`(?m)^[ \t#-]*` + regexp.QuoteMeta(key) + `:`).MatchString(example)
}

// Every key the config parser accepts has a row in docs/config.md and
// appears in config.example.yaml (set, or commented out); every key
// docs/config.md lists is one the parser accepts.
func TestConfigDocsListEveryKey(t *testing.T) {
	byFunc := configKeys(t)
	var keys []string
	for _, ks := range byFunc {
		keys = append(keys, ks...)
	}
	sort.Strings(keys)
	keys = slices.Compact(keys)
	if len(keys) < 30 || !slices.Contains(keys, "catalog_timeout") || !slices.Contains(byFunc["parse"], "mirrors") {
		t.Fatalf("the config keys found look wrong: %v", byFunc)
	}
	// What the syntax trees say, the parser confirms; and it refuses a
	// key it does not know, so the confirmation can fail.
	for _, k := range keys {
		if !acceptedSomewhere(k) {
			t.Errorf("%q is a case of a key switch in internal/config, yet the parser calls it unknown everywhere", k)
		}
	}
	if acceptedSomewhere("catalog_timout") {
		t.Fatal("the parser accepts a misspelt key; the probe is broken")
	}

	doc := readText(t, "docs/config.md")
	rows := tableRows(doc)
	for _, k := range diff(keys, rows) {
		t.Errorf("docs/config.md: no row for the key %s (a row starts \"| `%s`\")", k, k)
	}
	for _, k := range diff(rows, keys) {
		t.Errorf("docs/config.md: a row for %q, which the parser does not accept", k)
	}
	example := readText(t, "config.example.yaml")
	for _, k := range keys {
		if !keyInExample(example, k) {
			t.Errorf("config.example.yaml: no %s: (set it, or show it commented out)", k)
		}
	}

	// The checks have teeth.
	if len(diff(keys, rows[1:])) == 0 && !slices.Contains(rows[1:], rows[0]) {
		t.Error("docs/config.md without its first row passes")
	}
	if keyInExample(strings.ReplaceAll(example, "catalog_timeout:", "catalog_tmeout:"), "catalog_timeout") {
		t.Error("an example without catalog_timeout passes")
	}
}

// --- refusal reasons ---

// refusalReasons returns the engine's refusal reasons: the values of the
// Reason* constants of internal/sync, which TestEveryRefusalReasonIsAsserted
// holds to be the whole list, by constant.
func refusalReasons(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, v := range stringConsts(t, "internal/sync") {
		if strings.HasPrefix(name, "Reason") && ast.IsExported(name) {
			out[name] = v
		}
	}
	if len(out) < 10 || out["ReasonSHA256"] != "sha256-mismatch" {
		t.Fatalf("the refusal reasons found look wrong: %v", out)
	}
	return out
}

// reasonHeading is a reason's section in docs/refusals.md; its anchor is
// the reason itself (#sha256-mismatch), which the alert rules link to.
var reasonHeading = regexp.MustCompile("(?m)^### `([a-z0-9-]+)`$")

// docs/refusals.md has a section for each refusal reason the engine
// reports, and none for a reason it does not.
func TestRefusalsDocCoversEveryReason(t *testing.T) {
	var reasons []string
	for _, v := range refusalReasons(t) {
		reasons = append(reasons, v)
	}
	doc := readText(t, "docs/refusals.md")
	var documented []string
	for _, m := range reasonHeading.FindAllStringSubmatch(doc, -1) {
		documented = append(documented, m[1])
	}
	for _, r := range diff(reasons, documented) {
		t.Errorf("docs/refusals.md: no section \"### `%s`\"", r)
	}
	for _, r := range diff(documented, reasons) {
		t.Errorf("docs/refusals.md: a section for %q, which is no refusal reason of the engine", r)
	}
	// Teeth: without its first section, the doc fails.
	if len(diff(reasons, documented[1:])) == 0 && !slices.Contains(documented[1:], documented[0]) {
		t.Error("docs/refusals.md without its first section passes")
	}
}

// --- metrics ---

// metricNames returns the name of every metric the program defines: each
// prometheus.*Opts literal in internal/ and cmd/, its Namespace, Subsystem
// and Name joined as the client library joins them.
func metricNames(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				if m, _ := filepath.Glob(filepath.Join(path, "*.go")); len(m) > 0 {
					rel, _ := filepath.Rel(root, path)
					dirs = append(dirs, rel)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for _, dir := range dirs {
		var consts map[string]string
		for _, f := range parseDir(t, dir) {
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				sel, ok := lit.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "prometheus" {
					return true
				}
				if consts == nil {
					consts = stringConsts(t, dir)
				}
				parts := map[string]string{}
				for _, e := range lit.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					key := kv.Key.(*ast.Ident).Name
					switch v := kv.Value.(type) {
					case *ast.BasicLit:
						parts[key], _ = strconv.Unquote(v.Value)
					case *ast.Ident:
						c, ok := consts[v.Name]
						if !ok && (key == "Namespace" || key == "Subsystem" || key == "Name") {
							t.Fatalf("%s: metric %s %s is not a string constant", dir, key, v.Name)
						}
						parts[key] = c
					}
				}
				var full []string
				for _, k := range []string{"Namespace", "Subsystem", "Name"} {
					if parts[k] != "" {
						full = append(full, parts[k])
					}
				}
				names = append(names, strings.Join(full, "_"))
				return true
			})
		}
	}
	sort.Strings(names)
	return names
}

// metricsTable is where the metrics are listed, for the operator who
// scrapes them.
const (
	metricsDoc     = "docs/deploy.md"
	metricsHeading = "### Metrics"
)

// documentedMetrics returns the metric names of the first cells of the
// metrics table, their labels left out.
func documentedMetrics(doc string) []string {
	var out []string
	for _, cell := range tableRows(section(doc, metricsHeading)) {
		name, _, _ := strings.Cut(cell, "{")
		out = append(out, name)
	}
	return out
}

// The metrics table of docs/deploy.md has a row for every metric the
// program defines, and none for a metric it does not.
func TestMetricsTableListsEveryMetric(t *testing.T) {
	names := metricNames(t)
	if len(names) < 20 || !slices.Contains(names, "fdl_mirror_runs_total") || !slices.Contains(names, "fdl_mirror_triggers_total") {
		t.Fatalf("the metrics found look wrong: %v", names)
	}
	documented := documentedMetrics(readText(t, metricsDoc))
	for _, m := range diff(names, documented) {
		t.Errorf("%s, %q: no row for %s", metricsDoc, metricsHeading, m)
	}
	for _, m := range diff(documented, names) {
		t.Errorf("%s, %q: a row for %s, which the program does not define", metricsDoc, metricsHeading, m)
	}
	if len(diff(names, documented[1:])) == 0 && !slices.Contains(documented[1:], documented[0]) {
		t.Error("the metrics table without its first name passes")
	}
}

// --- links ---

// markdownFiles are the documents whose links are checked: every .md file
// of the repository outside hidden folders and testdata.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	// link is an inline link or image: [text](target) or ![alt](target),
	// the target up to a space (a title) or the closing parenthesis.
	link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)[^)]*\)`)
	// fence is a line opening or closing a code block.
	fence = regexp.MustCompile("^\\s*```")
)

// anchors returns the anchors GitHub gives a markdown file's headings:
// lower case, punctuation but - and _ dropped, spaces as -, and -1, -2...
// after a repeat.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(doc, "\n") {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// brokenLinks returns the relative links of file (a path from the
// repository's root) that name no file, or no heading of the file they
// name. Links out of the repository (the spec beside it) are not checked:
// a clone has nothing there to check them against.
func brokenLinks(t *testing.T, file, doc string) []string {
	t.Helper()
	var out []string
	inCode := false
	for n, line := range strings.Split(doc, "\n") {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			where := file
			if path != "" {
				where = filepath.Join(filepath.Dir(file), path)
				if strings.HasPrefix(where, "..") {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, where)); err != nil {
					out = append(out, fmt.Sprintf("%s:%d: %s: no such file", file, n+1, target))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(where, ".md") {
				continue
			}
			text, err := os.ReadFile(filepath.Join(root, where))
			if err != nil {
				out = append(out, fmt.Sprintf("%s:%d: %s: %v", file, n+1, target, err))
				continue
			}
			if !anchors(string(text))[anchor] {
				out = append(out, fmt.Sprintf("%s:%d: %s: no heading with that anchor in %s", file, n+1, target, where))
			}
		}
	}
	return out
}

// Every relative link of the repository's markdown names a file that is
// there, and a heading of it where the link has an anchor.
func TestRelativeLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	for _, want := range []string{"README.md", "BENCHMARKS.md", filepath.Join("docs", "deploy.md")} {
		if !slices.Contains(files, want) {
			t.Fatalf("%s not among the documents checked: %v", want, files)
		}
	}
	for _, f := range files {
		for _, b := range brokenLinks(t, f, readText(t, f)) {
			t.Error(b)
		}
	}
	// Teeth: a link to a missing file, and to a missing heading, fail.
	if b := brokenLinks(t, "README.md", "[a](docs/nothing.md) [b](docs/deploy.md#nothing-here) [c](docs/deploy.md#secrets)"); len(b) != 2 {
		t.Errorf("broken links found in a made-up text: %v, want 2", b)
	}
}

// --- alert rules ---

// runbookBase is where the rules' runbook_url annotations point: the
// repository's docs as GitHub shows them.
const runbookBase = "https://github.com/fdl-mirror/fdl-mirror/blob/main/"

// Every alert rule has a runbook_url into docs/refusals.md or
// docs/deploy.md, at a heading that is there; the refusal alert's URL
// names the reason's own section, for every reason.
func TestAlertsLinkToTheirRunbooks(t *testing.T) {
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(readText(t, "deploy/prometheus/alerts.yaml")), &file); err != nil {
		t.Fatal(err)
	}
	reasons := refusalReasons(t)
	alerts := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			url := r.Annotations["runbook_url"]
			rel, ok := strings.CutPrefix(url, runbookBase)
			if !ok {
				t.Errorf("alert %s: runbook_url %q does not start with %s", r.Alert, url, runbookBase)
				continue
			}
			path, anchor, _ := strings.Cut(rel, "#")
			if path != "docs/refusals.md" && path != "docs/deploy.md" {
				t.Errorf("alert %s: runbook_url %q points outside docs/refusals.md and docs/deploy.md", r.Alert, url)
				continue
			}
			have := anchors(readText(t, path))
			targets := []string{anchor}
			if strings.Contains(anchor, "{{ $labels.reason }}") {
				targets = nil
				for _, v := range reasons {
					targets = append(targets, strings.ReplaceAll(anchor, "{{ $labels.reason }}", v))
				}
			}
			for _, a := range targets {
				if a == "" || !have[a] {
					t.Errorf("alert %s: runbook_url %q: no heading #%s in %s", r.Alert, url, a, path)
				}
			}
		}
	}
	if alerts < 5 {
		t.Fatalf("found %d alerts; the parse is wrong", alerts)
	}
}

// --- the benchmarks' current table ---

// scripts/bench-doc, which a full `make bench` runs, makes the current
// table of BENCHMARKS.md from fdl-bench's report: given the report its
// table was made from (the heading a level up, no command line, and
// requests by kind, which it leaves out), it writes that section back as
// it is, over a stale one, and leaves the rest of the file alone.
func TestBenchDocRewritesTheCurrentTable(t *testing.T) {
	const begin, end = "<!-- make bench: begin", "<!-- make bench: end -->"
	doc := readText(t, "BENCHMARKS.md")
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("BENCHMARKS.md: no %q ... %q section", begin, end)
	}
	i += strings.IndexByte(doc[i:], '\n') + 1
	section := doc[i:j]
	var report strings.Builder
	command := ""
	for _, line := range strings.SplitAfter(section, "\n") {
		if c, ok := strings.CutPrefix(line, "- command: `"); ok {
			command = strings.TrimSuffix(strings.TrimSpace(c), "`")
			continue
		}
		if strings.HasPrefix(line, "Targets") {
			report.WriteString("Requests by kind:\n\n- small, no-op, local→local, fdl-mirror: source open 3\n- medium, no-op, s3→s3, rclone copy: source ListObjects 77\n\n")
		}
		if h, ok := strings.CutPrefix(line, "### Results"); ok {
			line = "## Results" + h
		}
		report.WriteString(line)
	}
	if command == "" || !strings.Contains(report.String(), "Requests by kind") {
		t.Fatalf("the current table has no command line or no targets:\n%s", section)
	}
	dir := t.TempDir()
	reportPath, docPath := filepath.Join(dir, "bench.md"), filepath.Join(dir, "BENCHMARKS.md")
	stale := doc[:i] + "| stale | table |\n" + doc[j:]
	if err := os.WriteFile(reportPath, []byte(report.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(docPath, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", filepath.Join(root, "scripts", "bench-doc"), reportPath, docPath, command)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/bench-doc: %v\n%s", err, out)
	}
	got, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != doc {
		t.Errorf("scripts/bench-doc did not give back BENCHMARKS.md from the report of its own table; got:\n%s", got)
	}

	// A document without the marks is refused, not rewritten.
	if err := os.WriteFile(docPath, []byte("# no marks\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("sh", filepath.Join(root, "scripts", "bench-doc"), reportPath, docPath).Run(); err == nil {
		t.Error("scripts/bench-doc rewrote a document without its marks")
	}
}
