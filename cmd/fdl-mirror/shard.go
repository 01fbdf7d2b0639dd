package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/fdl-mirror/fdl-mirror/internal/config"
)

// jobIndexEnv is the variable Kubernetes sets in each pod of an Indexed Job
// (0 to completions-1).
const jobIndexEnv = "JOB_COMPLETION_INDEX"

// shardFlags are --shard I/N and --shards N, shared by sync, status and
// daemon with --config.
type shardFlags struct {
	shard  string
	shards int
}

func (s *shardFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.shard, "shard", "", "with --config: only the mirrors of shard `I/N` (I from 0; a mirror's shard depends on its name only)")
	fs.IntVar(&s.shards, "shards", 0, "with --config: `N` shards, this one being $"+jobIndexEnv+" (set by a Kubernetes Indexed Job)")
}

// resolve returns the shard asked for: --shard, or --shards with the index
// from JOB_COMPLETION_INDEX, or the whole config when neither is given.
func (s *shardFlags) resolve(lookupEnv func(string) (string, bool)) (config.Shard, error) {
	switch {
	case s.shard != "" && s.shards != 0:
		return config.Shard{}, fmt.Errorf("--shard and --shards: give one (--shards N takes the index from $%s)", jobIndexEnv)
	case s.shard != "":
		return config.ParseShard(s.shard)
	case s.shards != 0:
		v, ok := lookupEnv(jobIndexEnv)
		if !ok || v == "" {
			return config.Shard{}, fmt.Errorf("--shards %d: $%s is not set (it is in the pods of an Indexed Job; elsewhere use --shard I/N)", s.shards, jobIndexEnv)
		}
		i, err := strconv.Atoi(v)
		if err != nil {
			return config.Shard{}, fmt.Errorf("--shards %d: $%s=%q is not a whole number", s.shards, jobIndexEnv, v)
		}
		sh, err := config.NewShard(i, s.shards)
		if err != nil {
			return config.Shard{}, fmt.Errorf("--shards %d with $%s=%s: %w", s.shards, jobIndexEnv, v, err)
		}
		return sh, nil
	}
	return config.Shard{}, nil
}

// given reports whether a shard flag was set (they need --config).
func (s *shardFlags) given() bool { return s.shard != "" || s.shards != 0 }

// shardArgs resolves the shard flags of cmd, printing why they cannot be
// used: they need --config, and exclude --mirror (one mirror is already
// less than a shard).
func shardArgs(fs *flag.FlagSet, cmd string, s *shardFlags, configPath, mirror string) (config.Shard, bool) {
	if !s.given() {
		return config.Shard{}, true
	}
	w := fs.Output()
	if configPath == "" {
		fmt.Fprintf(w, "fdl-mirror %s: --shard and --shards need --config\n", cmd)
		return config.Shard{}, false
	}
	if mirror != "" {
		fmt.Fprintf(w, "fdl-mirror %s: --mirror names one mirror; it takes no --shard or --shards\n", cmd)
		return config.Shard{}, false
	}
	shard, err := s.resolve(os.LookupEnv)
	if err != nil {
		fmt.Fprintf(w, "fdl-mirror %s: %s\n", cmd, shown(err))
		return config.Shard{}, false
	}
	return shard, true
}

// selectShard narrows cfg to shard and says so on w; a shard may hold no
// mirror (more shards than mirrors), which is not an error.
func selectShard(w io.Writer, cmd string, cfg *config.Config, shard config.Shard) *config.Config {
	if shard.Whole() {
		return cfg
	}
	part := cfg.InShard(shard)
	if len(part.Mirrors) == 0 {
		fmt.Fprintf(w, "fdl-mirror %s: shard %s of %s holds none of its %d mirrors\n", cmd, shard, cfg.Path, len(cfg.Mirrors))
	}
	return part
}
