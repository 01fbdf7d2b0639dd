package main

import (
	"context"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// The command against a real S3 server: --lock-wait and its exit codes.
// What the engine does between every pair of stores, through faults and
// against hostile servers, is specified in internal/sync/remote_test.go.

// Two syncs into one S3 sink at once: one waits for the other's lock (or
// gives up cleanly, naming the lock), and the mirror is complete after.
func TestTwoConcurrentSyncsIntoOneS3Sink(t *testing.T) {
	s3 := testserver.S3(t)
	bucket := s3.Bucket(t)
	_, up, _ := layout(t)
	gen(t, up, generate.Options{Versions: 3, FilesPerVersion: 20, FastParquet: true})
	sink := s3.URL(bucket, "m")
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = run(t, "sync", "--lock-wait", "2m", up, sink)
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("sync %d: exit %d\n%s\n%s", i, r.code, r.stdout, r.stderr)
		}
	}
	// The one that waited found the mirror complete and copied nothing of
	// what the other copied; between them, each file was copied once.
	if v := run(t, "verify", sink); v.code != 0 {
		t.Errorf("verify: exit %d\n%s", v.code, v.stdout)
	}

	// While another holder has the lock, a sync that will not wait gives
	// up cleanly, naming the lock, and writes nothing.
	ctx := context.Background()
	held := fdltest.HoldLock(t, sink, lock.Options{Owner: "test-holder"})
	// A run with nothing new does not need the lock: it neither waits
	// nor fails.
	if res := run(t, "sync", "--lock-wait", "0s", up, sink); res.code != 0 {
		t.Errorf("a no-op sync facing a held lock: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if _, err := generate.AddVersion(ctx, up, 2, generate.Options{}); err != nil {
		t.Fatal(err)
	}
	before := s3.Objects(bucket, "m/")
	gaveUp := run(t, "sync", "--lock-wait", "0s", up, sink)
	if gaveUp.code != 1 || !fdltest.Contains(gaveUp.stdout+gaveUp.stderr, "test-holder") {
		t.Errorf("a sync facing a held lock: exit %d, want 1 naming the holder\n%s\n%s", gaveUp.code, gaveUp.stdout, gaveUp.stderr)
	}
	after := s3.Objects(bucket, "m/")
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("a sync without the lock wrote %s", name)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if res := run(t, "sync", "--lock-wait", "0s", up, sink); res.code != 0 {
		t.Errorf("a sync after the lock was released: exit %d\n%s", res.code, res.stdout)
	}
}
