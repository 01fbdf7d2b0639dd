// Package config reads the YAML file that lists the mirrors a daemon runs
// and that `sync --config` and `status --config` act on.
//
// The file is decoded through yaml.Node rather than straight into structs so
// that every problem (an unknown key, a value of the wrong type, an unset
// ${VAR}, a bad schedule) is reported with its line, and all of them at once:
// an operator fixing a config should not have to restart the daemon once per
// mistake.
package config

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/httpstore"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/limiter"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Config is a whole config file.
type Config struct {
	// Path is the file it was read from ("" when parsed from memory).
	Path string
	// Listen is the host:port of the status page, the trigger, and (unless
	// MetricsListen is set) /metrics, /healthz and /readyz; "" serves none.
	Listen string
	// MetricsListen, when set, is a host:port of its own for /metrics,
	// /healthz and /readyz, so that probes and scrapes never wait behind
	// the clients of Listen.
	MetricsListen string
	Mirrors       []Mirror
	// LiteralSecrets says where the file itself holds a credential (a
	// password or token in an address, a header value) rather than a
	// ${VAR} or an http_headers_file: one "line N: what" each. See
	// ExposedSecrets.
	LiteralSecrets []string
	// TriggerTokenFile holds the bearer token of POST /mirrors/{name}/sync
	// (TriggerToken); "" serves no trigger.
	TriggerTokenFile string
	TriggerToken     Secret
	// TriggerSecretFile holds the secret a signed CloudEvent of type
	// org.fdl.mirror.refs.updated posted to the trigger is checked with
	// (TriggerSecret), as a Standard Webhooks receiver checks it: another
	// mirror's notification triggers this one. "" takes none.
	TriggerSecretFile string
	TriggerSecret     Secret
	// Notify are the receivers of every mirror's notifications; each
	// mirror's Notify starts with them.
	Notify []NotifyTarget
	// NotifySpool is the file where a stopping daemon keeps the
	// notifications it could not send, for the next start; "" drops them.
	NotifySpool string
}

// Mirror is one upstream repository and where to mirror it.
type Mirror struct {
	Name   string
	Source string
	Sink   string
	// Sinks are the mirror's sinks where the config names them with
	// `sinks:` (a fan-out: one run reads the upstream once for all of
	// them, see internal/mirror's RunSinks); Sink is then the first. nil
	// for a mirror of one `sink:`. AllSinks gives either.
	Sinks []string
	// Schedule is a robfig/cron/v3 spec: five fields or a descriptor such as
	// "@every 10m" or "@hourly". "" means the daemon does not run this mirror;
	// `sync --config` still can.
	Schedule string
	// Scrub, in the syntax of Schedule, is when the daemon runs the mirror
	// with the repair's check (sync --repair): a plain sync trusts what it
	// published before, so a file lost out of band comes back only through
	// a repair. "" means never; `sync --config` ignores it.
	Scrub string
	// TrustedSigners is an allowed_signers file, made absolute against the
	// config file's folder; "" checks no signatures.
	TrustedSigners    string
	RequireSignatures bool
	// SignatureNamespace is the SSHSIG namespace; "" means "fdl".
	SignatureNamespace string
	// Concurrency is the number of parallel copies; 0 means the engine default.
	Concurrency int
	// HTTPHeaders are sent with every request to an HTTP(S) source ("Name:
	// value"): those of http_headers, then those of http_headers_file.
	HTTPHeaders []string
	// HTTPAllowInsecureAuth lets headers and a password go to a plain
	// http:// source that is not loopback.
	HTTPAllowInsecureAuth bool
	// CAFile is a PEM bundle trusted besides the system's roots for HTTPS
	// sources and S3/GCS endpoints, made absolute against the config
	// file's folder.
	CAFile string
	// LockWait is how long a run waits for another run's lock on the sink.
	LockWait time.Duration
	// LockTTL is how long an object-store sink's lock outlives a holder
	// that stopped renewing it (a killed replica); 0 means the default.
	LockTTL time.Duration
	// Retries is how often one request is retried; 0 means each backend's default.
	Retries int
	// Prune makes the daemon prune the mirror after each successful sync:
	// refs, versions and data files the upstream withdrew are removed.
	Prune bool
	// PruneMaxDelete bounds the objects one prune removes; 0 means the
	// prune's default (1000).
	PruneMaxDelete int
	// PruneGrace is how long a prune of an object-store sink holds what
	// it found unreferenced before it removes it; 0 means the prune's
	// default (24h). At least MinPruneGrace and PruneGraceLockTTLs times
	// lock_ttl.
	PruneGrace time.Duration
	// HTTPAllowRedirects are the hosts ("HOST" or "HOST:PORT") an HTTP(S)
	// source may redirect to besides its own origin.
	HTTPAllowRedirects []string
	// BWLimit is the bandwidth limit of a run in bytes per second; 0 is
	// none.
	BWLimit int64
	// Catalog limits (catalog_max_files, catalog_timeout,
	// catalog_memory_limit, catalog_max_size); 0 means the default.
	CatalogMaxFiles    int64
	CatalogTimeout     time.Duration
	CatalogMemoryLimit int64 // bytes
	CatalogMaxSize     int64 // bytes
	// RequireSandbox refuses to read a catalog in a reader without both
	// Landlock and seccomp (require_sandbox; catalog.Limits).
	RequireSandbox bool
	// Refs and ExcludeRefs choose the upstream refs mirrored (patterns:
	// * within a segment, ** across); none means branches and tags.
	Refs        []string
	ExcludeRefs []string
	// AllowRewind lists ref patterns whose branches may follow a move
	// upstream to a version that does not descend from the mirror's
	// (allow_rewind: true means every branch).
	AllowRewind []string
	// MaxUpstreamAge: when no selected upstream ref changed for longer,
	// status says the upstream is stale (a freeze); 0 never does.
	MaxUpstreamAge time.Duration
	// Repair makes every run re-check the data files of complete versions
	// in the sink and copy back what is missing (sync --repair).
	Repair bool
	// Force mirrors a source other than the one a sink without repository
	// ids was made from, and records it (sync --force): for a repository
	// that moved. Default false.
	Force bool
	// Notify are the receivers of this mirror's notifications: the
	// top-level ones, then the mirror's own.
	Notify []NotifyTarget
	// Line is where the mirror's entry starts in the file.
	Line int
}

