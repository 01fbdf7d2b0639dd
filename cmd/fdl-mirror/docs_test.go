package main

import (
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const usageDoc = "../../docs/usage.md"

// commandFlags returns every flag of every command, by command, as the
// commands themselves make them: each is run with -h, which parses its
// flags and returns before doing anything, and newFlagSet hands over the
// FlagSet it made.
func commandFlags(t *testing.T) map[string][]string {
	t.Helper()
	var made []*flag.FlagSet
	flagSetMade = func(fs *flag.FlagSet) {
		fs.SetOutput(io.Discard)
		made = append(made, fs)
	}
	t.Cleanup(func() { flagSetMade = nil })
	out := map[string][]string{}
	for name, run := range commands {
		made = made[:0]
		if code := run([]string{"-h"}); code != exitUsage {
			t.Fatalf("fdl-mirror %s -h: exit %d, want %d", name, code, exitUsage)
		}
		if len(made) != 1 {
			t.Fatalf("fdl-mirror %s made %d flag sets, want 1", name, len(made))
		}
		made[0].VisitAll(func(f *flag.Flag) { out[name] = append(out[name], f.Name) })
		sort.Strings(out[name])
	}
	return out
}

// usageHeading is a command's section in docs/usage.md.
var usageHeading = regexp.MustCompile("(?m)^## `?fdl-mirror ([a-z]+)")

// flagRow is a row of a flags table: its first cell names the flag.
var flagRow = regexp.MustCompile("(?m)^\\| *`--([a-z0-9-]+)[ =`]")

// documentedFlags returns, per command section of the usage doc, the flags
// its tables list.
func documentedFlags(doc string) map[string][]string {
	out := map[string][]string{}
	locs := usageHeading.FindAllStringSubmatchIndex(doc, -1)
	for i, loc := range locs {
		end := len(doc)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		// The section ends at the next level-2 heading of any kind.
		body := doc[loc[1]:end]
		if j := strings.Index(body, "\n## "); j >= 0 {
			body = body[:j]
		}
		name := doc[loc[2]:loc[3]]
		for _, m := range flagRow.FindAllStringSubmatch(body, -1) {
			out[name] = append(out[name], m[1])
		}
	}
	return out
}

// flagDrift compares the commands' flags with the doc's: what the doc
// lacks, and what it lists that the command does not take.
func flagDrift(have, documented map[string][]string) (missing, stale []string) {
	for cmd, flags := range have {
		if _, ok := documented[cmd]; !ok {
			missing = append(missing, "the section \"## fdl-mirror "+cmd+"\"")
			continue
		}
		for _, f := range flags {
			if !slices.Contains(documented[cmd], f) {
				missing = append(missing, "fdl-mirror "+cmd+" --"+f)
			}
		}
	}
	for cmd, flags := range documented {
		for _, f := range flags {
			if !slices.Contains(have[cmd], f) {
				stale = append(stale, "fdl-mirror "+cmd+" --"+f)
			}
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	return missing, stale
}

// docs/usage.md has a section for every command that takes flags, and a
// row in its tables for each flag the command takes, and for none it does
// not: the flags come from the commands' own FlagSets, never from a list
// kept here.
func TestUsageDocumentsEveryFlag(t *testing.T) {
	have := commandFlags(t)
	if len(have["sync"]) < 20 || !slices.Contains(have["daemon"], "config") {
		t.Fatalf("the commands' flags look wrong: %v", have)
	}
	data, err := os.ReadFile(usageDoc)
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedFlags(string(data))
	missing, stale := flagDrift(have, documented)
	for _, m := range missing {
		t.Errorf("%s: no row for %s (a row starts \"| `--flag\")", usageDoc, m)
	}
	for _, s := range stale {
		t.Errorf("%s: lists %s, which the command does not take", usageDoc, s)
	}

	// The check has teeth: the doc without one flag's row fails it.
	row := flagRow.FindStringIndex(string(data))
	if row == nil {
		t.Fatal("no flag row at all")
	}
	end := strings.IndexByte(string(data[row[0]:]), '\n')
	cut := string(data[:row[0]]) + string(data[row[0]+end+1:])
	if missing, _ := flagDrift(have, documentedFlags(cut)); len(missing) == 0 {
		t.Error("a doc without its first flag row passes the check")
	}
}
