package main

import (
	bin "encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// verify --deep reads each data file's ends: a file of the right size
// whose bytes were zeroed (a power cut) or whose footer length was changed
// passes the size check and fails the deep one, each named (issue 10).
func TestVerifyDeepNamesEveryDamagedDataFile(t *testing.T) {
	_, up, _ := layout(t)
	r := gen(t, up, generate.Options{Versions: 2, FilesPerVersion: 3, FastParquet: true})
	var parquet []string
	for _, f := range r.DataFiles {
		if strings.HasSuffix(f, ".parquet") {
			parquet = append(parquet, f)
		}
	}
	if len(parquet) < 3 {
		t.Fatalf("generated %d Parquet files, want 3 or more", len(parquet))
	}
	if res := run(t, "verify", "--deep", up); res.code != 0 {
		t.Fatalf("verify --deep of an intact repository: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}

	zeroed, footer, tail := parquet[0], parquet[1], parquet[2]
	p := filepath.Join(up, zeroed)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, make([]byte, fi.Size()), 0o644)
	b, _ := os.ReadFile(filepath.Join(up, footer))
	n := bin.LittleEndian.Uint32(b[len(b)-8:])
	bin.LittleEndian.PutUint32(b[len(b)-8:], n-1) // still fits the file: only the catalog knows
	os.WriteFile(filepath.Join(up, footer), b, 0o644)
	b, _ = os.ReadFile(filepath.Join(up, tail))
	copy(b[len(b)-4:], "PAR0")
	os.WriteFile(filepath.Join(up, tail), b, 0o644)

	if res := run(t, "verify", up); res.code != 0 {
		t.Fatalf("plain verify checks sizes only, which are right: exit %d\n%s", res.code, res.stdout)
	}
	res := run(t, "verify", "--deep", "--json", up)
	if res.code != 1 {
		t.Fatalf("verify --deep of damaged files: exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
	}
	var out struct {
		Problems []struct{ File, Message string }
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, res.stdout)
	}
	named := map[string]string{}
	for _, p := range out.Problems {
		named[p.File] = p.Message
	}
	for f, want := range map[string]string{zeroed: "does not start with Parquet's magic", footer: "the catalog records footer_size", tail: "does not end with Parquet's magic"} {
		if !strings.Contains(named[f], want) {
			t.Errorf("problem for %s: %q; want it to say %q (all: %+v)", f, named[f], want, out.Problems)
		}
	}
	if len(named) != 3 {
		t.Errorf("%d files named, want the 3 damaged ones: %+v", len(named), out.Problems)
	}
}

// The spec forbids a catalog at the root outside versions/: verify reports
// one, judged by its header whatever its name.
func TestVerifyReportsACatalogAtTheRoot(t *testing.T) {
	_, up, _ := layout(t)
	r := genCopy(t, up, generate.Options{Versions: 1, FastParquet: true})
	cat, err := os.ReadFile(filepath.Join(up, "versions", r.Versions[0], "ducklake.duckdb"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(up, "working.db"), cat, 0o644)
	os.WriteFile(filepath.Join(up, "notes.txt"), []byte("not a database\n"), 0o644)
	res := run(t, "verify", up)
	if res.code != 1 || !strings.Contains(res.stdout, "working.db at the root is a DuckDB database") {
		t.Fatalf("exit %d, want 1 naming working.db\n%s%s", res.code, res.stdout, res.stderr)
	}
	if strings.Contains(res.stdout, "notes.txt") {
		t.Errorf("a text file at the root was reported:\n%s", res.stdout)
	}
}

// With --trusted-signers and signatures optional, an unsigned version is
// information, not a problem: verify says so and exits 0; with
// --require-signatures it is a problem.
func TestVerifyNotesUnsignedVersionsWithTrustedSigners(t *testing.T) {
	_, up, _ := layout(t)
	key := newKey(t, "ed25519", "publisher@example.org")
	r := gen(t, up, generate.Options{Versions: 2, FastParquet: true})
	trusted := allowedSigners(t, "", key)
	res := run(t, "verify", "--trusted-signers", trusted, up)
	if res.code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", res.code, res.stdout, res.stderr)
	}
	for _, id := range r.Versions {
		if !strings.Contains(res.stdout, "NOTE version "+id+" carries no signature") {
			t.Errorf("no note for unsigned version %s:\n%s", id, res.stdout)
		}
	}
	if res := run(t, "verify", up); strings.Contains(res.stdout, "NOTE") {
		t.Errorf("notes without --trusted-signers:\n%s", res.stdout)
	}
	if res := run(t, "verify", "--trusted-signers", trusted, "--require-signatures", up); res.code != 1 {
		t.Errorf("--require-signatures on unsigned versions: exit %d, want 1\n%s", res.code, res.stdout)
	}
}
