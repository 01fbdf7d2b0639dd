package redact

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"/srv/mirror":                                                  "/srv/mirror",
		"https://alice:s3cretPW@host/repo/":                            "https://alice:REDACTED@host/repo/",
		"https://ghp_tokenasuser@host/repo/":                           "https://REDACTED@host/repo/",
		"https://host/repo/?token=abc&sig=def":                         "https://host/repo/?token=REDACTED&sig=REDACTED",
		"https://host/r/?X-Amz-Signature=abc&x-goog-credential=d":      "https://host/r/?X-Amz-Signature=REDACTED&x-goog-credential=REDACTED",
		"s3://b/p/?endpoint=https://k:s@h:9000&region=r":               "s3://b/p/?endpoint=https%3A%2F%2Fk%3AREDACTED%40h%3A9000&region=r",
		"s3://b/p/?endpoint=http://127.0.0.1:9000&use_path_style=true": "s3://b/p/?endpoint=http://127.0.0.1:9000&use_path_style=true",
		"gs://bucket/prefix/#access_token=abc":                         "gs://bucket/prefix/",
		"https://u:p@host/%zz?token=x":                                 "https://u:REDACTED@host/%zz?token=REDACTED",
		"https://host:8443":                                            "https://host:8443",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestURLMasksEveryCredentialParam checks the documented list, in any case,
// also where url.Parse would refuse the address.
func TestURLMasksEveryCredentialParam(t *testing.T) {
	for _, p := range CredentialParams {
		for _, key := range []string{p, strings.ToUpper(p), strings.ToLower(p)} {
			for _, addr := range []string{
				"https://host/repo/?" + key + "=SECRETVALUE",
				"https://host/repo/?a=1&" + key + "=SECRETVALUE#frag",
				"https://host/%zz/?" + key + "=SECRETVALUE",
			} {
				got := URL(addr)
				if strings.Contains(got, "SECRETVALUE") || !strings.Contains(got, key+"="+Mask) {
					t.Errorf("URL(%q) = %q", addr, got)
				}
			}
		}
	}
}

func TestText(t *testing.T) {
	msg := Text(`GET https://u:p@host/refs.json?X-Amz-Credential=AK: 403 Forbidden; s3://b/k ok`)
	if want := `GET https://u:REDACTED@host/refs.json?X-Amz-Credential=REDACTED: 403 Forbidden; s3://b/k ok`; msg != want {
		t.Errorf("Text = %q, want %q", msg, want)
	}
	// As JSON writes it: & as \u0026, the URL in quotes.
	addr := "https://alice:pw@host/repo/?a=1&token=SECRETVALUE"
	doc, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("Get %q: refused", addr)})
	got := Text(string(doc))
	if strings.Contains(got, "SECRETVALUE") || strings.Contains(got, ":pw@") {
		t.Errorf("Text(%s) = %s", doc, got)
	}
	var back map[string]string
	if err := json.Unmarshal([]byte(got), &back); err != nil {
		t.Errorf("redacted JSON no longer parses: %v: %s", err, got)
	}
}

func TestSecret(t *testing.T) {
	Secret("Bearer-abc/def+ghi", "short")
	got := Text("401 token Bearer-abc/def+ghi refused; escaped Bearer-abc%2Fdef%2Bghi; short stays")
	if strings.Contains(got, "abc/def") || strings.Contains(got, "abc%2Fdef") || !strings.Contains(got, "short stays") {
		t.Errorf("Text = %q", got)
	}
	AddressSecrets("https://bob:p%40ssword1@host/?sig=sigvalue123&region=eu-west-1")
	got = Text("p@ssword1 p%40ssword1 sigvalue123 eu-west-1")
	if want := "REDACTED REDACTED REDACTED eu-west-1"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

func TestError(t *testing.T) {
	base := &url.Error{Op: "Get", URL: "https://host/r?token=SECRETVALUE", Err: errors.New("connection refused")}
	err := Error(fmt.Errorf("reading: %w", base))
	if strings.Contains(err.Error(), "SECRETVALUE") {
		t.Errorf("Error() = %q", err)
	}
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		t.Error("the url.Error is no longer found by errors.As")
	}
	if Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
	if Error(err) != err {
		t.Error("a redacted error is wrapped twice")
	}
}

func TestInert(t *testing.T) {
	for in, want := range map[string]string{
		"403 Forbidden":                        "403 Forbidden",
		"403 Forbidden\x1b[2J\x1b]0;pwned\x07": `403 Forbidden\x1b[2J\x1b]0;pwned\x07`,
		"a\nREFUSED fake\r":                    `a\nREFUSED fake\r`,
		"\u009b31m \u202egnp.exe é":            `\u009b31m \u202egnp.exe é`,
		"bad \xff byte":                        `bad \xff byte`,
	} {
		if got := Inert(in); got != want {
			t.Errorf("Inert(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestURLOfAnAddressThatDoesNotParse: a / in a password makes url.Parse
// read the rest as a port; all of the password is masked all the same.
func TestURLOfAnAddressThatDoesNotParse(t *testing.T) {
	for in, want := range map[string]string{
		"https://alice:s3cr/et-pw@host/repo/?token=x": "https://alice:REDACTED@host/repo/?token=REDACTED",
		"https://host:8443/@scope/pkg/":               "https://host:8443/@scope/pkg/", // parses: the @ is the path's
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
	if c := Credentials("https://alice:s3cr/et-pw@host/repo/"); len(c) != 1 || c[0] != "s3cr/et-pw" {
		t.Errorf("Credentials = %q", c)
	}
}
