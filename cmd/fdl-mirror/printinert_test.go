package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/prune"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// A data file's path comes from an upstream catalog, and a valid name
// may hold any byte but NUL and "\": a hostile upstream can name a file
// with a terminal's escape sequence. Every line of the reports that
// shows such a name shows it inert, so that printing a report cannot
// retitle, recolour or rewrite the operator's terminal.
func TestReportLinesShowUpstreamNamesInert(t *testing.T) {
	const hostile = "main/t/\x1b]0;owned\x07\x1b[2J.parquet"
	sr := &fdlsync.Report{
		DryRun:     true,
		Planned:    []string{hostile},
		Distrusted: []string{hostile},
		Repaired:   []string{hostile},
		Pending:    []fdlsync.PendingVersion{{Version: hostile, Since: time.Unix(0, 0), Reason: "copy"}},
	}
	pr := &prune.Report{DryRun: false, DataFilesRemoved: []string{hostile}, MaybeRemoved: []string{hostile}}
	for _, c := range []struct {
		name  string
		print func(*bytes.Buffer)
	}{
		{"sync", func(b *bytes.Buffer) { printSummary(b, mirror.Job{}, sr, nil) }},
		{"prune", func(b *bytes.Buffer) { printPrune(b, mirror.PruneJob{}, pr, errors.New("stopped")) }},
	} {
		var b bytes.Buffer
		c.print(&b)
		out := b.String()
		if strings.ContainsAny(out, "\x1b\x07") {
			t.Errorf("%s: the report printed an escape byte:\n%q", c.name, out)
		}
		if !strings.Contains(out, "owned") {
			t.Errorf("%s: the hostile name is not shown at all:\n%q", c.name, out)
		}
	}
}
