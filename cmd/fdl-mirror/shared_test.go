package main

import (
	"os"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

// The tests that mostly wait (for a lock to expire, a paused run, a
// minute of two daemons) run in parallel (t.Parallel), so that the
// package's wall time is not the sum of their waits. Such a test cannot
// start an S3 or GCS server of its own: testserver.S3 and GCS point the
// process's environment (credentials, STORAGE_EMULATOR_HOST) at their
// server with t.Setenv, which a parallel test may not call and which would
// point every other test at that server too. So the parallel tests share
// one server of each kind, each test in buckets of its own: sharedS3 and
// sharedGCS start it on first use and set the environment for it, once;
// TestMain stops it. Parallel tests run after every sequential one, so
// the environment they set changes nothing a sequential test relies on.
var shared struct {
	mu     sync.Mutex
	s3     *testserver.S3Server
	s3Dir  string
	gcs    *testserver.GCSServer
	failed bool // a test that used a shared server failed: print its output
}

// sharedS3 is the S3 gateway that parallel tests share; call it only
// from a test that has called t.Parallel.
func sharedS3(t *testing.T) *testserver.S3Server {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.s3 == nil {
		bin := testserver.Binary(t, "versitygw")
		dir, err := os.MkdirTemp("", "fdl-mirror-s3-")
		if err != nil {
			t.Fatal(err)
		}
		s, err := testserver.StartS3(bin, dir)
		if err != nil {
			os.RemoveAll(dir)
			t.Fatal(err)
		}
		shared.s3, shared.s3Dir = s, dir
		os.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
		os.Setenv("AWS_SECRET_ACCESS_KEY", s.SecretKey)
	}
	noteFailure(t)
	return shared.s3
}

// sharedGCS is the fake-gcs-server that parallel tests share; call it
// only from a test that has called t.Parallel.
func sharedGCS(t *testing.T) *testserver.GCSServer {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.gcs == nil {
		s, err := testserver.StartGCS(testserver.Binary(t, "fake-gcs-server"))
		if err != nil {
			t.Fatal(err)
		}
		shared.gcs = s
		os.Setenv("STORAGE_EMULATOR_HOST", s.Process.Addr)
	}
	noteFailure(t)
	return shared.gcs
}

func noteFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			shared.mu.Lock()
			shared.failed = true
			shared.mu.Unlock()
		}
	})
}

// stopSharedServers stops the shared servers, printing their output if a
// test that used them failed.
func stopSharedServers() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if s := shared.s3; s != nil {
		s.Process.Stop()
		if shared.failed {
			os.Stderr.WriteString("shared versitygw output:\n" + s.Process.Output() + "\n")
		}
		os.RemoveAll(shared.s3Dir)
	}
	if s := shared.gcs; s != nil {
		s.Process.Stop()
		if shared.failed {
			os.Stderr.WriteString("shared fake-gcs-server output:\n" + s.Process.Output() + "\n")
		}
	}
}