// MinPruneGrace is the shortest prune_grace accepted (prune.MinGrace):
// longer than S3's SigV4 request lifetime (15 minutes) and a GCS access
// token's (1 hour), so that no request signed before an object was
// marked can land after it is removed. PruneGraceLockTTLs: a grace must
// also span that many lock_ttl (prune.GraceLockTTLs).
const (
	MinPruneGrace      = time.Hour
	PruneGraceLockTTLs = 10
	// defaultLockTTL is lock.DefaultTTL, a lock_ttl left unset.
	defaultLockTTL = 2 * time.Minute
)

// MinLockTTL is the shortest lock_ttl accepted: the lock is renewed every
// third of it, so far shorter would not survive a slow store.
const MinLockTTL = time.Second

// Mirror returns the mirror called name.
func (c *Config) Mirror(name string) (Mirror, bool) {
	for _, m := range c.Mirrors {
		if m.Name == name {
			return m, true
		}
	}
	return Mirror{}, false
}

// Names lists the mirrors' names in file order.
func (c *Config) Names() []string {
	names := make([]string, len(c.Mirrors))
	for i, m := range c.Mirrors {
		names[i] = m.Name
	}
	return names
}

// Problem is one thing wrong in a config file, at a line.
type Problem struct {
	File string
	Line int
	Msg  string
}

// String is the problem as shown: a value it quotes has its credentials
// redacted, since it may be an address after ${VAR} expansion.
func (p Problem) String() string {
	file := p.File
	if file == "" {
		file = "config"
	}
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", file, p.Line, redact.Text(p.Msg))
	}
	return fmt.Sprintf("%s: %s", file, redact.Text(p.Msg))
}

// Problems is every problem found in a config file; it is the error Load and
// Parse return when the file does not validate.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Load reads and validates the config file at path, expanding ${VAR} from the
// process environment.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return Parse(data, path, os.LookupEnv)
}

// Parse validates a config held in memory. file names it in problems and
// anchors relative trusted_signers paths; lookupEnv resolves ${VAR}.
func Parse(data []byte, file string, lookupEnv func(string) (string, bool)) (*Config, error) {
	p := &parser{file: file, lookupEnv: lookupEnv}
	cfg := &Config{Path: file}
	p.parse(data, cfg)
	cfg.LiteralSecrets = p.literal
	if len(p.problems) > 0 {
		sort.SliceStable(p.problems, func(i, j int) bool { return p.problems[i].Line < p.problems[j].Line })
		return nil, p.problems
	}
	return cfg, nil
}

