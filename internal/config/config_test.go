package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// problems parses text and returns its problems, failing if it parsed.
func problems(t *testing.T, text string, vars map[string]string) Problems {
	t.Helper()
	_, err := Parse([]byte(text), "test.yaml", env(vars))
	if err == nil {
		t.Fatalf("parsed without error:\n%s", text)
	}
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error is %T, not Problems: %v", err, err)
	}
	return ps
}

// wantProblem asserts that one problem sits on line and mentions every part.
func wantProblem(t *testing.T, ps Problems, line int, parts ...string) {
	t.Helper()
	for _, p := range ps {
		if p.Line != line {
			continue
		}
		s := p.String()
		all := true
		for _, part := range parts {
			if !strings.Contains(s, part) {
				all = false
			}
		}
		if all {
			if !strings.HasPrefix(s, "test.yaml:") {
				t.Errorf("problem %q does not start with the file name and line", s)
			}
			return
		}
	}
	t.Errorf("no problem on line %d mentioning %q; got:\n%v", line, parts, ps)
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExampleConfigParsesAndSetsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The example names a system path for the trusted keys; point it at a
	// real file so the readability check passes here.
	const examplePath = "/etc/fdl-mirror/towns.allowed_signers"
	if n := strings.Count(string(data), examplePath); n != 1 {
		t.Fatalf("example names %s %d times, want 1", examplePath, n)
	}
	signers := writeFile(t, t.TempDir(), "towns.allowed_signers", "")
	data = []byte(strings.Replace(string(data), examplePath, signers, 1))
	// So are its header file and CA bundle.
	headerFile := writeSecret(t, t.TempDir(), "towns.headers", "# from a Secret\nX-Api-Key: k3y-from-file\n\n")
	data = []byte(strings.Replace(string(data), "/etc/fdl-mirror/towns.headers", headerFile, 1))
	caFile := testserver.NewCA(t).WriteFile(t)
	data = []byte(strings.Replace(string(data), "/etc/fdl-mirror/ca.pem", caFile, 1))
	// And its secret files at files of the same names, readable by their
	// owner only.
	secrets := map[string]string{}
	for _, name := range []string{"trigger.token", "hooks.secret", "towns-ci.secret"} {
		path := writeSecret(t, t.TempDir(), name, name+"-0123456789abcdef")
		if n := strings.Count(string(data), "/etc/fdl-mirror/"+name); n != 1 {
			t.Fatalf("example names /etc/fdl-mirror/%s %d times, want 1", name, n)
		}
		data = []byte(strings.Replace(string(data), "/etc/fdl-mirror/"+name, path, 1))
		secrets[name] = path
	}

	cfg, err := Parse(data, "config.example.yaml", env(map[string]string{"TOWNS_TOKEN": "s3cret"}))
	if err != nil {
		t.Fatalf("example does not parse:\n%v", err)
	}
	if cfg.Listen != "127.0.0.1:9464" {
		t.Errorf("listen = %q", cfg.Listen)
	}
	if cfg.TriggerTokenFile != secrets["trigger.token"] || cfg.TriggerToken.Reveal() != "trigger.token-0123456789abcdef" {
		t.Errorf("trigger token from %q", cfg.TriggerTokenFile)
	}
	hooks := NotifyTarget{URL: "https://hooks.example.org/fdl", SecretFile: secrets["hooks.secret"], Secret: "hooks.secret-0123456789abcdef", Line: notifyLine(t, data, "https://hooks.example.org/fdl")}
	if !reflect.DeepEqual(cfg.Notify, []NotifyTarget{hooks}) {
		t.Errorf("notify = %+v", cfg.Notify)
	}
	if got := cfg.Names(); !reflect.DeepEqual(got, []string{"towns", "rivers"}) {
		t.Fatalf("mirrors = %v", got)
	}
	towns := cfg.Mirrors[0]
	want := Mirror{
		Name:               "towns",
		Source:             "https://data.example.org/towns/",
		Sink:               "s3://mirror-bucket/towns/",
		Schedule:           "@every 10m",
		Scrub:              "@weekly",
		TrustedSigners:     signers,
		RequireSignatures:  true,
		SignatureNamespace: "fdl",
		Concurrency:        8,
		HTTPHeaders:        []string{"Authorization: Bearer s3cret", "X-Api-Key: k3y-from-file"},
		CAFile:             caFile,
		LockWait:           30 * time.Second,
		LockTTL:            2 * time.Minute,
		Retries:            5,
		Prune:              true,
		PruneMaxDelete:     5000,
		PruneGrace:         48 * time.Hour,
		HTTPAllowRedirects: []string{"cdn.example.org"},
		BWLimit:            10 << 20,
		CatalogMaxFiles:    20_000_000,
		CatalogTimeout:     2 * time.Minute,
		CatalogMemoryLimit: 256 << 20,
		CatalogMaxSize:     8 << 30,
		RequireSandbox:     true,
		Refs:               []string{"refs/heads/**", "refs/tags/**"},
		ExcludeRefs:        []string{"refs/heads/wip/**"},
		AllowRewind:        []string{"refs/heads/scratch"},
		MaxUpstreamAge:     72 * time.Hour,
		Notify: []NotifyTarget{hooks, {URL: "https://ci.example.org/hooks/towns", SecretFile: secrets["towns-ci.secret"],
			Secret: "towns-ci.secret-0123456789abcdef", Line: notifyLine(t, data, "https://ci.example.org/hooks/towns")}},
		Line: towns.Line,
	}
	if !reflect.DeepEqual(towns, want) {
		t.Errorf("towns =\n%+v\nwant\n%+v", towns, want)
	}
	// The first mirror documents every key: a field added to Mirror without
	// an example fails here. force is documented at its default (false):
	// an example should not show a sink taking any source. So is repair:
	// the example scrubs weekly instead of at every run.
	if !strings.Contains(string(data), "    # sinks: ") {
		t.Error("the example does not document sinks")
	}
	if !strings.Contains(string(data), "    force: false\n") {
		t.Error("the example does not document force: false")
	}
	if !strings.Contains(string(data), "    repair: false\n") {
		t.Error("the example does not document repair: false")
	}
	if !strings.Contains(string(data), "    http_allow_insecure_auth: false\n") {
		t.Error("the example does not document http_allow_insecure_auth: false")
	}
	v := reflect.ValueOf(towns)
	for i := 0; i < v.NumField(); i++ {
		// Sinks is in a comment: the first mirror shows one sink, as the
		// daemon runs only those (TestSinksListsSeveralSinks).
		if name := v.Type().Field(i).Name; name == "Force" || name == "HTTPAllowInsecureAuth" || name == "Repair" || name == "Sinks" {
			continue
		}
		if v.Field(i).IsZero() {
			t.Errorf("the example's first mirror leaves %s unset", v.Type().Field(i).Name)
		}
	}
	rivers := cfg.Mirrors[1]
	if rivers.Source != "/srv/fdl/rivers" || rivers.Sink != "gs://mirror-bucket/rivers/" ||
		rivers.Schedule != "0 * * * *" || rivers.Concurrency != 0 || rivers.TrustedSigners != "" ||
		!reflect.DeepEqual(rivers.Notify, []NotifyTarget{hooks}) {
		t.Errorf("rivers = %+v", rivers)
	}
}

