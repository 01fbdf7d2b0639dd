package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeSecret writes a secret file readable by its owner only.
func writeSecret(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// notifyLine is the line of data holding "- url: u".
func notifyLine(t *testing.T, data []byte, u string) int {
	t.Helper()
	for i, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "- url: "+u {
			return i + 1
		}
	}
	t.Fatalf("no notify target %s", u)
	return 0
}

func TestTriggerTokenAndNotifyTargetsAreRead(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, dir, "token", "a-token-of-some-length\n")
	writeSecret(t, dir, "all.secret", "  secret-for-everyone-0001  \n")
	own := writeSecret(t, dir, "own.secret", "secret-of-mirror-b-0002")
	text := `listen: 127.0.0.1:9464
trigger_token_file: token
mirrors:
  - name: a
    source: /up/a
    sink: /down/a
  - name: b
    source: /up/b
    sink: /down/b
    notify:
      - url: http://127.0.0.1:8080/b
        secret_file: ` + own + `
notify:
  - url: https://user:pass@hooks.example.org/all?key=k
    secret_file: all.secret
`
	cfg, err := Parse([]byte(text), filepath.Join(dir, "fdl-mirror.yaml"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TriggerTokenFile != filepath.Join(dir, "token") || cfg.TriggerToken.Reveal() != "a-token-of-some-length" {
		t.Errorf("trigger token file %q", cfg.TriggerTokenFile)
	}
	all := NotifyTarget{URL: "https://user:pass@hooks.example.org/all?key=k", SecretFile: filepath.Join(dir, "all.secret"), Secret: "secret-for-everyone-0001", Line: 14}
	if !reflect.DeepEqual(cfg.Notify, []NotifyTarget{all}) || !reflect.DeepEqual(cfg.Mirrors[0].Notify, []NotifyTarget{all}) {
		t.Errorf("top-level notify %+v; mirror a's %+v", cfg.Notify, cfg.Mirrors[0].Notify)
	}
	b := cfg.Mirrors[1].Notify
	if len(b) != 2 || b[0].URL != all.URL || b[1].URL != "http://127.0.0.1:8080/b" || b[1].Secret.Reveal() != "secret-of-mirror-b-0002" || b[1].Line != 11 {
		t.Errorf("mirror b's notify: %+v", b)
	}
}

func TestSecretsPrintRedacted(t *testing.T) {
	const value = "the-secret-value-itself"
	target := NotifyTarget{URL: "http://x/", Secret: Secret(value)}
	cfg := Config{TriggerToken: Secret(value), Notify: []NotifyTarget{target}}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v %#v %s %q %x", cfg, cfg, cfg.TriggerToken, cfg.TriggerToken, cfg.TriggerToken), string(js)} {
		if strings.Contains(out, value) || !strings.Contains(out, Redacted) {
			t.Errorf("printed as %s", out)
		}
	}
}

func TestBadSecretFilesAreRefusedWithoutQuotingThem(t *testing.T) {
	dir := t.TempDir()
	const readable = "readable-by-all-0123456789"
	path := filepath.Join(dir, "open")
	if err := os.WriteFile(path, []byte(readable), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644) // whatever the umask
	writeSecret(t, dir, "short", "abc\n")
	writeSecret(t, dir, "two", "first-token-0123456789 second-token-0123456789\n")
	writeSecret(t, dir, "empty", "\n")
	group := writeSecret(t, dir, "group", "group-writable-0123456789")
	os.Chmod(group, 0o660)
	text := `listen: 127.0.0.1:9464
trigger_token_file: open
notify:
  - url: http://127.0.0.1:1/
    secret_file: short
  - url: http://127.0.0.1:1/
    secret_file: two
  - url: http://127.0.0.1:1/
    secret_file: empty
  - url: http://127.0.0.1:1/
    secret_file: group
  - url: http://127.0.0.1:1/
    secret_file: missing
mirrors:
  - name: a
    source: /up
    sink: /down
`
	_, err := Parse([]byte(text), filepath.Join(dir, "test.yaml"), env(nil))
	ps, ok := err.(Problems)
	if !ok {
		t.Fatalf("error %v", err)
	}
	for i := range ps {
		ps[i].File = "test.yaml"
	}
	wantProblem(t, ps, 2, "trigger_token_file", "mode 0644", "chmod 600")
	wantProblem(t, ps, 5, "notify[0].secret_file", "3 characters", "at least 16")
	wantProblem(t, ps, 7, "notify[1].secret_file", "more than one token")
	wantProblem(t, ps, 9, "notify[2].secret_file", "empty")
	wantProblem(t, ps, 11, "notify[3].secret_file", "mode 0660")
	wantProblem(t, ps, 13, "notify[4].secret_file", "no such file")
	if len(ps) != 6 {
		t.Errorf("want 6 problems, got:\n%v", ps)
	}
	for _, secret := range []string{readable, "abc", "first-token", "group-writable"} {
		if strings.Contains(ps.Error(), secret) {
			t.Errorf("a problem quotes the secret %q:\n%v", secret, ps)
		}
	}
}

