package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "256MiB": 256 << 20, "2GiB": 2 << 30, "10MB": 10_000_000, "1.5KiB": 1536, "3G": 3 << 30,
	} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "abc", "-1MiB", "0", "12XB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

func TestGenerateThenAdd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	if code := run([]string{"-versions", "2", "-files", "1", "-data-dir", "d/", "-tags", dir}); code != 0 {
		t.Fatalf("generate: exit %d", code)
	}
	first, err := os.ReadFile(filepath.Join(dir, "refs", "heads", "main"))
	if err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"-add", "2", "-tags", dir}); code != 0 {
		t.Fatalf("add: exit %d", code)
	}
	main, _ := os.ReadFile(filepath.Join(dir, "refs", "heads", "main"))
	tag, _ := os.ReadFile(filepath.Join(dir, "refs", "tags", "v3"))
	if string(main) == string(first) || string(tag) != string(main) {
		t.Errorf("after -add: main %q (was %q), refs/tags/v3 %q", main, first, tag)
	}
	record, err := os.ReadFile(filepath.Join(dir, "versions", strings.TrimSpace(string(main)), "version.json"))
	if err != nil || !strings.Contains(string(record), strings.TrimSpace(string(first))) {
		t.Errorf("the new version's record does not name the old tip as parent: %s, %v", record, err)
	}
	if code := run([]string{"-layout", "0.2", filepath.Join(t.TempDir(), "x")}); code != 1 {
		t.Errorf("an unknown layout: exit %d, want 1", code)
	}
	if code := run([]string{"-versions", "2"}); code != 2 {
		t.Errorf("no DIR: exit %d, want 2", code)
	}
}
