package s3_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/backendtest"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
)

// TestConcurrentPutsShareTheStoresParts runs four multipart Puts at once,
// as the engine does, and watches the heap: the store holds Concurrency
// parts across all its Puts (2 × 8 MiB here), not Concurrency per Put
// (which would be 64 MiB), and reuses them rather than leaving garbage.
func TestConcurrentPutsShareTheStoresParts(t *testing.T) {
	srv := startS3(t)
	st := open(t, srv.URL(srv.Bucket(t), "m"), s3.Options{PartSize: 8 << 20, Concurrency: 2})
	const size, puts = 48 << 20, 4
	errs := make([]error, puts)
	grew := backendtest.HeapGrowth(func() {
		var wg sync.WaitGroup
		for i := range puts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = st.Put(context.Background(), fmt.Sprintf("big%d", i), io.LimitReader(backendtest.Zeros{}, size), size)
			}()
		}
		wg.Wait()
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Put big%d: %v", i, err)
		}
	}
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
