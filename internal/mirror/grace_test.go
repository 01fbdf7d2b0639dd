package mirror

import (
	"errors"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/prune"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

// The config's bounds on prune_grace are the prune's.
func TestConfigBoundsThePruneGraceAsThePruneDoes(t *testing.T) {
	if config.MinPruneGrace != prune.MinGrace || config.PruneGraceLockTTLs != prune.GraceLockTTLs {
		t.Fatalf("config: %s and %d lock_ttl; prune: %s and %d", config.MinPruneGrace, config.PruneGraceLockTTLs, prune.MinGrace, prune.GraceLockTTLs)
	}
	if err := prune.CheckGrace(2*time.Hour, lock.DefaultTTL); err != nil {
		t.Fatal(err)
	}
}

// A local sink removes at once whatever the job says; an object store
// waits the grace unless told the risk, and refuses --now alone.
func TestPruneGraceByKindOfSink(t *testing.T) {
	l, err := local.Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s3 := testserver.S3(t)
	obj, closeObj, err := location.OpenWritable(t.Context(), s3.URL(s3.Bucket(t), "m"), location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeObj()
	for _, job := range []PruneJob{{}, {Now: true}, {Grace: 48 * time.Hour}} {
		if g, err := pruneGrace(job, sink.New(l, sink.Options{})); g != 0 || err != nil {
			t.Errorf("local, %+v: grace %s, %v; want 0", job, g, err)
		}
	}
	cases := []struct {
		job     PruneJob
		grace   time.Duration
		refused bool
	}{
		{PruneJob{}, prune.DefaultGrace, false},
		{PruneJob{Grace: 48 * time.Hour}, 48 * time.Hour, false},
		{PruneJob{NowUnsafe: true}, 0, false},
		{PruneJob{Now: true, NowUnsafe: true}, 0, false},
		{PruneJob{Now: true}, 0, true},
		{PruneJob{Grace: 30 * time.Minute}, 0, true},
		{PruneJob{Stores: Stores{LockTTL: time.Hour}, Grace: 2 * time.Hour}, 0, true},
	}
	for _, c := range cases {
		g, err := pruneGrace(c.job, sink.New(obj, sink.Options{}))
		if (err != nil) != c.refused || (!c.refused && g != c.grace) {
			t.Errorf("s3, %+v: grace %s, %v; want %s, refused %v", c.job, g, err, c.grace, c.refused)
		}
		if c.job.Now && !c.job.NowUnsafe && !errors.Is(err, ErrNowOnObjectStore) {
			t.Errorf("--now on s3: %v", err)
		}
	}
}
