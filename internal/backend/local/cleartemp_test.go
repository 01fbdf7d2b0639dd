package local_test

import (
	"sync"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
)

// A store opened while another run, holding the mirror's lock, clears the
// temporary folder opens all the same: the folder can go between making it
// and opening it (two daemon replicas on one folder met this in CI).
func TestOpenWhileAnotherClearsTheTemporaryFolder(t *testing.T) {
	dir := t.TempDir()
	holder, err := local.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := holder.ClearTemp(); err != nil {
				t.Errorf("ClearTemp: %v", err)
				return
			}
		}
	}()
	deadline := time.Now().Add(time.Second)
	opened := 0
	for time.Now().Before(deadline) {
		st, err := local.Create(dir)
		if err != nil {
			t.Errorf("open %d, while the temporary folder is cleared: %v", opened, err)
			break
		}
		st.Close()
		opened++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d opens", opened)
}
