package limiter_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/limiter"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]int64{
		"10M": 10 << 20, "10m": 10 << 20, "512k": 512 << 10, "1.5MiB/s": 3 << 19, "1000": 1000,
		"2G": 2 << 30, "100B": 100, "0": 0, "off": 0, "": 0, " 5M ": 5 << 20,
	} {
		got, err := limiter.ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"fast", "-1M", "10X", "M", "1e30"} {
		if _, err := limiter.ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) accepted", bad)
		}
	}
}

// Two stores wrapped by one limiter share it: 2 MiB read from each, at
// once, at 2 MiB/s take about 2 s together, not 1. Only loose bounds are
// asserted (no faster than the limit allows); the rate is logged.
func TestOneLimitSharedByEveryStore(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 2 s")
	}
	const size, rate = 2 << 20, 2 << 20
	l := limiter.New(rate)
	var stores []backend.Reader
	for i := 0; i < 2; i++ {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte{byte(i)}, size), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := local.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, l.Wrap(st))
	}
	if backend.Innermost(stores[0]) == stores[0] {
		t.Fatal("the wrapper does not unwrap: a Copier underneath would not be found")
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, st := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := st.Open(context.Background(), "f")
			if err != nil {
				t.Error(err)
				return
			}
			defer rc.Close()
			if n, err := io.Copy(io.Discard, rc); n != size || err != nil {
				t.Errorf("read %d bytes: %v", n, err)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	got := float64(2*size) / took.Seconds()
	t.Logf("read %d MiB in %v: %.2f MiB/s at a limit of %.2f MiB/s", 2*size>>20, took.Round(time.Millisecond), got/(1<<20), float64(rate)/(1<<20))
	if got > 1.5*rate {
		t.Errorf("%.2f MiB/s: faster than the %.2f MiB/s limit allows", got/(1<<20), float64(rate)/(1<<20))
	}
}