func TestMinimalConfig(t *testing.T) {
	cfg, err := Parse([]byte("mirrors:\n  - name: a\n    source: /up\n    sink: /down\n"), "test.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "" || len(cfg.Mirrors) != 1 {
		t.Fatalf("cfg = %+v", cfg)
	}
	m, ok := cfg.Mirror("a")
	if !ok || m.Source != "/up" || m.Sink != "/down" || m.Schedule != "" || m.Line != 2 {
		t.Errorf("mirror a = %+v", m)
	}
	if _, ok := cfg.Mirror("b"); ok {
		t.Error("found a mirror that is not there")
	}
}

func TestEnvironmentExpansion(t *testing.T) {
	text := `listen: "${HOST}:${PORT}"
mirrors:
  - name: ${NAME}-mirror
    source: s3://${BUCKET}/up/
    sink: /srv/$${literal}/${EMPTY}x
    concurrency: ${CONC}
    require_signatures: ${REQ}
    trusted_signers: ${KEYS}
`
	keys := writeFile(t, t.TempDir(), "keys", "")
	cfg, err := Parse([]byte(text), "test.yaml", env(map[string]string{
		"HOST": "127.0.0.1", "PORT": "9100", "NAME": "towns", "BUCKET": "b",
		"EMPTY": "", "CONC": "3", "REQ": "true", "KEYS": keys,
	}))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Mirrors[0]
	if cfg.Listen != "127.0.0.1:9100" || m.Name != "towns-mirror" || m.Source != "s3://b/up/" ||
		m.Sink != "/srv/${literal}/x" || m.Concurrency != 3 || !m.RequireSignatures || m.TrustedSigners != keys {
		t.Errorf("expanded to listen %q, %+v", cfg.Listen, m)
	}
}