type parser struct {
	file              string
	lookupEnv         func(string) (string, bool)
	problems          Problems
	literal           []string // Config.LiteralSecrets
	triggerLine       int
	triggerSecretLine int
	metricsLine       int
}

func (p *parser) addf(line int, format string, args ...any) {
	p.problems = append(p.problems, Problem{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

var (
	namePattern = regexp.MustCompile(`^[a-z0-9-]+$`)
	// A reference is ${NAME}; $${ is an escaped, literal "${".
	envPattern = regexp.MustCompile(`\$\$\{|\$\{([^}]*)\}`)
	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (p *parser) parse(data []byte, cfg *Config) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// yaml.v3 puts "yaml: line N: ..." in its message; lift the line out.
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		line := 0
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if i := strings.Index(rest, ":"); i > 0 {
				if n, err := strconv.Atoi(rest[:i]); err == nil {
					line, msg = n, strings.TrimSpace(rest[i+1:])
				}
			}
		}
		p.addf(line, "not valid YAML: %s", msg)
		return
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.addf(0, "empty; it needs at least a mirrors: list")
		return
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.addf(root.Line, "the top level must be a mapping with a mirrors: list, not %s", kindName(root))
		return
	}
	sawMirrors := false
	p.fields(root, "", func(key string, k, v *yaml.Node) bool {
		switch key {
		case "listen":
			cfg.Listen = p.str(v, key)
			p.checkListen(v, key, cfg.Listen)
		case "metrics_listen":
			cfg.MetricsListen = p.str(v, key)
			p.checkListen(v, key, cfg.MetricsListen)
			p.metricsLine = v.Line
		case "mirrors":
			sawMirrors = true
			p.mirrors(v, cfg)
		case "trigger_token_file":
			p.triggerToken(v, cfg)
		case "trigger_secret_file":
			cfg.TriggerSecretFile, cfg.TriggerSecret = p.secretFile(v, key)
			p.checkWebhookSecret(v, key, cfg.TriggerSecret)
			p.triggerSecretLine = v.Line
		case "notify":
			cfg.Notify = p.notifyTargets(v, "notify")
		case "notify_spool":
			cfg.NotifySpool = p.spoolFile(v, key)
		default:
			return false
		}
		return true
	})
	if !sawMirrors {
		p.addf(root.Line, "no mirrors: list")
	}
	p.finishNotify(cfg)
	p.finishListen(cfg)
}

// fields walks a mapping, reporting duplicate keys, and unknown ones (those
// set rejects); where names the mapping in messages ("" for the top level).
func (p *parser) fields(m *yaml.Node, where string, set func(key string, k, v *yaml.Node) bool) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			p.addf(k.Line, "%skeys must be plain names", prefix(where))
			continue
		}
		if first, dup := seen[key]; dup {
			p.addf(k.Line, "%s%s: given twice (first on line %d)", prefix(where), key, first)
			continue
		}
		seen[key] = k.Line
		if !set(key, k, v) {
			p.addf(k.Line, "%sunknown key %q", prefix(where), key)
		}
	}
}

func prefix(where string) string {
	if where == "" {
		return ""
	}
	return where + ": "
}

func (p *parser) mirrors(v *yaml.Node, cfg *Config) {
	if v.Kind != yaml.SequenceNode {
		if isNull(v) {
			p.addf(v.Line, "mirrors: empty; list at least one mirror")
			return
		}
		p.addf(v.Line, "mirrors: must be a list of mirrors, not %s", kindName(v))
		return
	}
	if len(v.Content) == 0 {
		p.addf(v.Line, "mirrors: empty; list at least one mirror")
	}
	names := map[string]int{}
	for i, item := range v.Content {
		where := fmt.Sprintf("mirrors[%d]", i)
		if item.Kind != yaml.MappingNode {
			p.addf(item.Line, "%s: must be a mapping (name:, source:, sink:...), not %s", where, kindName(item))
			continue
		}
		m := p.mirror(item, where)
		if m.Name != "" {
			if first, dup := names[m.Name]; dup {
				p.addf(m.Line, "%s: name %q is already used by the mirror on line %d", where, m.Name, first)
			} else {
				names[m.Name] = m.Line
			}
		}
		cfg.Mirrors = append(cfg.Mirrors, m)
	}
	if len(p.problems) == 0 {
		// Across mirrors, once each is well formed: not a second
		// complaint about a sink already refused.
		p.checkNestedSinks(cfg.Mirrors)
	}
}