func TestASecretFileItsGroupMayReadIsAccepted(t *testing.T) {
	path := writeSecret(t, t.TempDir(), "token", "group-readable-0123456789")
	if err := os.Chmod(path, 0o440); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadSecretFile(path); err != nil || s.Reveal() != "group-readable-0123456789" {
		t.Errorf("a 0440 secret file: %v", err)
	}
}

func TestNotifyTargetsAndTriggerNeedTheirParts(t *testing.T) {
	dir := t.TempDir()
	secret := writeSecret(t, dir, "s", "a-secret-0123456789")
	ps := problems(t, `trigger_token_file: `+secret+`
notify:
  - url: ftp://user:pw@example.org/
    secret_file: `+secret+`
  - secret_file: `+secret+`
  - url: https://example.org/
  - url: "https:///nohost?token=t0k3n"
    secret_file: `+secret+`
  - just-a-string
mirrors:
  - name: a
    source: /up
    sink: /down
    notify: {url: http://x/}
`, nil)
	wantProblem(t, ps, 1, "trigger_token_file", "set listen too")
	wantProblem(t, ps, 3, "notify[0].url", `scheme "ftp"`)
	wantProblem(t, ps, 5, "notify[1]", "no url")
	wantProblem(t, ps, 6, "notify[2]", "no secret_file")
	wantProblem(t, ps, 7, "notify[3].url", "no host")
	wantProblem(t, ps, 9, "notify[4]", "must be a mapping")
	wantProblem(t, ps, 14, `mirrors[0].notify`, "must be a list")
	if len(ps) != 7 {
		t.Errorf("want 7 problems, got:\n%v", ps)
	}
	if strings.Contains(ps.Error(), "pw@") || strings.Contains(ps.Error(), "t0k3n") {
		t.Errorf("a problem quotes a URL's credentials:\n%v", ps)
	}
}

func TestNotifySpoolNeedsAFolderThatExists(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Parse([]byte("notify_spool: notify.spool\nmirrors:\n  - name: a\n    source: /up\n    sink: /down\n"), filepath.Join(dir, "c.yaml"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NotifySpool != filepath.Join(dir, "notify.spool") {
		t.Errorf("notify_spool = %q, want it beside the config", cfg.NotifySpool)
	}
	ps := problems(t, "notify_spool: /nonexistent-folder/notify.spool\nmirrors:\n  - name: a\n    source: /up\n    sink: /down\n", nil)
	wantProblem(t, ps, 1, "notify_spool", "/nonexistent-folder", "not a folder that exists")
	ps = problems(t, "notify_spool: "+dir+"\nmirrors:\n  - name: a\n    source: /up\n    sink: /down\n", nil)
	wantProblem(t, ps, 1, "notify_spool", "not a regular file")
}

func TestAWhsecSecretMustBeStandardWebhooksBase64(t *testing.T) {
	dir := t.TempDir()
	good := writeSecret(t, dir, "good", "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
	notB64 := writeSecret(t, dir, "bad", "whsec_not*base64*at*all*0123")
	short := writeSecret(t, dir, "short", "whsec_MDEyMzQ1Njc4OWFiY2RlZg==")
	ps := problems(t, `notify:
  - url: http://127.0.0.1:1/
    secret_file: `+good+`
  - url: http://127.0.0.1:1/
    secret_file: `+notB64+`
  - url: http://127.0.0.1:1/
    secret_file: `+short+`
mirrors:
  - name: a
    source: /up
    sink: /down
`, nil)
	wantProblem(t, ps, 5, "notify[1].secret_file", "not standard base64")
	wantProblem(t, ps, 7, "notify[2].secret_file", "16 bytes", "24 to 64")
	if len(ps) != 2 {
		t.Errorf("want 2 problems, got:\n%v", ps)
	}
}

func TestTriggerSecretFileIsReadAndNeedsListen(t *testing.T) {
	dir := t.TempDir()
	secret := writeSecret(t, dir, "s", "trigger-secret-0123456789")
	cfg, err := Parse([]byte("listen: 127.0.0.1:0\ntrigger_secret_file: s\nmirrors:\n  - name: a\n    source: /up\n    sink: /down\n"), filepath.Join(dir, "c.yaml"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TriggerSecret.Reveal() != "trigger-secret-0123456789" || cfg.TriggerSecretFile != secret {
		t.Errorf("trigger secret %q from %q", cfg.TriggerSecret.Reveal(), cfg.TriggerSecretFile)
	}
	ps := problems(t, "trigger_secret_file: "+secret+"\nmirrors:\n  - name: a\n    source: /up\n    sink: /down\n", nil)
	wantProblem(t, ps, 1, "trigger_secret_file", "set listen too")
	bad := writeSecret(t, dir, "bad", "whsec_not*base64*at*all*0123")
	ps = problems(t, "listen: 127.0.0.1:0\ntrigger_secret_file: "+bad+"\nmirrors:\n  - name: a\n    source: /up\n    sink: /down\n", nil)
	wantProblem(t, ps, 2, "trigger_secret_file", "not standard base64")
}
