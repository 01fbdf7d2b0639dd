package verify

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// AllowedSigners is a parsed OpenSSH allowed_signers file (ssh-keygen(1),
// ALLOWED SIGNERS), parsed as OpenSSH 9 does.
type AllowedSigners struct {
	Name    string // the file it was read from, for messages
	Signers []*AllowedSigner
}

// AllowedSigner is one line of an allowed_signers file.
type AllowedSigner struct {
	Line       int
	Principals string // comma-separated patterns, as written
	Key        ssh.PublicKey
	// Namespaces are the patterns of the namespaces= option; nil means any.
	Namespaces []string
	// ValidAfter and ValidBefore bound when the key may be used; zero means
	// no bound.
	ValidAfter, ValidBefore time.Time

	validAfterText, validBeforeText string // as written, for messages
}

// LoadAllowedSigners reads an allowed_signers file.
func LoadAllowedSigners(path string) (*AllowedSigners, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("allowed signers: %w", err)
	}
	defer f.Close()
	return ParseAllowedSigners(f, path)
}

// ParseAllowedSigners parses an allowed_signers file; name is used in
// errors, which name the line that could not be parsed.
func ParseAllowedSigners(r io.Reader, name string) (*AllowedSigners, error) {
	as := &AllowedSigners{Name: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimLeft(sc.Text(), " \t\r\n")
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSignerLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		s.Line = n
		as.Signers = append(as.Signers, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", name, n+1, err)
	}
	return as, nil
}

// keyTypes are the key type names OpenSSH knows; a line's second field is
// options unless it is one of these. DSA stays by name (x/crypto deprecates
// its constants): a DSA line is read as a key and then refused as one, not
// misread as options.
var keyTypes = map[string]bool{
	ssh.KeyAlgoED25519: true, ssh.KeyAlgoRSA: true, ssh.KeyAlgoECDSA256: true,
	ssh.KeyAlgoECDSA384: true, ssh.KeyAlgoECDSA521: true, "ssh-dss": true,
	ssh.KeyAlgoSKED25519: true, ssh.KeyAlgoSKECDSA256: true,
	ssh.CertAlgoED25519v01: true, ssh.CertAlgoRSAv01: true, ssh.CertAlgoECDSA256v01: true,
	ssh.CertAlgoECDSA384v01: true, ssh.CertAlgoECDSA521v01: true, "ssh-dss-cert-v01@openssh.com": true,
	ssh.CertAlgoSKED25519v01: true, ssh.CertAlgoSKECDSA256v01: true,
}

// parseSignerLine parses "principals [options] keytype base64 [comment]".
func parseSignerLine(line string) (*AllowedSigner, error) {
	principals, rest, err := principalsField(line)
	if err != nil {
		return nil, err
	}
	rest = strings.TrimLeft(rest, " \t\r")
	var opts string
	if f := strings.Fields(rest); len(f) == 0 || !keyTypes[f[0]] {
		if opts, rest, err = optionsField(rest); err != nil {
			return nil, err
		}
		rest = strings.TrimLeft(rest, " \t\r")
	}
	if rest == "" {
		return nil, errors.New("missing key")
	}
	key, err := parseKey(rest)
	if err != nil {
		return nil, err
	}
	s := &AllowedSigner{Principals: principals, Key: key}
	if err := s.parseOptions(opts); err != nil {
		return nil, err
	}
	return s, nil
}

// principalsField splits off the first field. Like OpenSSH, a double quote
// starts a quoted part that may hold spaces and ends the field.
func principalsField(line string) (field, rest string, err error) {
	i := strings.IndexAny(line, " \t\r\"")
	switch {
	case i < 0:
		return "", "", errors.New("missing key")
	case line[i] != '"':
		return line[:i], line[i:], nil
	}
	end := strings.IndexByte(line[i+1:], '"')
	if end < 0 {
		return "", "", errors.New("principals: missing end quote")
	}
	return line[:i] + line[i+1:i+1+end], line[i+1+end+1:], nil
}

// optionsField splits off the options: up to the first space or tab outside
// double quotes.
func optionsField(s string) (opts, rest string, err error) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '"':
			i++
		case s[i] == '"':
			quoted = !quoted
		case !quoted && (s[i] == ' ' || s[i] == '\t'):
			return s[:i], s[i:], nil
		}
	}
	if quoted {
		return "", "", errors.New("options: missing end quote")
	}
	return s, "", nil
}

// parseKey parses "keytype base64 [comment]".
func parseKey(s string) (ssh.PublicKey, error) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return nil, fmt.Errorf("invalid key %q", s)
	}
	if !signingKeyTypes[f[0]] {
		return nil, fmt.Errorf("unsupported key type %q", f[0])
	}
	blob, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil {
		return nil, fmt.Errorf("invalid %s key: %w", f[0], err)
	}
	key, err := ssh.ParsePublicKey(blob)
	if err != nil {
		return nil, fmt.Errorf("invalid %s key: %w", f[0], err)
	}
	if key.Type() != f[0] {
		return nil, fmt.Errorf("key type mismatch: %s key labelled %s", key.Type(), f[0])
	}
	return key, nil
}

