package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"time"
)

// The chart `make bench` writes (docs/bench.svg): each scenario's wall
// time for fdl-mirror and rclone copy side by side, as horizontal bars on
// a logarithmic scale (times run from 10 ms to minutes). Plain SVG, by
// hand: no dependency for a picture.

// chartRow is one scenario on one repository and pair of stores.
type chartRow struct {
	label string
	bars  []chartBar
}

// chartBar is one tool's time in a scenario.
type chartBar struct {
	tool string
	wall time.Duration
}

// chartTools are the tools the chart shows, in this order, with their
// colours.
var chartTools = []struct{ name, colour string }{
	{"fdl-mirror", "#2b6cb0"},
	{"rclone copy", "#dd6b20"},
}

// chartRows are the groups' times of the chart's tools.
func (b *bench) chartRows() []chartRow {
	var rows []chartRow
	for _, g := range b.groups {
		row := chartRow{label: fmt.Sprintf("%s · %s · %s", g.repo, g.scenario, g.stores)}
		for _, t := range chartTools {
			for _, m := range g.rows {
				if m.tool == t.name && m.wall > 0 {
					row.bars = append(row.bars, chartBar{m.tool, m.wall})
				}
			}
		}
		if len(row.bars) > 0 {
			rows = append(rows, row)
		}
	}
	return rows
}

// writeSVG draws rows under title.
func writeSVG(w io.Writer, title string, rows []chartRow) error {
	const (
		labelW = 430 // scenario labels, left of the bars
		plotW  = 520
		barH   = 14
		gap    = 10 // between rows
		top    = 60
		right  = 90 // room for the time after the longest bar
	)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		for _, b := range r.bars {
			s := b.wall.Seconds()
			lo, hi = math.Min(lo, s), math.Max(hi, s)
		}
	}
	if len(rows) == 0 {
		lo, hi = 0.01, 1
	}
	// The axis runs over whole decades around the times.
	dLo := math.Floor(math.Log10(math.Max(lo, 1e-3)))
	dHi := math.Max(math.Ceil(math.Log10(hi)), dLo+1)
	x := func(s float64) float64 {
		return labelW + plotW*(math.Log10(math.Max(s, math.Pow(10, dLo)))-dLo)/(dHi-dLo)
	}
	rowH := len(chartTools)*barH + gap
	height := top + len(rows)*rowH + 40
	width := labelW + plotW + right

	var out bytes.Buffer
	esc := func(s string) string {
		var b bytes.Buffer
		xml.EscapeText(&b, []byte(s))
		return b.String()
	}
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&out, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&out, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", esc(title))
	for i, t := range chartTools {
		lx := labelW + i*140
		fmt.Fprintf(&out, `<rect x="%d" y="32" width="12" height="12" fill="%s"/><text x="%d" y="43">%s</text>`+"\n", lx, t.colour, lx+16, esc(t.name))
	}
	// Decade grid lines, labelled below the plot.
	for d := dLo; d <= dHi; d++ {
		gx := x(math.Pow(10, d))
		fmt.Fprintf(&out, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ccc"/>`+"\n", gx, top-4, gx, height-30)
		fmt.Fprintf(&out, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", gx, height-14, esc(decade(d)))
	}
	for i, r := range rows {
		y := top + i*rowH
		fmt.Fprintf(&out, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-8, y+barH+3, esc(r.label))
		for j, t := range chartTools {
			for _, b := range r.bars {
				if b.tool != t.name {
					continue
				}
				by := y + j*barH
				bw := x(b.wall.Seconds()) - labelW
				fmt.Fprintf(&out, `<rect class="bar" x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s</title></rect>`+"\n",
					labelW, by, math.Max(bw, 1), barH-2, t.colour, esc(r.label+", "+b.tool), esc(seconds(b.wall)))
				fmt.Fprintf(&out, `<text x="%.1f" y="%d" font-size="10">%s</text>`+"\n", labelW+math.Max(bw, 1)+4, by+barH-3, esc(seconds(b.wall)))
			}
		}
	}
	fmt.Fprintf(&out, `<text x="%d" y="%d" fill="#555">wall time, logarithmic scale</text>`+"\n", labelW, height-2)
	out.WriteString("</svg>\n")
	_, err := w.Write(out.Bytes())
	return err
}

// decade labels a power of ten as a time.
func decade(d float64) string {
	s := math.Pow(10, d)
	switch {
	case s < 1:
		return fmt.Sprintf("%g ms", s*1000)
	default:
		return fmt.Sprintf("%g s", s)
	}
}