func TestUnsetVariableIsAnErrorOnItsLine(t *testing.T) {
	ps := problems(t, "mirrors:\n  - name: a\n    source: s3://${BUCKET}/x/\n    sink: /d\n    http_headers:\n      - \"Authorization: ${TOKEN}\"\n", nil)
	wantProblem(t, ps, 3, "BUCKET", "not set")
	wantProblem(t, ps, 6, "TOKEN", "not set")
	if len(ps) != 2 {
		t.Errorf("want 2 problems, got:\n%v", ps)
	}
	ps = problems(t, "mirrors:\n  - name: a\n    source: ${1X}\n    sink: /d\n", nil)
	wantProblem(t, ps, 3, "${1X}", "not a variable reference")
}

func TestUnknownKeysAreErrorsWithTheirLine(t *testing.T) {
	ps := problems(t, `listen: 127.0.0.1:1
lisen: 127.0.0.1:2
mirrors:
  - name: a
    source: /u
    sink: /d
    shedule: "@hourly"
`, nil)
	wantProblem(t, ps, 2, `unknown key "lisen"`)
	wantProblem(t, ps, 7, `unknown key "shedule"`)
	if len(ps) != 2 {
		t.Errorf("want 2 problems, got:\n%v", ps)
	}
}

func TestPruneKeysAreCheckedWithTheirLines(t *testing.T) {
	ps := problems(t, `mirrors:
  - name: a
    source: /u
    sink: /d
    prune: sometimes
    prune_max_delete: 0
`, nil)
	wantProblem(t, ps, 5, "prune", `"sometimes"`)
	wantProblem(t, ps, 6, "prune_max_delete", "at least 1")
	cfg, err := Parse([]byte("mirrors:\n  - {name: a, source: /u, sink: /d, prune: true}\n"), "test.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Mirrors[0]; !m.Prune || m.PruneMaxDelete != 0 {
		t.Errorf("prune: true parsed as %+v", m)
	}
}

// scrub takes what schedule takes, is refused with its line like a bad
// schedule, and is off when absent.
func TestScrubIsAScheduleAndOffWhenAbsent(t *testing.T) {
	text := "mirrors:\n  - {name: a, source: /u, sink: /d, schedule: \"@every 10m\", scrub: \"@weekly\"}\n" +
		"  - {name: b, source: /u, sink: /e, schedule: \"@every 10m\", scrub: \"30 3 * * 0\"}\n" +
		"  - {name: c, source: /u, sink: /f, schedule: \"@every 10m\"}\n"
	cfg, err := Parse([]byte(text), "test.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"@weekly", "30 3 * * 0", ""} {
		if got := cfg.Mirrors[i].Scrub; got != want {
			t.Errorf("mirror %s: scrub = %q, want %q", cfg.Mirrors[i].Name, got, want)
		}
	}
	_, err = Parse([]byte("mirrors:\n  - name: a\n    source: /u\n    sink: /d\n    scrub: weekly\n    schedule: \"@every 10m\"\n"), "test.yaml", env(nil))
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("scrub: weekly: err = %v, want Problems", err)
	}
	wantProblem(t, ps, 5, "mirrors[0].scrub", `"weekly"`)
	if len(ps) != 1 {
		t.Errorf("problems = %v, want only the scrub's", ps)
	}
}

// prune_grace: a duration, at least an hour, and at least ten lock_ttl
// (the default's too when lock_ttl is unset); a good one is kept.
func TestPruneGraceIsBoundedBelow(t *testing.T) {
	ps := problems(t, `mirrors:
  - name: a
    source: /u
    sink: /d
    prune_grace: 59m
  - name: b
    source: /u
    sink: /e
    prune_grace: 2h
    lock_ttl: 15m
  - name: c
    source: /u
    sink: /f
    prune_grace: a while
`, nil)
	wantProblem(t, ps, 5, "prune_grace", "59m", "at least 1h0m0s")
	wantProblem(t, ps, 9, "prune_grace", "10 times lock_ttl (15m0s)")
	wantProblem(t, ps, 14, "prune_grace", `"a while"`)
	cfg, err := Parse([]byte("mirrors:\n  - {name: a, source: /u, sink: /d, prune_grace: 36h, lock_ttl: 3h}\n"), "test.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Mirrors[0]; m.PruneGrace != 36*time.Hour {
		t.Errorf("prune_grace: 36h parsed as %v", m.PruneGrace)
	}
}

