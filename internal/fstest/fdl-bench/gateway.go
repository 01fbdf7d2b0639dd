package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// gateway is a Versity S3 Gateway on a posix folder, started for the run,
// with an access log: the server's own count of the requests each tool
// sends, retries and list pages included.
type gateway struct {
	endpoint  string
	accessKey string
	secretKey string
	region    string
	dir       string
	accessLog string
	cmd       *exec.Cmd
	done      chan struct{}
}

func startGateway(ctx context.Context, binary, dir string) (*gateway, error) {
	g := &gateway{
		accessKey: "fdlbench" + randomHex(4),
		secretKey: randomHex(20),
		region:    "us-east-1",
		dir:       filepath.Join(dir, "posix"),
		accessLog: filepath.Join(dir, "access.log"),
	}
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		logf, err := os.Create(filepath.Join(dir, "versitygw.out"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(binary, "--port", addr, "--region", g.region, "--quiet",
			"--access-log", g.accessLog, "posix", g.dir)
		cmd.Env = append(childEnv(nil), "ROOT_ACCESS_KEY_ID="+g.accessKey, "ROOT_SECRET_ACCESS_KEY="+g.secretKey)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, fmt.Errorf("starting %s: %w", binary, err)
		}
		logf.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		if err := waitForPort(ctx, addr, done, 20*time.Second); err != nil {
			cmd.Process.Kill()
			<-done
			lastErr = err
			continue
		}
		g.cmd, g.done, g.endpoint = cmd, done, "http://"+addr
		return g, nil
	}
	return nil, fmt.Errorf("versitygw did not start: %w", lastErr)
}

func (g *gateway) stop() {
	if g == nil || g.cmd == nil {
		return
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(5 * time.Second):
		g.cmd.Process.Kill()
		<-g.done
	}
}

// env is what fdl-mirror (the SDK's standard chain) and rclone (a remote
// named "gw" configured by environment variables) need to reach the
// gateway.
func (g *gateway) env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + g.accessKey,
		"AWS_SECRET_ACCESS_KEY=" + g.secretKey,
		"AWS_EC2_METADATA_DISABLED=true",
		"RCLONE_CONFIG_GW_TYPE=s3",
		"RCLONE_CONFIG_GW_PROVIDER=Other",
		"RCLONE_CONFIG_GW_ENDPOINT=" + g.endpoint,
		"RCLONE_CONFIG_GW_REGION=" + g.region,
		"RCLONE_CONFIG_GW_ACCESS_KEY_ID=" + g.accessKey,
		"RCLONE_CONFIG_GW_SECRET_ACCESS_KEY=" + g.secretKey,
		"RCLONE_CONFIG_GW_FORCE_PATH_STYLE=true",
	}
}

// url is the fdl-mirror address of a bucket's root.
func (g *gateway) url(bucket string) string {
	q := url.Values{}
	q.Set("endpoint", g.endpoint)
	q.Set("region", g.region)
	q.Set("use_path_style", "true")
	return "s3://" + bucket + "/?" + q.Encode()
}

// logOffset is the access log's size now: requests after it belong to the
// next run.
func (g *gateway) logOffset() int64 {
	fi, err := os.Stat(g.accessLog)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// gwCounts are one bucket's requests in an access log span.
type gwCounts struct {
	Requests  int64
	Ops       map[string]int64 // s3_GetObject → n
	BytesSent int64            // response bytes (downloads)
	Errors    int64            // HTTP status >= 400
}

// countsSince reads the access log from off and counts requests by
// bucket. The gateway writes its log as it answers; the file is read once
// its size has stopped changing.
func (g *gateway) countsSince(off int64) (map[string]*gwCounts, error) {
	last := int64(-1)
	for i := 0; i < 50; i++ {
		n := g.logOffset()
		if n == last {
			break
		}
		last = n
		time.Sleep(100 * time.Millisecond)
	}
	f, err := os.Open(g.accessLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	out := map[string]*gwCounts{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// owner bucket [time zone] ip requester request-id operation key
		// request-uri status error bytes-sent object-size total-time …
		fs := strings.Fields(sc.Text())
		if len(fs) < 14 || !strings.HasPrefix(fs[7], "s3_") {
			continue
		}
		c := out[fs[1]]
		if c == nil {
			c = &gwCounts{Ops: map[string]int64{}}
			out[fs[1]] = c
		}
		c.Requests++
		c.Ops[strings.TrimPrefix(fs[7], "s3_")]++
		if st, err := strconv.Atoi(fs[10]); err == nil && st >= 400 {
			c.Errors++
		}
		if n, err := strconv.ParseInt(fs[12], 10, 64); err == nil {
			c.BytesSent += n
		}
	}
	return out, sc.Err()
}

func waitForPort(ctx context.Context, addr string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before listening on %s", addr)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not accept connections within %v: %w", addr, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
