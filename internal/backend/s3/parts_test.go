package s3_test

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
)

// TestConcurrentPutsShareTheStoresParts runs four multipart Puts at once,
// as the engine does, and watches the heap: the store holds Concurrency
// parts across all its Puts (2 × 8 MiB here), not Concurrency per Put
// (which would be 64 MiB), and reuses them rather than leaving garbage.
func TestConcurrentPutsShareTheStoresParts(t *testing.T) {
	srv := startS3(t)
	st := open(t, srv.URL(srv.Bucket(t), "m"), s3.Options{PartSize: 8 << 20, Concurrency: 2})
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	const size, puts = 48 << 20, 4
	errs := make([]error, puts)
	var wg sync.WaitGroup
	for i := range puts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.Put(context.Background(), fmt.Sprintf("big%d", i), io.LimitReader(zeros{}, size), size)
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Put big%d: %v", i, err)
		}
	}
	grew := int64(peak.Load()) - int64(base)
	t.Logf("heap grew by at most %d MiB while putting %d × %d MiB at once", grew>>20, puts, size>>20)
	if grew > 40<<20 {
		t.Fatalf("heap grew by %d MiB while putting %d × %d MiB at once; the store should hold 2 parts of 8 MiB", grew>>20, puts, size>>20)
	}
	for i := range puts {
		if fi, err := st.Stat(context.Background(), fmt.Sprintf("big%d", i)); err != nil || fi.Size != size {
			t.Fatalf("Stat big%d = %+v, %v", i, fi, err)
		}
	}
}