func TestEveryProblemIsListedAtOnce(t *testing.T) {
	dir := t.TempDir()
	text := `listen: localhost
mirrors:
  - name: Towns
    source: /u
    sink: /d
    schedule: "every ten minutes"
    concurrency: 0
  - name: b
    source: ftp://host/x
    sink: https://example.org/x/
    concurrency: lots
    require_signatures: maybe
  - name: c
    trusted_signers: missing.allowed_signers
  - name: c
    source: /u
    sink: /u
    require_signatures: true
  - source: /u
    sink: /d
    lock_wait: soon
    retries: -1
    http_headers: ["no colon here"]
  - just a string
  - name: f
    source: /u
    sink: /d
    source: /v
  - name: g
    source: /u
    sink: /d
    bwlimit: fast
    http_allow_redirects: ["http://cdn.example.org/"]
`
	_, err := Parse([]byte(text), filepath.Join(dir, "test.yaml"), env(nil))
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("err = %v", err)
	}
	// Relabel so wantProblem's file check holds.
	for i := range ps {
		ps[i].File = "test.yaml"
	}
	wantProblem(t, ps, 1, "listen", `"localhost"`, "missing port")
	wantProblem(t, ps, 3, "name", `"Towns"`, "a-z, 0-9 and -")
	wantProblem(t, ps, 6, "schedule", "every ten minutes")
	wantProblem(t, ps, 7, "concurrency", "at least 1")
	wantProblem(t, ps, 9, "source", "ftp://host/x", "unknown scheme")
	wantProblem(t, ps, 10, "sink", "HTTP(S) can only be a source")
	wantProblem(t, ps, 11, "concurrency", `"lots"`, "not a whole number")
	wantProblem(t, ps, 12, "require_signatures", `"maybe"`)
	wantProblem(t, ps, 13, `mirror "c"`, "no source")
	wantProblem(t, ps, 13, `mirror "c"`, "no sink")
	wantProblem(t, ps, 14, "trusted_signers", "missing.allowed_signers", "no such file")
	wantProblem(t, ps, 15, `name "c"`, "already used", "line 13")
	wantProblem(t, ps, 17, "sink is the source")
	wantProblem(t, ps, 18, "require_signatures needs trusted_signers")
	wantProblem(t, ps, 19, "mirrors[4]", "no name")
	wantProblem(t, ps, 21, "lock_wait", `"soon"`)
	wantProblem(t, ps, 22, "retries", "-1", "must not be negative")
	wantProblem(t, ps, 23, "http_headers[0]", "Name: value")
	wantProblem(t, ps, 24, "mirrors[5]", "must be a mapping")
	wantProblem(t, ps, 28, "source", "given twice", "line 26")
	wantProblem(t, ps, 32, "bwlimit", `"fast"`, "10M")
	wantProblem(t, ps, 33, "http_allow_redirects[0]", "http://cdn.example.org/", "HOST or HOST:PORT")
	if len(ps) != 22 {
		t.Errorf("want 22 problems, got %d:\n%v", len(ps), ps)
	}
	for i := 1; i < len(ps); i++ {
		if ps[i].Line < ps[i-1].Line {
			t.Errorf("problems not in line order:\n%v", ps)
			break
		}
	}
}

func TestLockTTL(t *testing.T) {
	base := "mirrors:\n  - name: a\n    source: /u\n    sink: /d\n    lock_ttl: "
	cfg, err := Parse([]byte(base+"5s\n"), "test.yaml", env(nil))
	if err != nil || cfg.Mirrors[0].LockTTL != 5*time.Second {
		t.Fatalf("lock_ttl: 5s: %v, %+v", err, cfg)
	}
	wantProblem(t, problems(t, base+"200ms\n", nil), 5, "lock_ttl", "200ms", "at least 1s")
	wantProblem(t, problems(t, base+"soon\n", nil), 5, "lock_ttl", `"soon"`, "not a duration")
}