// checkNestedSinks refuses two mirrors whose sinks are one folder or one
// inside the other: each run would take its own lock and clean up what it
// takes for its own (an S3 mirror aborts the stale multipart uploads under
// its prefix; a prune removes what no catalog of its names), reaching
// into the other's files.
func (p *parser) checkNestedSinks(mirrors []Mirror) {
	for j, inner := range mirrors {
		for _, outer := range mirrors[:j] {
			for _, in := range inner.AllSinks() {
				for _, out := range outer.AllSinks() {
					if in == "" || out == "" {
						continue
					}
					if within(in, out) || within(out, in) {
						p.addf(inner.Line, "mirrors[%d] %q: its sink %q and the sink %q of mirror %q (line %d) nest: one mirror's cleanup would reach into the other's files; give each its own folder or prefix",
							j, inner.Name, redact.URL(in), redact.URL(out), outer.Name, outer.Line)
					}
				}
			}
		}
	}
}

// sinks reads a mirror's `sinks:`, a list of sink addresses, each checked
// as `sink:` is; the line of each, for later problems.
func (p *parser) sinks(v *yaml.Node, where string) ([]string, []int) {
	if v.Kind != yaml.SequenceNode {
		p.addf(v.Line, "%s: must be a list of sink addresses, not %s", where, kindName(v))
		return nil, nil
	}
	var out []string
	var lines []int
	for i, item := range v.Content {
		at := fmt.Sprintf("%s[%d]", where, i)
		s, ok := p.scalar(item, at)
		if !ok {
			continue
		}
		if s == "" {
			p.addf(item.Line, "%s: empty", at)
			continue
		}
		p.checkAddress(item, at, s, true)
		out = append(out, s)
		lines = append(lines, item.Line)
	}
	return out, lines
}

// checkSinks refuses a `sinks:` list that is empty, names a sink twice or
// one inside another, or names the source: each sink takes its own lock
// and cleans up what it takes for its own.
func (p *parser) checkSinks(m Mirror, v *yaml.Node, lines []int, where string) {
	if v.Kind == yaml.SequenceNode && len(v.Content) == 0 {
		p.addf(v.Line, "%s: sinks: empty", where)
	}
	for j, s := range m.Sinks {
		if m.Source != "" && s == m.Source {
			p.addf(lines[j], "%s: sinks[%d] is the source", where, j)
		}
		for i, before := range m.Sinks[:j] {
			if within(s, before) || within(before, s) {
				p.addf(lines[j], "%s: sinks[%d] %q and sinks[%d] %q are one folder or nest: each sink's cleanup would reach into the other's files",
					where, j, redact.URL(s), i, redact.URL(before))
			}
		}
	}
}

// AllSinks is the mirror's sinks: Sinks, or its one Sink.
func (m Mirror) AllSinks() []string {
	if len(m.Sinks) > 0 {
		return m.Sinks
	}
	return []string{m.Sink}
}

// Nest says whether the stores at a and b are one or one lies under the
// other: what a config refuses of two sinks, and a run of a sink and its
// source or an earlier sink (internal/mirror's RunSinks).
func Nest(a, b string) bool { return within(a, b) || within(b, a) }

// within says whether the sink at inner is the one at outer or lies under
// it: the same protocol, bucket (and S3 endpoint), and a path below.
func within(inner, outer string) bool {
	a, b := location.Clean(inner), location.Clean(outer)
	if s, _ := location.Scheme(inner); s == "s3" && endpointOf(inner) != endpointOf(outer) {
		return false
	}
	return a == b || strings.HasPrefix(a, strings.TrimSuffix(b, "/")+"/")
}

// endpointOf is an s3:// address's endpoint parameter ("" for AWS).
func endpointOf(addr string) string {
	u, err := url.Parse(addr)
	if err != nil {
		return ""
	}
	return strings.TrimRight(strings.ToLower(u.Query().Get("endpoint")), "/")
}

