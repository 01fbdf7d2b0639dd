package mirror

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fdl-mirror/fdl-mirror/internal/redact"
)

// A sink's logger keeps its own `sink` field and drops those added after,
// whether to the logger (With) or to a line, and keeps the other fields
// and the wrapped core's level.
func TestNamingSinkDropsLaterSinkFields(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	addr := "s3://key:secret@host/bucket/"
	log := namingSink(zap.New(core), addr)
	log.With(zap.String("sink", "by With"), zap.String("owner", "me")).Info("a", zap.String("sink", "by the line"), zap.Int("n", 1))
	log.Debug("below the level", zap.String("sink", "x"))
	all := logs.All()
	if len(all) != 1 {
		t.Fatalf("%d lines, want 1: %v", len(all), all)
	}
	fields := all[0].ContextMap()
	if len(all[0].Context) != 3 || fields["sink"] != redact.URL(addr) || fields["owner"] != "me" || fields["n"] != int64(1) {
		t.Errorf("fields %v (%d)", fields, len(all[0].Context))
	}
	if strings.Contains(fmt.Sprint(fields), "secret") {
		t.Errorf("the sink's password is logged: %v", fields)
	}
}
