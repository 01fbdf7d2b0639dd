package repo

// Fuzz targets for every parser of bytes an upstream controls. Each checks
// properties of what it accepts, not only that it does not panic: what a
// parser lets through becomes a path in the mirror, so an accepted name
// must be a clean relative path that stays where the layout puts it.
// Seeds are in testdata/fuzz/<target>/ and run with every `go test`;
// `make fuzz` explores further.

import (
	"bytes"
	"encoding/json"
	"path"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// checkVersionPath: an accepted version ID is one clean segment under
// versions/, whatever file of its folder is asked for.
func checkVersionPath(t *testing.T, id string) {
	t.Helper()
	if id == "" || strings.ContainsAny(id, "/\\.\x00") || strings.Contains(id, "..") {
		t.Fatalf("version ID %q accepted", id)
	}
	for _, f := range append([]string{"catalogs/x.duckdb"}, KnownVersionFiles...) {
		p := VersionFile(id, f)
		if err := backend.CheckName(p); err != nil {
			t.Fatalf("version ID %q: %s is not a clean name: %v", id, p, err)
		}
		if !strings.HasPrefix(p, VersionDir(id)) || path.Dir(path.Join(VersionsDir, id)) != "versions" {
			t.Fatalf("version ID %q: %s leaves its folder", id, p)
		}
	}
}

func FuzzCheckVersionID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		if CheckVersionID(id) != nil {
			return
		}
		checkVersionPath(t, id)
		// A ref file naming it reads back as the same ID.
		got, err := ParseRefFile("refs/heads/x", RefFileContent(id))
		if err != nil || got != id {
			t.Fatalf("ref file of %q reads back as %q, %v", id, got, err)
		}
	})
}

// checkRef: an accepted ref name is a clean path under refs/<kind>/, of
// lowercase segments, that no "..", leading "/" or empty segment escapes.
func checkRef(t *testing.T, name string, kind RefKind) {
	t.Helper()
	prefix := map[RefKind]string{Branch: "refs/heads/", Tag: "refs/tags/", Request: "refs/requests/"}[kind]
	switch {
	case !strings.HasPrefix(name, prefix) || len(name) == len(prefix):
		t.Fatalf("ref %q accepted as a %v without a name under %s", name, kind, prefix)
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//"):
		t.Fatalf("ref %q accepted with a leading, trailing or double /", name)
	case strings.Contains(name, "/../") || strings.HasSuffix(name, "/..") || strings.Contains(name, "/./") || strings.HasSuffix(name, "/."):
		t.Fatalf("ref %q accepted with a . or .. segment", name)
	case name != strings.ToLower(name) || !utf8.ValidString(name) || strings.ContainsAny(name, "\\\x00\n\r :"):
		t.Fatalf("ref %q accepted with characters outside the rule", name)
	}
	if err := backend.CheckName(name); err != nil {
		t.Fatalf("ref %q accepted but is not a clean name: %v", name, err)
	}
	if path.Clean(name) != name {
		t.Fatalf("ref %q accepted but cleans to %q", name, path.Clean(name))
	}
}

func FuzzCheckRefName(f *testing.F) {
	f.Fuzz(func(t *testing.T, name string) {
		kind, err := CheckRefName(name)
		if err != nil {
			if !strings.Contains(err.Error(), "ref ") {
				t.Fatalf("error does not say it is about a ref: %v", err)
			}
			return
		}
		checkRef(t, name, kind)
		// HEAD naming it reads back as the same ref.
		got, err := ParseHead([]byte("ref: " + name + "\n"))
		if err != nil || got != name {
			t.Fatalf("HEAD naming %q reads back as %q, %v", name, got, err)
		}
	})
}

func FuzzParseRefFile(f *testing.F) {
	f.Fuzz(func(t *testing.T, content []byte) {
		id, err := ParseRefFile("refs/heads/main", content)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ref refs/heads/main: ") {
				t.Fatalf("error does not name the ref: %v", err)
			}
			return
		}
		checkVersionPath(t, id)
		// What a mirror writes for it reads back the same, and is what was
		// read up to a trailing newline.
		out := RefFileContent(id)
		if again, err := ParseRefFile("refs/heads/main", out); err != nil || again != id {
			t.Fatalf("round trip of %q: %q, %v", id, again, err)
		}
		if !bytes.Equal(bytes.TrimSuffix(content, []byte("\n")), bytes.TrimSuffix(out, []byte("\n"))) {
			t.Fatalf("ref file %q read as %q", content, id)
		}
	})
}

func FuzzParseHead(f *testing.F) {
	f.Fuzz(func(t *testing.T, content []byte) {
		ref, err := ParseHead(content)
		if err != nil {
			if !strings.HasPrefix(err.Error(), HeadFile+": ") {
				t.Fatalf("error does not name HEAD: %v", err)
			}
			return
		}
		kind, err := CheckRefName(ref)
		if err != nil {
			t.Fatalf("HEAD names %q, which CheckRefName refuses: %v", ref, err)
		}
		checkRef(t, ref, kind)
		if again, err := ParseHead([]byte("ref: " + ref + "\n")); err != nil || again != ref {
			t.Fatalf("round trip of HEAD %q: %q, %v", ref, again, err)
		}
	})
}

