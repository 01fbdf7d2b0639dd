package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/mirror"
)

// progressInterval is the least time between two updates of the display.
const progressInterval = 200 * time.Millisecond

// stderrOut is stderr shared by the logger and the progress line: a log
// entry written while the line is shown blanks it first and draws it again
// after, so the two never run into each other.
var stderrOut = &terminalOut{}

type terminalOut struct {
	mu   sync.Mutex
	line string // the progress line on screen, "" for none
}

const clearLine = "\r\033[K"

func (o *terminalOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.line == "" {
		return os.Stderr.Write(p)
	}
	os.Stderr.WriteString(clearLine)
	n, err := os.Stderr.Write(p)
	os.Stderr.WriteString(o.line)
	return n, err
}

func (o *terminalOut) Sync() error { return nil }

func (o *terminalOut) show(line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.line = line
	os.Stderr.WriteString(clearLine + line)
}

func (o *terminalOut) hide() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.line != "" {
		os.Stderr.WriteString(clearLine)
		o.line = ""
	}
}

// newProgress returns the engine's progress callback and a function to call
// when the run ends. The display (files, bytes, rate, on one line of stderr)
// appears only when enabled and stderr is a terminal: never in JSON mode,
// never in a log file or a CI job. Otherwise the callback is nil, which the
// engine takes as no display.
func newProgress(enabled bool) (func(files, bytes int64), func()) {
	if !enabled || !stderrIsTerminal() {
		return nil, func() {}
	}
	p := &progress{start: time.Now()}
	return p.update, stderrOut.hide
}

type progress struct {
	mu           sync.Mutex
	start, shown time.Time
	files, bytes int64
}

// update is called by the engine's copiers, concurrently and with running
// totals that may arrive slightly out of order: keep the largest.
func (p *progress) update(files, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if files > p.files {
		p.files = files
	}
	if bytes > p.bytes {
		p.bytes = bytes
	}
	now := time.Now()
	if now.Sub(p.shown) < progressInterval {
		return
	}
	p.shown = now
	rate := 0.0
	if elapsed := now.Sub(p.start).Seconds(); elapsed > 0 {
		rate = float64(p.bytes) / elapsed
	}
	stderrOut.show(fmt.Sprintf("%d files, %s, %s/s", p.files, mirror.HumanBytes(p.bytes), mirror.HumanBytes(int64(rate))))
}
