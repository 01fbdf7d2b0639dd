package main

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// progressInterval is the least time between two updates of the display.
const progressInterval = 200 * time.Millisecond

// newProgress returns the engine's progress callback and a function to call
// when the run ends. The display (files, bytes, rate, on one line of stderr)
// appears only when enabled and stderr is a terminal: never in JSON mode,
// never in a log file or a CI job. Otherwise the callback is nil, which the
// engine takes as no display.
func newProgress(enabled bool) (func(files, bytes int64), func()) {
	if !enabled || !stderrIsTerminal() {
		return nil, func() {}
	}
	p := &progress{start: time.Now(), w: os.Stderr}
	return p.update, p.finish
}

type progress struct {
	mu           sync.Mutex
	w            *os.File
	start, shown time.Time
	files, bytes int64
	width        int // of the last line drawn, to blank it out
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
	p.draw(now)
}

func (p *progress) draw(now time.Time) {
	elapsed := now.Sub(p.start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(p.bytes) / elapsed
	}
	line := fmt.Sprintf("%d files, %s, %s/s", p.files, humanBytes(p.bytes), humanBytes(int64(rate)))
	pad := p.width - len(line)
	p.width = len(line)
	if pad < 0 {
		pad = 0
	}
	fmt.Fprintf(p.w, "\r%s%*s", line, pad, "")
}

// finish blanks the progress line so that the summary starts clean.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.width > 0 {
		fmt.Fprintf(p.w, "\r%*s\r", p.width, "")
		p.width = 0
	}
}