func TestRequireSignaturesNeedsTrustedSigners(t *testing.T) {
	base := "mirrors:\n  - name: a\n    source: /u\n    sink: /d\n    require_signatures: true\n"
	wantProblem(t, problems(t, base, nil), 5, "require_signatures needs trusted_signers")
	ps := problems(t, base+"    trusted_signers: ${KEYS}\n", map[string]string{"KEYS": ""})
	wantProblem(t, ps, 5, "require_signatures needs trusted_signers")
	// An unset variable is reported once, as unset.
	ps = problems(t, base+"    trusted_signers: ${KEYS}\n", nil)
	wantProblem(t, ps, 6, "KEYS", "not set")
	if len(ps) != 1 {
		t.Errorf("want 1 problem, got:\n%v", ps)
	}
}

func TestTrustedSignersRelativeToTheConfigFile(t *testing.T) {
	dir := t.TempDir()
	keys := writeFile(t, dir, "towns.allowed_signers", "")
	path := writeFile(t, dir, "fdl-mirror.yaml", "mirrors:\n  - name: a\n    source: /u\n    sink: /d\n    trusted_signers: towns.allowed_signers\n")
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mirrors[0].TrustedSigners != keys {
		t.Errorf("trusted_signers = %q, want %q", cfg.Mirrors[0].TrustedSigners, keys)
	}
	if cfg.Path != path {
		t.Errorf("path = %q", cfg.Path)
	}
}

func TestStructuralErrors(t *testing.T) {
	cases := []struct {
		name, text string
		line       int
		parts      []string
	}{
		{"empty file", "", 0, []string{"empty"}},
		{"top level is a list", "- a\n- b\n", 1, []string{"top level must be a mapping"}},
		{"no mirrors", "listen: 127.0.0.1:9464\n", 1, []string{"no mirrors"}},
		{"mirrors not a list", "mirrors:\n  name: a\n", 2, []string{"mirrors", "must be a list"}},
		{"empty mirrors", "mirrors: []\n", 1, []string{"mirrors", "empty"}},
		{"null mirrors", "mirrors:\n", 1, []string{"mirrors", "empty"}},
		{"listen port", "listen: 127.0.0.1:99999\nmirrors: []\n", 1, []string{"port", "99999"}},
		{"metrics_listen port", "metrics_listen: 127.0.0.1:99999\nmirrors: []\n", 1, []string{"metrics_listen", "port", "99999"}},
		{"metrics_listen no port", "metrics_listen: localhost\nmirrors: []\n", 1, []string{"metrics_listen", "missing port"}},
		{"metrics_listen is listen", "listen: 127.0.0.1:9464\nmetrics_listen: 127.0.0.1:9464\nmirrors: []\n", 2, []string{"metrics_listen", "port of its own"}},
		{"value is a mapping", "mirrors:\n  - name: a\n    source: {x: 1}\n    sink: /d\n", 3, []string{"source", "single value"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantProblem(t, problems(t, c.text, nil), c.line, c.parts...)
		})
	}
}

// yaml.v3 reports the line where the enclosing block starts for some syntax
// errors, so only the presence of a line is asserted.
func TestInvalidYAMLHasALine(t *testing.T) {
	for _, text := range []string{
		"mirrors:\n  - name: a\n   source: [\n",
		"mirrors:\n  - name: a\n\tsource: x\n",
		"mirrors:\n  - name: a\n    source: \"x\n",
	} {
		ps := problems(t, text, nil)
		lines := strings.Count(text, "\n")
		if len(ps) != 1 || ps[0].Line < 1 || ps[0].Line > lines || !strings.Contains(ps[0].Msg, "not valid YAML") {
			t.Errorf("%q: problems %v", text, ps)
		}
	}
}

func TestLoadMissingFileNamesIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v", err)
	}
}

func TestCatalogLimitsAreCheckedOnTheirLine(t *testing.T) {
	ps := problems(t, `mirrors:
  - name: a
    source: /up
    sink: /down
    catalog_max_files: 0
    catalog_timeout: soon
    catalog_memory_limit: 12 parsecs
    catalog_max_size: -5
`, nil)
	wantProblem(t, ps, 5, "catalog_max_files", "at least 1")
	wantProblem(t, ps, 6, "catalog_timeout", "soon")
	wantProblem(t, ps, 7, "catalog_memory_limit", "12 parsecs")
	wantProblem(t, ps, 8, "catalog_max_size", "-5")
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4GiB": 4 << 30, "128 MiB": 128 << 20, "1000": 1000, "2MB": 2e6, "1KiB": 1024} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "0", "-1GiB", "1.5GiB", "4 gigs", "9999999999TiB"} {
		if n, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		}
	}
}

