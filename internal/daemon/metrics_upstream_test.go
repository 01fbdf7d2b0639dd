package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A frozen upstream turns fdl_mirror_upstream_stale to 1 once no ref has
// changed for longer than max_upstream_age; a recent change keeps it 0.
func TestUpstreamStaleMetric(t *testing.T) {
	m := NewMetrics()
	now := time.Now()
	m.ObserveUpstream("towns", now.Add(-2*time.Hour), time.Hour, now)
	m.ObserveUpstream("roads", now.Add(-time.Minute), time.Hour, now)
	m.ObserveUpstream("rivers", now.Add(-48*time.Hour), 0, now) // no max_upstream_age: never stale
	want := `
# HELP fdl_mirror_upstream_stale 1 when no selected upstream ref changed for longer than the mirror's max_upstream_age (a frozen upstream), else 0.
# TYPE fdl_mirror_upstream_stale gauge
fdl_mirror_upstream_stale{mirror="rivers"} 0
fdl_mirror_upstream_stale{mirror="roads"} 0
fdl_mirror_upstream_stale{mirror="towns"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "fdl_mirror_upstream_stale"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.upChange.WithLabelValues("towns")); int64(got) != now.Add(-2*time.Hour).Unix() {
		t.Errorf("last change of towns = %v", got)
	}
}
