package config

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fdl-mirror/fdl-mirror/internal/redact"
)

// Secret is a token or a key read from a secret file. It prints as
// REDACTED (through fmt, and as JSON or YAML) so that a config logged
// or printed by mistake shows none; Reveal gives the value to the one place
// that needs it.
type Secret string

// Redacted is how a Secret prints.
const Redacted = "REDACTED"

func (s Secret) String() string                { return Redacted }
func (s Secret) Format(f fmt.State, verb rune) { io.WriteString(f, Redacted) }
func (s Secret) MarshalText() ([]byte, error)  { return []byte(Redacted), nil }

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// Bounds on a secret file: one token of printable ASCII without spaces,
// long enough that guessing it is hopeless (a 16-character token from
// `openssl rand -hex 16` is 64 bits at the least; use 32 bytes).
const (
	MinSecretLen = 16
	MaxSecretLen = 4096
)

// NotifyTarget is one receiver of notifications: an HTTP(S) URL, and the
// secret the body's HMAC is made with.
type NotifyTarget struct {
	URL        string
	SecretFile string // absolute, or made so against the config file's folder
	Secret     Secret
	Line       int
}

// ReadSecretFile reads a secret file: one token, refused where others may
// read the file or anyone but its owner change it, and where it is empty,
// too short or holds more than one token. Group read is allowed: a file
// of root's that the service's group reads (systemd), or a Kubernetes
// Secret mounted with fsGroup (0440), is how services get their secrets.
func ReadSecretFile(path string) (Secret, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o004 != 0 || perm&0o022 != 0 {
		return "", fmt.Errorf("%s: mode %04o lets others read the secret, or someone other than its owner change it; chmod 600 it (640 for a group only the daemon's user is in)", path, perm)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, MaxSecretLen+2))
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(raw))
	switch {
	case len(raw) > MaxSecretLen+1:
		return "", fmt.Errorf("%s: longer than %d bytes; it must hold one token", path, MaxSecretLen)
	case token == "":
		return "", fmt.Errorf("%s: empty; it must hold one token", path)
	case strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
		// Never quote the content: it is the secret.
		return "", fmt.Errorf("%s: holds more than one token, or a character other than printable ASCII", path)
	case len(token) < MinSecretLen:
		return "", fmt.Errorf("%s: %d characters; a token needs at least %d (e.g. openssl rand -hex 32)", path, len(token), MinSecretLen)
	}
	return Secret(token), nil
}

// secretFile reads the secret file a config value names, relative paths
// taken from the config file's folder, and reports what is wrong with it.
func (p *parser) secretFile(v *yaml.Node, where string) (string, Secret) {
	path := p.str(v, where)
	if path == "" {
		p.addf(v.Line, "%s: empty; give the path of a file holding the secret", where)
		return "", ""
	}
	if !filepath.IsAbs(path) && p.file != "" {
		path = filepath.Join(filepath.Dir(p.file), path)
	}
	s, err := ReadSecretFile(path)
	if err != nil {
		p.addf(v.Line, "%s: %v", where, err)
	}
	// Masked in every message, should any quote it.
	redact.Secret(s.Reveal())
	return path, s
}

// notifyTargets reads a notify: list of {url, secret_file}.
func (p *parser) notifyTargets(v *yaml.Node, where string) []NotifyTarget {
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		p.addf(v.Line, "%s: must be a list of {url, secret_file}, not %s", where, kindName(v))
		return nil
	}
	var out []NotifyTarget
	for i, item := range v.Content {
		w := fmt.Sprintf("%s[%d]", where, i)
		if item.Kind != yaml.MappingNode {
			p.addf(item.Line, "%s: must be a mapping (url:, secret_file:), not %s", w, kindName(item))
			continue
		}
		t := NotifyTarget{Line: item.Line}
		var urlNode, secretNode *yaml.Node
		p.fields(item, w, func(key string, k, v *yaml.Node) bool {
			switch key {
			case "url":
				urlNode = v
				t.URL = p.str(v, w+".url")
			case "secret_file":
				secretNode = v
				t.SecretFile, t.Secret = p.secretFile(v, w+".secret_file")
				p.checkWebhookSecret(v, w+".secret_file", t.Secret)
			default:
				return false
			}
			return true
		})
		if urlNode == nil {
			p.addf(item.Line, "%s: no url", w)
		} else if err := checkNotifyURL(t.URL); err != nil {
			p.addf(urlNode.Line, "%s.url: %v", w, err)
		}
		redact.AddressSecrets(t.URL)
		if secretNode == nil {
			p.addf(item.Line, "%s: no secret_file; every notification is signed with its secret", w)
		}
		out = append(out, t)
	}
	return out
}

// checkNotifyURL accepts an absolute http or https URL. The error never
// quotes the URL: its user information or query may be a credential.
func checkNotifyURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q: use http:// or https://", u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("no host")
	}
	return nil
}

// triggerToken reads trigger_token_file.
func (p *parser) triggerToken(v *yaml.Node, cfg *Config) {
	cfg.TriggerTokenFile, cfg.TriggerToken = p.secretFile(v, "trigger_token_file")
	p.triggerLine = v.Line
}

// finishNotify gives every mirror the top-level notify targets ahead of its
// own, and refuses a trigger token with nowhere to serve the trigger.
func (p *parser) finishNotify(cfg *Config) {
	for i := range cfg.Mirrors {
		cfg.Mirrors[i].Notify = append(slices.Clone(cfg.Notify), cfg.Mirrors[i].Notify...)
	}
	if cfg.TriggerTokenFile != "" && cfg.Listen == "" {
		p.addf(p.triggerLine, "trigger_token_file: the trigger is served on the listen address; set listen too")
	}
	if cfg.TriggerSecretFile != "" && cfg.Listen == "" {
		p.addf(p.triggerSecretLine, "trigger_secret_file: the trigger is served on the listen address; set listen too")
	}
}

// spoolFile reads notify_spool: a file in a folder that exists, relative
// paths taken from the config file's folder.
func (p *parser) spoolFile(v *yaml.Node, where string) string {
	path := p.str(v, where)
	if path == "" {
		p.addf(v.Line, "%s: empty; give the path of a file to keep unsent notifications in, or leave it out", where)
		return ""
	}
	if !filepath.IsAbs(path) && p.file != "" {
		path = filepath.Join(filepath.Dir(p.file), path)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
		p.addf(v.Line, "%s: %s: its folder %s is not a folder that exists", where, path, filepath.Dir(path))
	} else if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		p.addf(v.Line, "%s: %s: not a regular file", where, path)
	}
	return path
}

// checkWebhookSecret refuses a secret written as Standard Webhooks
// serializes one ("whsec_" and base64) whose base64 does not decode to
// 24 to 64 bytes, the spec's bounds: its receivers' libraries would key
// the HMAC differently, or refuse it.
func (p *parser) checkWebhookSecret(v *yaml.Node, where string, s Secret) {
	rest, ok := strings.CutPrefix(s.Reveal(), "whsec_")
	if !ok {
		return
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	switch {
	case err != nil:
		p.addf(v.Line, "%s: starts with whsec_ but the rest is not standard base64; a Standard Webhooks secret is whsec_ and the base64 of 24 to 64 random bytes", where)
	case len(key) < 24 || len(key) > 64:
		p.addf(v.Line, "%s: a whsec_ secret of %d bytes; Standard Webhooks wants 24 to 64 (e.g. echo whsec_$(openssl rand -base64 32))", where, len(key))
	}
}
