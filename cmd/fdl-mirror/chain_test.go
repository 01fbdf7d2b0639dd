package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// A mirror of a mirror of a mirror, chained by configuration alone: A's
// notify url is B's trigger, B's is C's, each signed with the next one's
// trigger_secret_file. Every mirror checks the versions' signatures
// against the publisher's key.
func TestAChainOfThreeMirrorsFollowsThePublisherInSeconds(t *testing.T) {
	parent := t.TempDir()
	key := newKey(t, "ed25519", "publisher@example.org")
	trusted := allowedSigners(t, `namespaces="fdl"`, key)
	up := filepath.Join(parent, "upstream")
	repo := gen(t, up, generate.Options{Versions: 2, Tags: true, Signer: key.Signer(t, "fdl")})

	names := []string{"a", "b", "c"}
	addrs := map[string]string{}
	sinks := map[string]string{}
	for _, n := range names {
		addrs[n] = freeAddr(t)
		sinks[n] = filepath.Join(parent, "mirror-"+n)
	}
	secretOf := func(n string) string { return "chain-secret-of-" + n + "-0123456789abcdef" }
	configs := map[string]string{}
	for i, n := range names {
		dir := filepath.Join(parent, "conf-"+n)
		os.MkdirAll(dir, 0o755)
		source := up
		if i > 0 {
			source = sinks[names[i-1]]
		}
		var b strings.Builder
		fmt.Fprintf(&b, "listen: %s\ntrigger_token_file: %s\ntrigger_secret_file: %s\n", addrs[n],
			secretFile(t, dir, "trigger.token", triggerToken), secretFile(t, dir, "trigger.secret", secretOf(n)))
		if i+1 < len(names) {
			next := names[i+1]
			fmt.Fprintf(&b, "notify:\n  - url: http://%s/mirrors/%s/sync\n    secret_file: %s\n", addrs[next], next,
				secretFile(t, dir, "next.secret", secretOf(next)))
		}
		fmt.Fprintf(&b, "mirrors:\n  - name: %s\n    source: %s\n    sink: %s\n    schedule: \"@every 1h\"\n    trusted_signers: %s\n    require_signatures: true\n",
			n, source, sinks[n], trusted)
		configs[n] = filepath.Join(dir, "fdl-mirror.yaml")
		if err := os.WriteFile(configs[n], []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"c", "b", "a"} {
		startDaemon(t, configs[n], addrs[n])
	}

	// The publisher triggers A, as after any push.
	began := time.Now()
	if code, body := trigger(t, "POST", addrs["a"], "a", "Bearer "+triggerToken); code != http.StatusAccepted {
		t.Fatalf("trigger A: %d %s", code, body)
	}
	waitUntil(t, "C to hold every upstream ref", 30*time.Second, func() bool {
		return fmt.Sprint(mirrorRefs(t, sinks["c"])) == fmt.Sprint(repo.Refs)
	})
	t.Logf("a version published at A's upstream reached C %s after the trigger of A", time.Since(began).Round(time.Millisecond))
	for _, id := range repo.Versions {
		if _, err := os.Stat(filepath.Join(sinks["c"], "versions", id, "version.json.sig")); err != nil {
			t.Errorf("version %s: the publisher's signature is not in C", id)
		}
	}
	// B and C were triggered by events, not by a token.
	for _, n := range []string{"b", "c"} {
		m := scrape(t, addrs[n])
		if got := m[`fdl_mirror_triggers_total{mirror="`+n+`",result="started"}`]; got < 1 {
			t.Errorf("%s: triggers started %v", n, got)
		}
	}
}
