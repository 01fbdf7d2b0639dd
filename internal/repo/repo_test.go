package repo

import (
	"reflect"
	"strings"
	"testing"
)

func TestCheckVersionIDAcceptsOneSegmentOfLowercaseHexAndDashes(t *testing.T) {
	for _, id := range []string{"019a2b3c-0000-7000-8000-000000000000", "v1", "a-b-c"} {
		if err := CheckVersionID(id); err != nil {
			t.Errorf("%q refused: %v", id, err)
		}
	}
	for _, id := range []string{"", "a/b", "..", ".", "A1", "a b", "a\x00", "../x", "a_b", "a.b"} {
		if err := CheckVersionID(id); err == nil {
			t.Errorf("%q accepted", id)
		}
	}
}

func TestCheckRefNameFollowsTheProjectRules(t *testing.T) {
	good := map[string]RefKind{
		"refs/heads/main": Branch, "refs/heads/team/x.y_z-1": Branch,
		"refs/tags/v1.0": Tag, "refs/requests/42": Request,
	}
	for name, kind := range good {
		got, err := CheckRefName(name)
		if err != nil || got != kind {
			t.Errorf("%q: kind %v, err %v; want %v", name, got, err, kind)
		}
	}
	for _, name := range []string{
		"refs/heads/", "refs/heads//x", "refs/heads/../x", "refs/heads/./x", "refs/heads/x/",
		"/refs/heads/x", "refs/other/x", "refs/heads/Main", "refs/heads/a b", "HEAD", "refs/tags/v1\n",
		"refs/heads/../../../../escaped",
	} {
		if _, err := CheckRefName(name); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
}

func TestParseRefFileTakesOneIDAndAnOptionalNewline(t *testing.T) {
	for content, want := range map[string]string{"abc\n": "abc", "abc": "abc"} {
		if got, err := ParseRefFile("refs/heads/x", []byte(content)); err != nil || got != want {
			t.Errorf("%q: %q, %v", content, got, err)
		}
	}
	for _, content := range []string{"", "\n", "abc\n\n", " abc", "abc def", "../../etc", "a/b\n"} {
		if _, err := ParseRefFile("refs/heads/x", []byte(content)); err == nil || !strings.Contains(err.Error(), "refs/heads/x") {
			t.Errorf("%q: accepted or unnamed: %v", content, err)
		}
	}
}

func TestParseRefsJSONRefusesBadRefsOneByOne(t *testing.T) {
	refs, bad, err := ParseRefsJSON([]byte(`{"refs/heads/main": "a1", "refs/heads/../x": "a1", "refs/tags/t": "a/b", "refs/tags/n": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs["refs/heads/main"] != "a1" {
		t.Errorf("refs %v", refs)
	}
	var names []string
	for _, b := range bad {
		names = append(names, b.Ref)
	}
	if strings.Join(names, " ") != "refs/heads/../x refs/tags/n refs/tags/t" {
		t.Errorf("refused %v", names)
	}
}

func TestParseRefsJSONAcceptsTheNestedForm(t *testing.T) {
	refs, bad, err := ParseRefsJSON([]byte(`{"refs": {"refs/heads/main": "a1"}}`))
	if err != nil || len(bad) != 0 || refs["refs/heads/main"] != "a1" {
		t.Errorf("%v %v %v", refs, bad, err)
	}
	if _, _, err := ParseRefsJSON([]byte(`{"refs/heads/main": `)); err == nil || !strings.Contains(err.Error(), "malformed JSON") {
		t.Errorf("malformed refs.json: %v", err)
	}
}

func TestRefsJSONRoundTrips(t *testing.T) {
	in := Refs{"refs/heads/main": "a1", "refs/tags/v1": "b2"}
	out, bad, err := ParseRefsJSON(RefsJSON(in))
	if err != nil || len(bad) != 0 || len(out) != 2 || out["refs/tags/v1"] != "b2" {
		t.Errorf("%v %v %v", out, bad, err)
	}
}

func TestParseSettings(t *testing.T) {
	s, err := ParseSettings([]byte(`{"fdl": "0.1", "id": "x", "catalog_formats": [{"format": "v1"}, "v2", "../evil"], "signers": "a ssh-ed25519 AAAA\n# c\n"}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.DataDir != "data/" || s.ID != "x" || strings.Join(s.CatalogFiles(), ",") != "catalogs/v1.duckdb,catalogs/v2.duckdb" || len(s.Signers) != 1 {
		t.Errorf("%+v", s)
	}
	for doc, why := range map[string]string{
		`{"id": "x"}`:                               `missing required key "fdl"`,
		`{"fdl": "1.0"}`:                            "unknown major spec version",
		`{"fdl": "zero"}`:                           "MAJOR.MINOR",
		`{"fdl": "0.1", "data_dir": "../x/"}`:       "data_dir",
		`{"fdl": "0.1", "data_dir": "/abs/"}`:       "data_dir",
		`{"fdl": "0.1", "data_dir": "x"}`:           "data_dir",
		`{"fdl": "0.1", "data_dir": "a/../b/"}`:     "data_dir",
		`{"fdl": "0.1", "data_dir": "versions/x/"}`: "reserves",
		`{"fdl": `: "malformed JSON",
	} {
		if _, err := ParseSettings([]byte(doc)); err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "fdl.json") {
			t.Errorf("%s: %v, want an error naming fdl.json and %q", doc, err, why)
		}
	}
}

// The spec's own form of catalog_formats: each entry's DuckLake version
// names catalogs/ducklake-<version>.duckdb, and catalogs/<version>.duckdb
// is tried too (our reading of the spec).
func TestParseSettingsSpecCatalogFormats(t *testing.T) {
	s, err := ParseSettings([]byte(`{"fdl": "0.1", "catalog_formats": [{"ducklake": "1.1"}, {"ducklake": "1.0", "until": "2027-03-31"}, {"ducklake": "../x"}, {"ducklake": ""}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []CatalogFormat{{Name: "ducklake-1.0", DuckLake: "1.0"}, {Name: "ducklake-1.1", DuckLake: "1.1"}}
	if !reflect.DeepEqual(s.CatalogFormats, want) {
		t.Errorf("formats %+v, want %+v", s.CatalogFormats, want)
	}
	files := []string{"catalogs/1.0.duckdb", "catalogs/1.1.duckdb", "catalogs/ducklake-1.0.duckdb", "catalogs/ducklake-1.1.duckdb"}
	if got := s.CatalogFiles(); !reflect.DeepEqual(got, files) {
		t.Errorf("catalog files %v, want %v", got, files)
	}
	// The other forms stay readable.
	for doc, want := range map[string]string{
		`["a", {"format": "b"}, {"name": "c"}]`: "catalogs/a.duckdb,catalogs/b.duckdb,catalogs/c.duckdb",
		`{"d": {}, "e": true}`:                  "catalogs/d.duckdb,catalogs/e.duckdb",
		`"nonsense"`:                            "",
	} {
		s, err := ParseSettings([]byte(`{"fdl": "0.1", "catalog_formats": ` + doc + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(s.CatalogFiles(), ","); got != want {
			t.Errorf("%s: %s, want %s", doc, got, want)
		}
	}
}

func TestParseRecord(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	r, err := ParseRecord("v1", []byte(`{"parents": ["v0"], "sha256": "`+sum+`", "author": "kept"}`))
	if err != nil || r.SHA256 != sum || len(r.Parents) != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	for doc, why := range map[string]string{
		`{"parents": [], "sha256": "` + strings.ToUpper(sum) + `"}`: "lowercase hex",
		`{"parents": ["../x"], "sha256": "` + sum + `"}`:            "parent",
		`{"parents": []}`: `no "sha256"`,
		`[`:               "malformed JSON",
	} {
		if _, err := ParseRecord("v1", []byte(doc)); err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "version v1") {
			t.Errorf("%s: %v, want %q", doc, err, why)
		}
	}
}

func TestParseHead(t *testing.T) {
	if ref, err := ParseHead([]byte("ref: refs/heads/main\n")); err != nil || ref != "refs/heads/main" {
		t.Errorf("%q %v", ref, err)
	}
	for _, h := range []string{"refs/heads/main", "ref: refs/heads/../x", "ref: 019a"} {
		if _, err := ParseHead([]byte(h)); err == nil {
			t.Errorf("%q accepted", h)
		}
	}
}