func TestForceKey(t *testing.T) {
	cfg, err := Parse([]byte("mirrors:\n  - {name: a, source: /u, sink: /d, force: true}\n"), "test.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Mirrors[0].Force {
		t.Error("force: true not read")
	}
	wantProblem(t, problems(t, "mirrors:\n  - {name: a, source: /u, sink: /d, force: maybe}\n", nil), 2, "force")
}

// TestProblemsNeverShowASecret: every problem that quotes an address
// quotes it redacted, whether the secret is in the file or in a ${VAR}.
func TestProblemsNeverShowASecret(t *testing.T) {
	const pw, token, header = "s3cretPW-from-env", "tok-0123456789", "Bearer hdr-secret-42"
	dir := t.TempDir()
	headers := writeSecret(t, dir, "headers", "Authorization: "+header+"\nnot a header "+header+"\n")
	open := writeFile(t, dir, "open.headers", "Authorization: "+header+"\n")
	text := `mirrors:
  - name: one
    source: ftp://alice:${PW}@host/repo/?token=${TOKEN}
    sink: https://bob:literal-pw-99@host/m/?sig=` + token + `
    http_headers_file: ` + headers + `
    ca_file: ` + headers + `
  - name: two
    source: /srv/two
    sink: /srv/m2
    http_headers_file: ` + open + `
`
	_, err := Parse([]byte(text), filepath.Join(dir, "c.yaml"), env(map[string]string{"PW": pw, "TOKEN": token}))
	if err == nil {
		t.Fatal("parsed")
	}
	msg := err.Error()
	for _, want := range []string{"unknown scheme", "HTTP(S) can only be a source", "ftp://alice:REDACTED@host/repo/?token=REDACTED",
		"https://bob:REDACTED@host/m/?sig=REDACTED", "headers:2: not a \"Name: value\" header", "ca_file: CA file " + headers + ": no PEM certificate",
		"open.headers: mode 0644 lets group or others read or change the headers"} {
		if !strings.Contains(msg, want) {
			t.Errorf("problems lack %q:\n%s", want, msg)
		}
	}
	for _, secret := range []string{pw, token, "literal-pw-99", "hdr-secret-42"} {
		if strings.Contains(msg, secret) {
			t.Errorf("problems show %q:\n%s", secret, msg)
		}
	}
}

// TestLiteralSecretsAreFoundAndReportedWhenTheFileIsWorldReadable.
func TestLiteralSecretsAreFoundAndReportedWhenTheFileIsWorldReadable(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FDL_TEST_TOKEN", "from-the-environment")
	clean := writeFile(t, dir, "clean.yaml", `mirrors:
  - name: one
    source: https://alice:${FDL_TEST_TOKEN}@host/repo/?token=${FDL_TEST_TOKEN}&region=x
    sink: /srv/m
    http_headers: ["Authorization: Bearer ${FDL_TEST_TOKEN}"]
`)
	literal := writeFile(t, dir, "literal.yaml", `mirrors:
  - name: one
    source: https://host/repo/?token=abc123literal
    sink: /srv/m
  - name: two
    source: https://host/two/
    sink: /srv/two
    http_headers: ["Authorization: Bearer literal", "X-Env: ${FDL_TEST_TOKEN}"]
`)
	cfg, err := Load(clean)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.LiteralSecrets) != 0 || ExposedSecrets(cfg) != nil {
		t.Errorf("a config of ${VAR}s holds literal secrets: %v", cfg.LiteralSecrets)
	}
	cfg, err = Load(literal)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"line 3: mirrors[0].source: a credential in the address", "line 8: mirrors[1].http_headers[0]: a header value"}
	if !reflect.DeepEqual(cfg.LiteralSecrets, want) {
		t.Errorf("LiteralSecrets = %q, want %q", cfg.LiteralSecrets, want)
	}
	if got := ExposedSecrets(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("mode 0644: ExposedSecrets = %q", got)
	}
	if err := os.Chmod(literal, 0o640); err != nil {
		t.Fatal(err)
	}
	if got := ExposedSecrets(cfg); got != nil {
		t.Errorf("mode 0640: ExposedSecrets = %q, want none", got)
	}
}

