package main

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fdl-mirror/fdl-mirror/internal/redact"
)

// stderrIsTerminal says whether a person is probably reading stderr. A
// character device is a terminal for this purpose (or /dev/null, where
// the choice does not matter), which spares a dependency on x/term.
func stderrIsTerminal() bool {
	fi, err := os.Stderr.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// newLogger makes the logger every command logs to, on stderr: JSON for
// machines (stderr not a terminal, or --json asked for machine output),
// colourless console lines for a person at a terminal.
func newLogger(level string, jsonOut bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "time"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	var encoder zapcore.Encoder
	if jsonOut || !stderrIsTerminal() {
		encoder = zapcore.NewJSONEncoder(enc)
	} else {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		enc.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc.EncodeCaller = nil
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	// Every line passes through redact: an error a log quotes may hold
	// an address with its credentials, or a header's value echoed back.
	core := zapcore.NewCore(encoder, zapcore.AddSync(redact.Writer(stderrOut)), lvl)
	return zap.New(core, zap.AddStacktrace(zapcore.DPanicLevel)), nil
}