func (p *parser) mirror(n *yaml.Node, where string) Mirror {
	m := Mirror{Line: n.Line}
	var nameNode, sourceNode, sinkNode, sinksNode, signersNode, requireNode *yaml.Node
	var sinkLines []int // of each of Sinks
	var graceLine int
	// expanded is false where a value was already reported as unusable, so
	// that it is not reported a second time as missing.
	expanded := map[string]bool{}
	str := func(v *yaml.Node, key string) string {
		s, ok := p.scalar(v, where+"."+key)
		expanded[key] = ok
		return s
	}
	p.fields(n, where, func(key string, k, v *yaml.Node) bool {
		switch key {
		case "name":
			nameNode = v
			m.Name = str(v, "name")
		case "source":
			sourceNode = v
			m.Source = str(v, "source")
			if m.Source != "" {
				p.checkAddress(v, where+".source", m.Source, false)
			}
		case "sink":
			sinkNode = v
			m.Sink = str(v, "sink")
			if m.Sink != "" {
				p.checkAddress(v, where+".sink", m.Sink, true)
			}
		case "sinks":
			sinksNode = v
			m.Sinks, sinkLines = p.sinks(v, where+".sinks")
		case "schedule":
			m.Schedule = p.str(v, where+".schedule")
			if m.Schedule != "" {
				if _, err := cron.ParseStandard(m.Schedule); err != nil {
					p.addf(v.Line, "%s.schedule: %q: %v", where, m.Schedule, err)
				}
			}
		case "scrub":
			m.Scrub = p.str(v, where+".scrub")
			if m.Scrub != "" {
				if _, err := cron.ParseStandard(m.Scrub); err != nil {
					p.addf(v.Line, "%s.scrub: %q: %v", where, m.Scrub, err)
				}
			}
		case "trusted_signers":
			signersNode = v
			m.TrustedSigners = str(v, "trusted_signers")
		case "require_signatures":
			requireNode = v
			m.RequireSignatures = p.boolean(v, where+".require_signatures")
		case "signature_namespace":
			m.SignatureNamespace = p.str(v, where+".signature_namespace")
		case "concurrency":
			m.Concurrency = p.integer(v, where+".concurrency")
			if m.Concurrency <= 0 && p.isInt(v) {
				p.addf(v.Line, "%s.concurrency: %d: must be at least 1", where, m.Concurrency)
			}
		case "http_headers":
			m.HTTPHeaders = append(p.headers(v, where+".http_headers"), m.HTTPHeaders...)
			p.literalHeaders(v, where+".http_headers")
		case "http_headers_file":
			if file := p.path(str(v, key)); file != "" {
				hs, err := ReadHeaderFile(file)
				if err != nil {
					p.addf(v.Line, "%s.http_headers_file: %v", where, err)
				}
				m.HTTPHeaders = append(m.HTTPHeaders, hs...)
			}
		case "http_allow_insecure_auth":
			m.HTTPAllowInsecureAuth = p.boolean(v, where+".http_allow_insecure_auth")
		case "ca_file":
			m.CAFile = p.path(str(v, key))
			if _, err := location.CertPool(m.CAFile); err != nil {
				p.addf(v.Line, "%s.ca_file: %v", where, err)
			}
		case "retries":
			m.Retries = p.integer(v, where+".retries")
			if m.Retries < 0 {
				p.addf(v.Line, "%s.retries: %d: must not be negative", where, m.Retries)
			}
		case "repair":
			m.Repair = p.boolean(v, where+".repair")
		case "force":
			m.Force = p.boolean(v, where+".force")
		case "prune":
			m.Prune = p.boolean(v, where+".prune")
		case "prune_max_delete":
			m.PruneMaxDelete = p.integer(v, where+".prune_max_delete")
			if m.PruneMaxDelete <= 0 && p.isInt(v) {
				p.addf(v.Line, "%s.prune_max_delete: %d: must be at least 1", where, m.PruneMaxDelete)
			}
		case "prune_grace":
			s := p.str(v, where+".prune_grace")
			if s != "" {
				d, err := time.ParseDuration(s)
				switch {
				case err != nil:
					p.addf(v.Line, "%s.prune_grace: %q is not a duration such as 24h", where, s)
				case d < MinPruneGrace:
					p.addf(v.Line, "%s.prune_grace: %s: must be at least %s, longer than any request signed before a prune marked an object can live", where, s, MinPruneGrace)
				}
				m.PruneGrace, graceLine = d, v.Line
			}
		case "http_allow_redirects":
			m.HTTPAllowRedirects = p.strings(v, where+".http_allow_redirects", httpstore.CheckAllowRedirect)
		case "bwlimit":
			s := p.str(v, where+".bwlimit")
			if s != "" {
				n, err := limiter.ParseRate(s)
				if err != nil {
					p.addf(v.Line, "%s.bwlimit: %v", where, err)
				}
				m.BWLimit = n
			}
		case "require_sandbox":
			m.RequireSandbox = p.boolean(v, where+".require_sandbox")
		case "catalog_max_files":
			m.CatalogMaxFiles = int64(p.integer(v, where+".catalog_max_files"))
			if m.CatalogMaxFiles <= 0 && p.isInt(v) {
				p.addf(v.Line, "%s.catalog_max_files: %d: must be at least 1", where, m.CatalogMaxFiles)
			}
		case "catalog_timeout":
			s := p.str(v, where+".catalog_timeout")
			if s != "" {
				d, err := time.ParseDuration(s)
				if err != nil || d <= 0 {
					p.addf(v.Line, "%s.catalog_timeout: %q is not a positive duration such as 60s or 5m", where, s)
				}
				m.CatalogTimeout = d
			}
		case "catalog_memory_limit", "catalog_max_size":
			s := p.str(v, where+"."+key)
			if s != "" {
				n, err := ParseSize(s)
				if err != nil {
					p.addf(v.Line, "%s.%s: %v", where, key, err)
				}
				if key == "catalog_memory_limit" {
					m.CatalogMemoryLimit = n
				} else {
					m.CatalogMaxSize = n
				}
			}
		case "refs":
			m.Refs = p.strings(v, where+".refs", repo.CheckRefPattern)
		case "exclude_refs":
			m.ExcludeRefs = p.strings(v, where+".exclude_refs", repo.CheckRefPattern)
		case "allow_rewind":
			if v.Kind == yaml.SequenceNode {
				m.AllowRewind = p.strings(v, where+".allow_rewind", repo.CheckRefPattern)
			} else if p.boolean(v, where+".allow_rewind") {
				m.AllowRewind = []string{"**"}
			}
		case "max_upstream_age":
			s := p.str(v, where+".max_upstream_age")
			if s != "" {
				d, err := time.ParseDuration(s)
				if err != nil || d <= 0 {
					p.addf(v.Line, "%s.max_upstream_age: %q is not a duration such as 36h", where, s)
				}
				m.MaxUpstreamAge = d
			}
		case "lock_wait":
			s := p.str(v, where+".lock_wait")
			if s != "" {
				d, err := time.ParseDuration(s)
				if err != nil || d < 0 {
					p.addf(v.Line, "%s.lock_wait: %q is not a duration such as 30s or 5m", where, s)
				}
				m.LockWait = d
			}
		case "lock_ttl":
			s := p.str(v, where+".lock_ttl")
			if s != "" {
				d, err := time.ParseDuration(s)
				switch {
				case err != nil:
					p.addf(v.Line, "%s.lock_ttl: %q is not a duration such as 30s or 2m", where, s)
				case d < MinLockTTL:
					// Renewals come every third of it, each allowed a quarter.
					p.addf(v.Line, "%s.lock_ttl: %s: must be at least %s", where, s, MinLockTTL)
				}
				m.LockTTL = d
			}
		case "notify":
			m.Notify = p.notifyTargets(v, where+".notify")
		default:
			return false
		}
		return true
	})
	if ttl := cmp.Or(m.LockTTL, defaultLockTTL); m.PruneGrace >= MinPruneGrace && m.PruneGrace < PruneGraceLockTTLs*ttl {
		p.addf(graceLine, "%s.prune_grace: %s: must be at least %d times lock_ttl (%s), far longer than any lease a paused run could outlive",
			where, m.PruneGrace, PruneGraceLockTTLs, ttl)
	}
	if nameNode == nil {
		p.addf(n.Line, "%s: no name", where)
	} else if m.Name != "" {
		if !namePattern.MatchString(m.Name) {
			p.addf(nameNode.Line, "%s.name: %q: use only a-z, 0-9 and -", where, m.Name)
		}
		where = fmt.Sprintf("mirror %q", m.Name)
	} else if expanded["name"] {
		p.addf(nameNode.Line, "%s.name: empty", where)
	}
	if sourceNode == nil {
		p.addf(n.Line, "%s: no source", where)
	} else if m.Source == "" && expanded["source"] {
		p.addf(sourceNode.Line, "%s: source: empty", where)
	}
	switch {
	case sinksNode != nil && sinkNode != nil:
		p.addf(sinksNode.Line, "%s: both sink and sinks; name the sinks in one of them", where)
	case sinksNode != nil:
		p.checkSinks(m, sinksNode, sinkLines, where)
		if len(m.Sinks) > 0 {
			m.Sink = m.Sinks[0]
		}
	case sinkNode == nil:
		p.addf(n.Line, "%s: no sink", where)
	case m.Sink == "" && expanded["sink"]:
		p.addf(sinkNode.Line, "%s: sink: empty", where)
	case m.Source != "" && m.Source == m.Sink:
		p.addf(sinkNode.Line, "%s: sink is the source", where)
	}
	if m.TrustedSigners != "" {
		m.TrustedSigners = p.path(m.TrustedSigners)
		if f, err := os.Open(m.TrustedSigners); err != nil {
			p.addf(signersNode.Line, "%s: trusted_signers: %v", where, err)
		} else {
			f.Close()
		}
	}
	if m.RequireSignatures && m.TrustedSigners == "" && (signersNode == nil || expanded["trusted_signers"]) {
		p.addf(requireNode.Line, "%s: require_signatures needs trusted_signers, the keys to check them against", where)
	}
	return m
}