// parseOptions parses comma-separated options as OpenSSH's sshsigopt_parse:
// names are case-insensitive and values must be double-quoted.
func (s *AllowedSigner) parseOptions(opts string) error {
	for opts != "" {
		name, hasValue := opts, false
		if i := strings.IndexAny(opts, "=,"); i >= 0 {
			name, hasValue = opts[:i], opts[i] == '='
		}
		if hasValue {
			opts = opts[len(name)+1:]
		} else {
			opts = opts[len(name):]
		}
		var err error
		switch name = strings.ToLower(name); {
		case name == "cert-authority":
			return errors.New("cert-authority is not supported: list the signers' own keys")
		case !hasValue || (name != "namespaces" && name != "valid-after" && name != "valid-before"):
			return fmt.Errorf("unknown option %q", name)
		case name == "namespaces":
			if s.Namespaces != nil {
				return errors.New(`multiple "namespaces" options`)
			}
			var v string
			if v, opts, err = dequote(opts); err != nil {
				return fmt.Errorf("namespaces: %w", err)
			}
			s.Namespaces = strings.Split(v, ",")
		case name == "valid-after":
			if s.validAfterText != "" {
				return errors.New(`multiple "valid-after" options`)
			}
			if s.validAfterText, opts, err = dequote(opts); err == nil {
				s.ValidAfter, err = parseSignerTime(s.validAfterText)
			}
			if err != nil {
				return fmt.Errorf("valid-after: %w", err)
			}
		case name == "valid-before":
			if s.validBeforeText != "" {
				return errors.New(`multiple "valid-before" options`)
			}
			if s.validBeforeText, opts, err = dequote(opts); err == nil {
				s.ValidBefore, err = parseSignerTime(s.validBeforeText)
			}
			if err != nil {
				return fmt.Errorf("valid-before: %w", err)
			}
		}
		if opts == "" {
			break
		}
		if opts[0] != ',' {
			return fmt.Errorf("unexpected %q after option %s", opts, name)
		}
		if opts = opts[1:]; opts == "" {
			return errors.New("options end with a comma")
		}
	}
	return nil
}

// dequote reads a double-quoted value in which \" stands for a quote.
func dequote(s string) (value, rest string, err error) {
	if s == "" || s[0] != '"' {
		return "", "", errors.New("value must be double-quoted")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '"':
			return b.String(), s[i+1:], nil
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '"':
			i++
		}
		b.WriteByte(s[i])
	}
	return "", "", errors.New("missing end quote")
}

// parseSignerTime parses YYYYMMDD, YYYYMMDDHHMM or YYYYMMDDHHMMSS, in local
// time unless suffixed with Z (or UTC).
func parseSignerTime(v string) (time.Time, error) {
	s, loc := v, time.Local
	switch {
	case len(s) > 1 && strings.EqualFold(s[len(s)-1:], "Z"):
		s, loc = s[:len(s)-1], time.UTC
	case len(s) > 3 && strings.EqualFold(s[len(s)-3:], "UTC"):
		s, loc = s[:len(s)-3], time.UTC
	}
	layout := map[int]string{8: "20060102", 12: "200601021504", 14: "20060102150405"}[len(s)]
	if layout == "" {
		return time.Time{}, fmt.Errorf("invalid time %q, want YYYYMMDD[HHMM[SS]][Z]", v)
	}
	t, err := time.ParseInLocation(layout, s, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid time %q: %w", v, err)
	}
	// OpenSSH takes 0 for "no bound" and refuses times before 1970.
	if t.Unix() <= 0 {
		return time.Time{}, fmt.Errorf("invalid time %q: not after 1970", v)
	}
	return t, nil
}

// refusal says why s may not sign for namespace at now: a Sig* reason and
// its detail, or "" if it may.
func (s *AllowedSigner) refusal(namespace string, now time.Time) (reason string, detail error) {
	if s.Namespaces != nil && !matchPatternList(namespace, s.Namespaces) {
		return SigWrongNamespace, fmt.Errorf("key allowed only for namespaces %q", strings.Join(s.Namespaces, ","))
	}
	// Compared in whole seconds, as OpenSSH does.
	if !s.ValidAfter.IsZero() && now.Unix() < s.ValidAfter.Unix() {
		return SigKeyNotYetValid, errors.New("valid-after " + s.validAfterText)
	}
	if !s.ValidBefore.IsZero() && now.Unix() > s.ValidBefore.Unix() {
		return SigKeyExpired, errors.New("valid-before " + s.validBeforeText)
	}
	return "", nil
}

// matchPatternList matches s against OpenSSH patterns (ssh_config(5),
// PATTERNS): true if some pattern matches and no negated (!) one does.
func matchPatternList(s string, patterns []string) bool {
	matched := false
	for _, p := range patterns {
		if neg, ok := strings.CutPrefix(p, "!"); ok {
			if matchPattern(s, neg) {
				return false
			}
		} else if matchPattern(s, p) {
			matched = true
		}
	}
	return matched
}

// matchPattern matches s against a pattern of literal bytes, * (any run)
// and ? (any one byte).
func matchPattern(s, p string) bool {
	// Iterative glob with one backtrack point: linear, whatever the input.
	si, pi, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			si++
			pi++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			mark++
			si, pi = mark, star+1
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
