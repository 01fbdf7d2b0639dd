package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
	"github.com/fdl-mirror/fdl-mirror/internal/redact"
)

// shown is an error as a person reads it: every address it quotes and
// every known secret redacted, and the upstream's control characters (a
// status line's escapes) made inert.
func shown(err error) string { return inert(err.Error()) }

// inert is text that may come from the upstream (a message, a name) as a
// terminal may show it: known secrets redacted, control characters
// escaped (redact.Inert). JSON needs neither: encoding/json escapes
// controls, and writeJSON redacts.
func inert(s string) string { return redact.Inert(redact.Text(s)) }

// finishRun prints what a run (a sync, a prune) did and returns its exit
// code: the one printer of both. A mirror.ConfigError is a usage error; a
// run that stopped, or refused something (refused), exits exitRefused.
// With --json, the report goes to w as one object behind the mirror's
// name, ok and the error; otherwise human prints the summary. A
// configuration error is said on stderr, and with --json has its object
// too (ok false, the error): a sync of several sinks prints one per sink
// in the order given, the sink whose address cannot be opened among them.
func finishRun(w io.Writer, cmd, name string, report any, refused bool, err error, jsonOut bool, log *zap.Logger, human func()) int {
	code := exitFor(err, refused)
	switch {
	case code == exitUsage:
		fmt.Fprintf(os.Stderr, "fdl-mirror %s: %s\n", cmd, shown(err))
		if !jsonOut {
			return exitUsage
		}
	case err != nil:
		log.Error(cmd+" stopped", zap.Error(err))
	}
	if !jsonOut {
		human()
		return code
	}
	head := struct {
		Mirror string `json:"mirror,omitempty"`
		OK     bool   `json:"ok"`
		Error  string `json:"error,omitempty"`
	}{Mirror: name, OK: code == exitOK}
	if err != nil {
		head.Error = redact.Text(err.Error())
	}
	writeJSON(w, joinObjects(mustMarshal(head), mustMarshal(report)))
	return code
}

// exitFor is a run's exit code: 2 for a mistake in what it was given (a
// *mirror.ConfigError), 1 for any other failure or a refusal, else 0.
func exitFor(err error, refused bool) int {
	switch {
	case errors.As(err, new(*mirror.ConfigError)):
		return exitUsage
	case err != nil || refused:
		return exitRefused
	}
	return exitOK
}

// joinObjects is one JSON object with a's fields, then b's: what
// embedding b's type in a's struct gives, for any report.
func joinObjects(a, b json.RawMessage) json.RawMessage {
	if len(b) <= len("{}") {
		return a
	}
	out := append(append([]byte{}, a[:len(a)-1]...), ',')
	return append(out, b[1:]...)
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the command's own report types always marshal
	}
	return b
}

// writeJSON writes v indented, on its own line: every --json output. It
// goes through redact.Writer, the last net under every address a report
// holds.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(redact.Writer(w))
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
