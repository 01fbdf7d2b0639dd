package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// catalog_formats as the spec's fdl.json example writes it, mirrored over
// HTTP, which cannot list: the alternate catalogs are found by the names
// the entries give, catalogs/ducklake-<version>.duckdb, and the other
// reading, catalogs/<version>.duckdb.
func TestSyncOverHTTPFetchesTheSpecsCatalogFormats(t *testing.T) {
	_, up, sink := layout(t)
	repo := gen(t, up, generate.Options{Versions: 2})
	settings := filepath.Join(up, "fdl.json")
	var doc map[string]any
	raw, err := os.ReadFile(settings)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["catalog_formats"] = []map[string]string{{"ducklake": "1.1"}, {"ducklake": "1.0", "until": "2027-03-31"}}
	raw, _ = json.MarshalIndent(doc, "", "  ")
	writeFile(t, settings, string(raw)+"\n")

	// Version 1 carries both formats under the ducklake- names; version 2
	// one of them under the bare version. The bytes are the main catalog's
	// (an alternate catalog lists the same files here).
	alternates := []string{
		"versions/" + repo.Versions[0] + "/catalogs/ducklake-1.1.duckdb",
		"versions/" + repo.Versions[0] + "/catalogs/ducklake-1.0.duckdb",
		"versions/" + repo.Versions[1] + "/catalogs/1.0.duckdb",
	}
	for _, name := range alternates {
		id := filepath.Base(filepath.Dir(filepath.Dir(name)))
		b, err := os.ReadFile(filepath.Join(up, "versions", id, "ducklake.duckdb"))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(up, filepath.FromSlash(name)), string(b))
	}

	web := testserver.HTTP(t, up)
	rep, res := syncJSON(t, web.URL, sink)
	if res.code != 0 || !rep.OK() {
		t.Fatalf("exit %d: %+v\n%s", res.code, rep.Refused, res.stderr)
	}
	files := fdltest.Files(t, sink)
	for _, name := range alternates {
		if _, ok := files[name]; !ok {
			t.Errorf("mirror lacks %s", name)
		}
	}
	fdltest.AssertMirrored(t, up, sink, nil)
	if v := run(t, "verify", sink); v.code != 0 {
		t.Errorf("verify: exit %d\n%s", v.code, v.stdout)
	}
}