// path makes a file named in the config absolute against the config
// file's folder.
func (p *parser) path(file string) string {
	if file != "" && !filepath.IsAbs(file) && p.file != "" {
		return filepath.Join(filepath.Dir(p.file), file)
	}
	return file
}

// checkAddress refuses schemes no backend handles, and HTTP as a sink, here
// rather than at the first tick hours later. The address's credentials are
// made known to redact first: no message, here or later, shows them.
func (p *parser) checkAddress(v *yaml.Node, where, addr string, sink bool) {
	redact.AddressSecrets(addr)
	for _, c := range redact.Credentials(v.Value) {
		if !envPattern.MatchString(c) {
			p.literal = append(p.literal, fmt.Sprintf("line %d: %s: a credential in the address", v.Line, where))
			break
		}
	}
	addr = redact.URL(addr)
	scheme, _ := location.Scheme(addr)
	switch scheme {
	case "file", "s3", "gs":
	case "http", "https":
		if sink {
			p.addf(v.Line, "%s: %q: HTTP(S) can only be a source", where, addr)
		}
	default:
		p.addf(v.Line, "%s: %q: unknown scheme %q (use a path, file://, s3://, gs://%s)",
			where, addr, scheme, map[bool]string{false: ", http:// or https://", true: ""}[sink])
	}
}

