package config

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Shard
		err  string
	}{
		{in: "0/1", want: Shard{0, 1}},
		{in: "3/4", want: Shard{3, 4}},
		{in: "4/4", err: "the index must be from 0 to 3"},
		{in: "-1/4", err: "the index must be from 0 to 3"},
		{in: "0/0", err: "the number of shards must be from 1 to"},
		{in: "0/10001", err: "the number of shards must be from 1 to 10000"},
		{in: "1", err: "want I/N"},
		{in: "a/2", err: `I "a" is not a whole number`},
		{in: "1/b", err: `N "b" is not a whole number`},
	} {
		got, err := ParseShard(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseShard(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseShard(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// The assignment is part of the deployed contract: a CronJob of N pods and
// a daemon of the next release must agree on it. These values were
// computed once; a change of hash breaks this test, not fleets silently.
func TestShardOfIsPinned(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n, want int
	}{
		{"towns", 2, 1}, {"rivers", 2, 1}, {"roads", 2, 0}, {"alpha", 3, 1}, {"beta", 3, 2},
		{"gamma", 4, 2}, {"delta", 4, 3}, {"m-0", 4, 2}, {"m-1", 4, 0}, {"rail", 4, 0},
	} {
		if got := ShardOf(tc.name, tc.n); got != tc.want {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", tc.name, tc.n, got, tc.want)
		}
	}
}

func TestShardsAreStableAndEven(t *testing.T) {
	names := make([]string, 2000)
	for i := range names {
		names[i] = fmt.Sprintf("mirror-%d", i)
	}
	for _, n := range []int{2, 3, 8, 50} {
		count := make([]int, n)
		for _, name := range names {
			count[ShardOf(name, n)]++
		}
		want := len(names) / n
		for i, c := range count {
			// Binomial spread: 5 standard deviations is never hit by chance.
			if d := c - want; d*d > 25*want {
				t.Errorf("%d shards: shard %d holds %d of %d mirrors, want about %d", n, i, c, len(names), want)
			}
		}
	}
	// Going from n to n+1 shards moves a mirror only into the new shard,
	// and about 1 in n+1 of them.
	for _, n := range []int{1, 2, 4, 9} {
		moved := 0
		for _, name := range names {
			before, after := ShardOf(name, n), ShardOf(name, n+1)
			if before != after {
				moved++
				if after != n {
					t.Fatalf("%s moved from shard %d to %d going from %d to %d shards", name, before, after, n, n+1)
				}
			}
		}
		want := len(names) / (n + 1)
		if d := moved - want; d*d > 25*want {
			t.Errorf("%d -> %d shards moved %d of %d mirrors, want about %d", n, n+1, moved, len(names), want)
		}
	}
}

func TestInShardSplitsAConfigWhole(t *testing.T) {
	var b strings.Builder
	b.WriteString("mirrors:\n")
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&b, "  - name: m-%d\n    source: /up/%d\n    sink: /mirror/%d\n", i, i, i)
	}
	cfg, err := Parse([]byte(b.String()), "test.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i := 0; i < 3; i++ {
		part := cfg.InShard(Shard{i, 3})
		if len(part.Mirrors) == 0 {
			t.Errorf("shard %d/3 of 20 mirrors is empty", i)
		}
		last := -1
		for _, m := range part.Mirrors {
			seen[m.Name]++
			if m.Line <= last {
				t.Errorf("shard %d/3: %s out of file order", i, m.Name)
			}
			last = m.Line
		}
	}
	for _, name := range cfg.Names() {
		if seen[name] != 1 {
			t.Errorf("%s is in %d shards of 3", name, seen[name])
		}
	}
	if whole := cfg.InShard(Shard{}); len(whole.Mirrors) != 20 {
		t.Errorf("the zero shard holds %d mirrors", len(whole.Mirrors))
	}
	if len(cfg.Mirrors) != 20 {
		t.Errorf("InShard changed the config it split: %d mirrors", len(cfg.Mirrors))
	}
}
