package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// An upstream that makes thousands of versions fail (each message already
// bounded to 1 KiB by the engine) leaves the page and /status.json small:
// at most maxListed refusals and pending versions each, the rest counted.
func TestStatusStaysSmallWhateverUpstreamMadeFail(t *testing.T) {
	const refused, pending = 5000, 1000
	run := func(ctx context.Context, job mirror.Job, log *zap.Logger, _ func(int64, int64)) (*fdlsync.Report, error) {
		rep := &fdlsync.Report{PendingMore: 7}
		for i := range refused {
			rep.Refused = append(rep.Refused, fdlsync.Refusal{Version: fmt.Sprintf("v%d", i), Reason: fdlsync.ReasonCatalog, Message: strings.Repeat("m", 1000)})
		}
		for i := range pending {
			rep.Pending = append(rep.Pending, fdlsync.PendingVersion{Version: fmt.Sprintf("p%d", i), Reason: fdlsync.ReasonCatalog, Message: strings.Repeat("m", 1000)})
		}
		return rep, nil
	}
	h := start(t, "mirrors:\n  - name: many\n    source: /up\n    sink: /down\n    schedule: \"@every 1s\"\n", run)
	waitForRuns(t, h.d)
	text := body(t, serve(t, h.d.Handler(), "/status.json"))
	page := body(t, serve(t, h.d.Handler(), "/"))
	if len(text) > 512<<10 || len(page) > 512<<10 {
		t.Errorf("/status.json is %d bytes, the page %d; want each at most 512 KiB", len(text), len(page))
	}
	var st Status
	if err := json.Unmarshal([]byte(text), &st); err != nil || len(st.Mirrors) != 1 || st.Mirrors[0].LastRun == nil {
		t.Fatalf("/status.json: %v", err)
	}
	m := st.Mirrors[0]
	if got := len(m.LastRun.Refused) + m.LastRun.RefusedMore; got != refused || len(m.LastRun.Refused) > maxListed {
		t.Errorf("refusals: %d listed + %d counted, want at most %d listed and %d in all", len(m.LastRun.Refused), m.LastRun.RefusedMore, maxListed, refused)
	}
	if got := len(m.Pending) + m.PendingMore; got != pending+7 || len(m.Pending) > maxListed {
		t.Errorf("pending: %d listed + %d counted, want at most %d listed and %d in all", len(m.Pending), m.PendingMore, maxListed, pending+7)
	}
	if !strings.Contains(page, fmt.Sprintf("Refused in the last run: %d", refused)) || !strings.Contains(page, fmt.Sprintf("and %d more, not listed", refused-maxListed)) {
		t.Errorf("the page does not count every refusal")
	}
}