func (p *parser) checkListen(v *yaml.Node, key, listen string) {
	if listen == "" {
		return
	}
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		p.addf(v.Line, "%s: %q: %v (want host:port, e.g. 127.0.0.1:9464)", key, listen, unwrapAddrErr(err))
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		p.addf(v.Line, "%s: %q: port %q is not a number from 0 to 65535", key, listen, port)
	}
}

// finishListen refuses a metrics_listen that is the listen address itself:
// the point of it is a listener of its own.
func (p *parser) finishListen(cfg *Config) {
	if cfg.MetricsListen != "" && cfg.MetricsListen == cfg.Listen && !strings.HasSuffix(cfg.Listen, ":0") {
		p.addf(p.metricsLine, "metrics_listen: %q is the listen address too; give it a port of its own, or leave it out to serve /metrics and /healthz on listen", cfg.MetricsListen)
	}
}

func unwrapAddrErr(err error) string {
	if ae, ok := err.(*net.AddrError); ok {
		return ae.Err
	}
	return err.Error()
}

// scalar returns a scalar's value with ${VAR} expanded, or reports why it has
// none.
func (p *parser) scalar(v *yaml.Node, where string) (string, bool) {
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind != yaml.ScalarNode {
		p.addf(v.Line, "%s: must be a single value, not %s", where, kindName(v))
		return "", false
	}
	if isNull(v) {
		return "", true
	}
	return p.expand(v, where)
}

func (p *parser) expand(v *yaml.Node, where string) (string, bool) {
	ok := true
	out := envPattern.ReplaceAllStringFunc(v.Value, func(ref string) string {
		if ref == "$${" {
			return "${"
		}
		name := ref[2 : len(ref)-1]
		if !envName.MatchString(name) {
			p.addf(v.Line, "%s: %q is not a variable reference (${NAME}, NAME of letters, digits and _)", where, ref)
			ok = false
			return ""
		}
		val, set := p.lookupEnv(name)
		if !set {
			p.addf(v.Line, "%s: environment variable %s is not set", where, name)
			ok = false
		}
		return val
	})
	return out, ok
}

func (p *parser) str(v *yaml.Node, where string) string {
	s, _ := p.scalar(v, where)
	return s
}

func (p *parser) boolean(v *yaml.Node, where string) bool {
	s, ok := p.scalar(v, where)
	if !ok || s == "" {
		return false
	}
	switch strings.ToLower(s) {
	case "true", "yes", "on":
		return true
	case "false", "no", "off":
		return false
	}
	p.addf(v.Line, "%s: %q is not true or false", where, s)
	return false
}

