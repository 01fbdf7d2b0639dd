package config

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// MaxShards bounds N in --shard I/N: far more pods than anyone runs, and
// small enough that choosing a shard stays a trivial loop.
const MaxShards = 10000

// Shard is one part of a config's mirrors: the mirrors whose name hashes to
// Index out of Count. The zero Shard (Count 0) is the whole config.
type Shard struct {
	Index, Count int
}

// Whole reports whether s selects every mirror.
func (s Shard) Whole() bool { return s.Count <= 1 }

func (s Shard) String() string {
	if s.Count == 0 {
		return "all"
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// ParseShard reads "I/N": shard I (from 0) of N.
func ParseShard(s string) (Shard, error) {
	is, ns, ok := strings.Cut(s, "/")
	if !ok {
		return Shard{}, fmt.Errorf("shard %q: want I/N, e.g. 0/4 (shard I, from 0, of N)", s)
	}
	n, err := strconv.Atoi(ns)
	if err != nil {
		return Shard{}, fmt.Errorf("shard %q: N %q is not a whole number", s, ns)
	}
	i, err := strconv.Atoi(is)
	if err != nil {
		return Shard{}, fmt.Errorf("shard %q: I %q is not a whole number", s, is)
	}
	return NewShard(i, n)
}

// NewShard checks that i is a shard of n: 1 <= n <= MaxShards, 0 <= i < n.
func NewShard(i, n int) (Shard, error) {
	if n < 1 || n > MaxShards {
		return Shard{}, fmt.Errorf("shard %d/%d: the number of shards must be from 1 to %d", i, n, MaxShards)
	}
	if i < 0 || i >= n {
		return Shard{}, fmt.Errorf("shard %d/%d: the index must be from 0 to %d", i, n, n-1)
	}
	return Shard{Index: i, Count: n}, nil
}

// ShardOf returns the shard, from 0 to n-1, that the mirror called name
// belongs to among n. It is rendezvous (highest random weight) hashing:
// every shard scores the name, sha256(name, 0, shard), and the highest
// score wins. The answer depends on the name and n only, never on the other
// mirrors or their order in the file, so adding or removing a mirror moves
// no other one; going from n to n+1 shards moves only the mirrors the new
// shard wins, about 1 in n+1, where hash mod n would move about n in n+1.
// sha256 is in the standard library and fixed for good, so every version
// of fdl-mirror, on every platform, shards a config the same way.
func ShardOf(name string, n int) int {
	if n <= 1 {
		return 0
	}
	best, bestScore := 0, uint64(0)
	buf := make([]byte, 0, len(name)+1+8)
	for i := 0; i < n; i++ {
		buf = append(buf[:0], name...)
		buf = append(buf, 0)
		buf = binary.BigEndian.AppendUint64(buf, uint64(i))
		sum := sha256.Sum256(buf)
		if score := binary.BigEndian.Uint64(sum[:8]); i == 0 || score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// Contains reports whether the mirror called name is in s.
func (s Shard) Contains(name string) bool {
	return s.Whole() || ShardOf(name, s.Count) == s.Index
}

// InShard returns a copy of c holding only the mirrors of s, in file order.
func (c *Config) InShard(s Shard) *Config {
	if s.Whole() {
		return c
	}
	out := *c
	out.Mirrors = nil
	for _, m := range c.Mirrors {
		if s.Contains(m.Name) {
			out.Mirrors = append(out.Mirrors, m)
		}
	}
	return &out
}
