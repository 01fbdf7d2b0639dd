package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
)

// redirectedUpstream serves dir over HTTP from one server, reached only
// through another that answers every request with a 302 to it: two
// origins on 127.0.0.1, as a CDN in front of a repository. It returns the
// address to give fdl-mirror (the redirecting one).
func redirectedUpstream(t *testing.T, dir string) string {
	t.Helper()
	files := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(files.Close)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, files.URL+r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(front.Close)
	return front.URL + "/"
}

// status, verify and prune read an HTTP(S) upstream as sync does: a
// redirect to another origin is refused unless --http-allow-redirect names
// its host, and then followed.
func TestStatusVerifyPruneTakeHTTPAllowRedirect(t *testing.T) {
	r, up, sink := prunedScenario(t)
	addr := redirectedUpstream(t, up)

	if res := run(t, "status", addr, sink); res.code != 1 {
		t.Errorf("status through a redirect to another origin: exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
	}
	if res := run(t, "status", "--http-allow-redirect", "127.0.0.1", addr, sink); res.code != 0 {
		t.Errorf("status with the host allowed: exit %d, want 0\n%s%s", res.code, res.stdout, res.stderr)
	}

	if res := run(t, "verify", addr); res.code != 1 {
		t.Errorf("verify through a redirect to another origin: exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
	}
	if res := run(t, "verify", "--http-allow-redirect", "127.0.0.1", addr); res.code != 0 {
		t.Errorf("verify with the host allowed: exit %d, want 0\n%s%s", res.code, res.stdout, res.stderr)
	}

	before := fdltest.States(t, sink)
	res := run(t, "prune", addr, sink)
	if res.code != 1 {
		t.Errorf("prune through a redirect to another origin: exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
	}
	assertUntouched(t, sink, before, res)
	if res := run(t, "prune", "--http-allow-redirect", "127.0.0.1", addr, sink); res.code != 0 {
		t.Fatalf("prune with the host allowed: exit %d, want 0\n%s%s", res.code, res.stdout, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(sink, "versions", r.branches["refs/heads/gone"], "version.json")); !os.IsNotExist(err) {
		t.Errorf("the withdrawn version is still in the mirror after the prune: %v", err)
	}

	// A bad host is a usage error on each, as on sync.
	for _, cmd := range []string{"status", "verify", "prune"} {
		if res := run(t, cmd, "--http-allow-redirect", "http://x/", addr, sink); res.code != 2 {
			t.Errorf("%s --http-allow-redirect http://x/: exit %d, want 2", cmd, res.code)
		}
	}
}

// prune reads the mirror's catalogs under the mirror's catalog limits
// (--catalog-*), not the defaults: with a file limit below what the
// catalogs list, the files of a removed version's catalog are unknown and
// stay (keeping too much is safe), and the log names the limit.
func TestPruneReadsCatalogsUnderTheCatalogLimits(t *testing.T) {
	r, up, sink := prunedScenario(t)
	gone := r.branches["refs/heads/gone"]
	rep, res := pruneJSON(t, "--dry-run", up, sink)
	if res.code != 0 || !containsAll(rep.DataFilesRemoved, r.only[gone]) {
		t.Fatalf("with the default limits: exit %d, would remove %v, want %v among them", res.code, rep.DataFilesRemoved, r.only[gone])
	}
	rep, res = pruneJSON(t, "--dry-run", "--catalog-max-files", "1", up, sink)
	if res.code != 0 {
		t.Fatalf("prune --catalog-max-files 1: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if len(rep.DataFilesRemoved) != 0 {
		t.Errorf("with --catalog-max-files 1 the prune would remove data files %v: the catalogs naming them were over the limit", rep.DataFilesRemoved)
	}
	if !strings.Contains(res.stderr, "catalog_max_files") {
		t.Errorf("the log does not name the limit:\n%s", res.stderr)
	}
}

func containsAll(list, want []string) bool {
	have := map[string]bool{}
	for _, s := range list {
		have[s] = true
	}
	for _, s := range want {
		if !have[s] {
			return false
		}
	}
	return len(want) > 0
}
