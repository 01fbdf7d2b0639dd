package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is one measured run of an external program.
type child struct {
	Wall   time.Duration
	MaxRSS int64 // bytes, from the kernel's rusage of the process and its waited-for descendants
	Stdout string
	Stderr string
}

// timeBinary is GNU time. The peak RSS of a child forked from this
// process cannot be read from its own rusage: Linux carries the RSS high
// water mark of the forking process (this one, with DuckDB loaded) across
// exec. GNU time is small, and reports the rusage of the program it forks.
const timeBinary = "/usr/bin/time"

// runChild runs argv with env added to (and overriding) a cleaned
// environment, and measures its wall time and peak resident set size.
func runChild(ctx context.Context, env []string, argv ...string) (*child, error) {
	rssFile, err := os.CreateTemp("", "fdl-bench-rss-*")
	if err != nil {
		return nil, err
	}
	rssFile.Close()
	defer os.Remove(rssFile.Name())
	full := append([]string{timeBinary, "-f", "%M", "-o", rssFile.Name()}, argv...)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Env = childEnv(env)
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	// Every run starts with nothing dirty in the page cache. fdl-mirror's
	// barrier on a disk is syncfs(2), which writes back every dirty page
	// of the file system, not only its own: run right after rclone (which
	// never syncs), it wrote rclone's 570 MiB as well, and the wide full
	// copy took 22.0 s where it took 9.7 s after a sync.
	syscall.Sync()
	start := time.Now()
	err = cmd.Run()
	c := &child{Wall: time.Since(start), Stdout: out.String(), Stderr: errb.String()}
	if raw, rerr := os.ReadFile(rssFile.Name()); rerr == nil {
		// The last line is %M, in KiB; a failed command has a line before it.
		lines := strings.Fields(strings.TrimSpace(string(raw)))
		if len(lines) > 0 {
			if kib, perr := strconv.ParseInt(lines[len(lines)-1], 10, 64); perr == nil {
				c.MaxRSS = kib * 1024
			}
		}
	}
	if err != nil {
		return c, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, tail(c.Stderr+c.Stdout, 2000))
	}
	return c, nil
}

// childEnv is the benchmark's environment without what could send a child
// elsewhere than the local gateway (a CA bundle the S3 SDKs try to load for
// a plain-HTTP loopback endpoint, profiles, shared config), plus env.
func childEnv(env []string) []string {
	drop := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop[k] = true
	}
	for _, k := range []string{"AWS_CA_BUNDLE", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"} {
		drop[k] = true
	}
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