func FuzzParseRefsJSON(f *testing.F) {
	f.Fuzz(func(t *testing.T, content []byte) {
		refs, bad, err := ParseRefsJSON(content)
		// The one-pass way for flat objects decides as the entry-by-entry
		// way does.
		if r2, b2, err2 := parseRefsJSONByEntry(content); !reflect.DeepEqual(refs, r2) || !reflect.DeepEqual(bad, b2) || (err == nil) != (err2 == nil) {
			t.Fatalf("%q: one pass %v, %v, %v; entry by entry %v, %v, %v", content, refs, bad, err, r2, b2, err2)
		}
		if err != nil {
			if refs != nil || bad != nil || !strings.HasPrefix(err.Error(), RefsFile+": ") {
				t.Fatalf("error %v with refs %v, bad %v", err, refs, bad)
			}
			return
		}
		for name, id := range refs {
			kind, err := CheckRefName(name)
			if err != nil {
				t.Fatalf("accepted ref %q: %v", name, err)
			}
			checkRef(t, name, kind)
			if CheckVersionID(id) != nil {
				t.Fatalf("ref %q accepted with version ID %q", name, id)
			}
			checkVersionPath(t, id)
		}
		for _, b := range bad {
			if _, ok := refs[b.Ref]; ok {
				t.Fatalf("ref %q both accepted and refused", b.Ref)
			}
			if !strings.HasPrefix(b.Err.Error(), RefsFile+": ") {
				t.Fatalf("refusal of %q does not name %s: %v", b.Ref, RefsFile, b.Err)
			}
		}
		// What a mirror writes reads back as the same refs, none refused,
		// and writing that again gives the same bytes.
		out := RefsJSON(refs)
		again, bad2, err := ParseRefsJSON(out)
		if err != nil || len(bad2) != 0 || len(again) != len(refs) {
			t.Fatalf("round trip of %v: %v, refused %v, %v", refs, again, bad2, err)
		}
		for name, id := range refs {
			if again[name] != id {
				t.Fatalf("round trip: %s is %q, was %q", name, again[name], id)
			}
		}
		if !bytes.Equal(RefsJSON(again), out) {
			t.Fatalf("RefsJSON is not stable:\n%s\n%s", out, RefsJSON(again))
		}
		if !json.Valid(out) {
			t.Fatalf("RefsJSON wrote invalid JSON: %s", out)
		}
	})
}

func FuzzParseSettings(f *testing.F) {
	f.Fuzz(func(t *testing.T, content []byte) {
		s, err := ParseSettings(content)
		if err != nil {
			if !strings.HasPrefix(err.Error(), SettingsFile+": ") {
				t.Fatalf("error does not name %s: %v", SettingsFile, err)
			}
			return
		}
		if !bytes.Equal(s.Raw, content) {
			t.Fatal("Raw is not the bytes read")
		}
		if major, _, _ := strings.Cut(s.FDL, "."); strings.TrimLeft(major, "+-0") != "" {
			t.Fatalf("spec version %q accepted", s.FDL)
		}
		// data_dir: a clean relative folder, outside what the layout
		// reserves; a data file under it stays under it.
		if err := CheckDataDir(s.DataDir); err != nil {
			t.Fatalf("data_dir %q accepted: %v", s.DataDir, err)
		}
		dir := strings.TrimSuffix(s.DataDir, "/")
		if err := backend.CheckName(dir + "/x.parquet"); err != nil || path.Clean(dir) != dir {
			t.Fatalf("data_dir %q accepted: %v", s.DataDir, err)
		}
		for _, reserved := range []string{RefsDir, VersionsDir, backend.ReservedPrefix} {
			if strings.HasPrefix(s.DataDir, reserved) || s.DataDir == reserved {
				t.Fatalf("data_dir %q accepted inside %s", s.DataDir, reserved)
			}
		}
		// Every alternate catalog is a file of catalogs/ in the version's
		// folder, whatever catalog_formats said.
		for _, name := range s.CatalogFiles() {
			p := VersionFile("v1", name)
			if err := backend.CheckName(p); err != nil {
				t.Fatalf("catalog_formats gave %q: %v", name, err)
			}
			if path.Dir(name) != "catalogs" || !strings.HasSuffix(name, ".duckdb") {
				t.Fatalf("catalog_formats gave %q, outside catalogs/", name)
			}
		}
		for _, l := range s.Signers {
			if l == "" || strings.ContainsAny(l, "\n") || strings.HasPrefix(l, "#") {
				t.Fatalf("signers line %q", l)
			}
		}
	})
}

func FuzzParseRecord(f *testing.F) {
	f.Fuzz(func(t *testing.T, content []byte) {
		r, err := ParseRecord("v1", content)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "version v1: "+RecordFile+": ") {
				t.Fatalf("error does not name the version and file: %v", err)
			}
			return
		}
		if r.ID != "v1" || !bytes.Equal(r.Raw, content) {
			t.Fatalf("record %+v", r)
		}
		if len(r.SHA256) != 64 || strings.Trim(r.SHA256, "0123456789abcdef") != "" {
			t.Fatalf("sha256 %q accepted", r.SHA256)
		}
		for _, p := range r.Parents {
			if CheckVersionID(p) != nil {
				t.Fatalf("parent %q accepted", p)
			}
			checkVersionPath(t, p)
		}
	})
}
