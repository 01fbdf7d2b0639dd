package backendtest

import (
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// HeapGrowth runs f and returns by how much the heap in use grew above
// what it was before, at its highest (sampled every 5 ms, with the
// collector made eager meanwhile): what a streaming Put holds in memory.
func HeapGrowth(f func()) int64 {
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
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
	f()
	close(stop)
	<-sampled
	return int64(peak.Load()) - int64(base)
}

// Zeros is a reader of endless zero bytes that holds nothing in memory.
type Zeros struct{}

func (Zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