// Sinks that nest are refused, naming both mirrors (issue 27): one's
// cleanup would reach into the other's files. Siblings with a common
// start, other buckets, other S3 endpoints and other protocols are fine.
func TestNestedSinksAreRefusedNamingBoth(t *testing.T) {
	two := func(a, b string) string {
		return "mirrors:\n  - name: outer\n    source: /u1\n    sink: " + a + "\n  - name: inner\n    source: /u2\n    sink: " + b + "\n"
	}
	for _, tc := range []struct{ a, b string }{
		{"s3://b/a/", "s3://b/a/b/"},
		{"s3://b/", "s3://b/data/x"},
		{"s3://b/a/b?endpoint=http://127.0.0.1:9000", "s3://b/a?endpoint=http://127.0.0.1:9000/"},
		{"gs://b/m", "gs://b/m/"},
		{"/srv/mirror", "/srv/mirror/inner"},
		{"file:///srv/mirror/", "/srv/mirror"},
	} {
		wantProblem(t, problems(t, two(tc.a, tc.b), nil), 5, `"inner"`, `"outer"`, "line 2", "nest")
	}
	for _, tc := range []struct{ a, b string }{
		{"s3://b/a/", "s3://b/ab/"},
		{"s3://b/a/", "s3://c/a/b/"},
		{"s3://b/a?endpoint=http://127.0.0.1:9000", "s3://b/a/b?endpoint=http://127.0.0.1:9001"},
		{"s3://b/a/", "gs://b/a/b/"},
		{"/srv/mirror", "/srv/mirror2"},
	} {
		if _, err := Parse([]byte(two(tc.a, tc.b)), "test.yaml", env(nil)); err != nil {
			t.Errorf("sinks %s and %s: %v", tc.a, tc.b, err)
		}
	}
}

// sinks: names a mirror's several sinks; the first is its Sink, for what
// takes one.
func TestSinksListsSeveralSinks(t *testing.T) {
	cfg, err := Parse([]byte("mirrors:\n  - name: towns\n    source: /up\n    sinks: [/srv/a, \"s3://b/towns/\"]\n"), "test.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Mirrors[0]
	if !reflect.DeepEqual(m.Sinks, []string{"/srv/a", "s3://b/towns/"}) || m.Sink != "/srv/a" || !reflect.DeepEqual(m.AllSinks(), m.Sinks) {
		t.Errorf("sinks %v, sink %q, all %v", m.Sinks, m.Sink, m.AllSinks())
	}
	one := Mirror{Sink: "/srv/a"}
	if !reflect.DeepEqual(one.AllSinks(), []string{"/srv/a"}) {
		t.Errorf("a mirror of one sink: %v", one.AllSinks())
	}
}

// A sinks: list that cannot be mirrored is a problem on its line, naming
// the rule: beside sink:, empty, not a list, a sink twice or nested, the
// source itself, an HTTP sink; every problem listed at once.
func TestSinksProblemsHaveTheirLines(t *testing.T) {
	text := `mirrors:
  - name: both
    source: /u1
    sink: /srv/both
    sinks: [/srv/both2]
  - name: empty
    source: /u2
    sinks: []
  - name: scalar
    source: /u3
    sinks: /srv/one
  - name: twice
    source: /u4
    sinks:
      - /srv/t
      - /srv/t/inner
      - /u4
      - https://example.org/x/
`
	ps := problems(t, text, nil)
	wantProblem(t, ps, 5, `mirror "both"`, "both sink and sinks")
	wantProblem(t, ps, 8, `mirror "empty"`, "sinks: empty")
	wantProblem(t, ps, 11, "sinks", "must be a list")
	wantProblem(t, ps, 16, `mirror "twice"`, "sinks[1]", "sinks[0]", "nest")
	wantProblem(t, ps, 17, `mirror "twice"`, "sinks[2] is the source")
	wantProblem(t, ps, 18, "sinks[3]", "HTTP(S) can only be a source")
}

// A sink of one mirror's sinks: list nesting another mirror's sink is
// refused as two mirrors' sinks are.
func TestSinksNestingAnotherMirrorsSinkAreRefused(t *testing.T) {
	text := "mirrors:\n  - name: outer\n    source: /u1\n    sink: /srv/m\n  - name: inner\n    source: /u2\n    sinks: [/srv/other, /srv/m/x]\n"
	wantProblem(t, problems(t, text, nil), 5, `"inner"`, `"outer"`, "/srv/m/x", "nest")
}