func (p *parser) isInt(v *yaml.Node) bool {
	s, ok := p.quietScalar(v)
	if !ok {
		return false
	}
	_, err := strconv.Atoi(s)
	return err == nil
}

// quietScalar is scalar without reporting: for a second look at a value
// already reported on.
func (p *parser) quietScalar(v *yaml.Node) (string, bool) {
	saved := p.problems
	s, ok := p.scalar(v, "")
	p.problems = saved
	return s, ok && v.Kind == yaml.ScalarNode
}

func (p *parser) integer(v *yaml.Node, where string) int {
	s, ok := p.scalar(v, where)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		p.addf(v.Line, "%s: %q is not a whole number", where, s)
		return 0
	}
	return n
}

// literalHeaders notes the header values written in the file itself.
func (p *parser) literalHeaders(v *yaml.Node, where string) {
	if v.Kind != yaml.SequenceNode {
		return
	}
	for i, item := range v.Content {
		if _, value, ok := strings.Cut(item.Value, ":"); ok && strings.TrimSpace(value) != "" && !envPattern.MatchString(value) {
			p.literal = append(p.literal, fmt.Sprintf("line %d: %s[%d]: a header value", item.Line, where, i))
		}
	}
}

// ReadHeaderFile reads HTTP headers from a file, one "Name: value" a line
// (--http-header-file, http_headers_file); blank lines and lines starting
// with # are skipped. Like a secret file (ReadSecretFile) it is refused
// where group or others may read or change it. A bad line is named by its
// number, never shown: it may be all secret.
func ReadHeaderFile(file string) ([]string, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s: mode %04o lets group or others read or change the headers; chmod 600 it", file, perm)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if _, err := httpstore.ParseHeaders([]string{line}); err != nil {
			return nil, fmt.Errorf("%s:%d: not a \"Name: value\" header (a name of letters, digits and !#$%%&'*+-.^_`|~, a value without control characters)", file, i+1)
		}
		out = append(out, line)
	}
	redact.HeaderSecrets(out)
	return out, nil
}

// ExposedSecrets returns LiteralSecrets when the config file can be read by
// every user of the machine (mode o+r), which the daemon warns about; nil
// otherwise.
func ExposedSecrets(cfg *Config) []string {
	if len(cfg.LiteralSecrets) == 0 || cfg.Path == "" {
		return nil
	}
	fi, err := os.Stat(cfg.Path)
	if err != nil || fi.Mode().Perm()&0o004 == 0 {
		return nil
	}
	return cfg.LiteralSecrets
}

func (p *parser) headers(v *yaml.Node, where string) []string {
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		p.addf(v.Line, "%s: must be a list of \"Name: value\" strings, not %s", where, kindName(v))
		return nil
	}
	var out []string
	for i, item := range v.Content {
		w := fmt.Sprintf("%s[%d]", where, i)
		h, ok := p.scalar(item, w)
		if !ok {
			continue
		}
		name, _, found := strings.Cut(h, ":")
		if !found || strings.TrimSpace(name) == "" || strings.ContainsAny(name, " \t") {
			// Never echo the value: headers carry tokens.
			p.addf(item.Line, "%s: not a \"Name: value\" header", w)
			continue
		}
		out = append(out, h)
	}
	redact.HeaderSecrets(out)
	return out
}

// strings reads a list of plain strings, each passing check.
func (p *parser) strings(v *yaml.Node, where string, check func(string) error) []string {
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		p.addf(v.Line, "%s: must be a list of strings, not %s", where, kindName(v))
		return nil
	}
	var out []string
	for i, item := range v.Content {
		if s, ok := p.scalar(item, fmt.Sprintf("%s[%d]", where, i)); ok {
			if err := check(s); err != nil {
				p.addf(item.Line, "%s[%d]: %v", where, i, err)
				continue
			}
			out = append(out, s)
		}
	}
	return out
}

func isNull(v *yaml.Node) bool {
	return v.Kind == yaml.ScalarNode && v.Tag == "!!null"
}

func kindName(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(v) {
			return "nothing"
		}
		return fmt.Sprintf("the value %q", v.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}

// ParseSize reads a byte count for the limits: a whole number of bytes, or
// one with a unit (KiB, MiB, GiB, TiB in powers of 1024; KB, MB, GB, TB in
// powers of 1000), such as 4GiB or "128 MiB".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	mult := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || mult == 0 || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size such as 4GiB, 128MiB or a number of bytes", s)
	}
	return n * mult, nil
}
