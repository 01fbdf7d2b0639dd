package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// The chart parses as XML and has one bar per figure it is given, each
// titled with its scenario, tool and time.
func TestSVGHasOneBarPerFigure(t *testing.T) {
	b := &bench{groups: []*group{
		{repo: "small", scenario: "full", stores: "s3→s3", rows: []*measure{
			{tool: "fdl-mirror", wall: 350 * time.Millisecond},
			{tool: "rclone copy", wall: 1650 * time.Millisecond},
			{tool: "rclone copy --fast-list --checksum", wall: time.Second}, // not charted
		}},
		{repo: "medium", scenario: "no-op", stores: "local→local", rows: []*measure{
			{tool: "fdl-mirror", wall: 20 * time.Millisecond},
			{tool: "rclone copy", wall: 260 * time.Millisecond},
		}},
		{repo: "big", scenario: "one <large> file & more", stores: "local→s3", rows: []*measure{
			{tool: "fdl-mirror", wall: 5680 * time.Millisecond},
			{tool: "rclone copy", wall: 112 * time.Second},
			{tool: "cp", wall: 530 * time.Millisecond}, // not charted
		}},
		{repo: "big", scenario: "failed", stores: "local→local", rows: []*measure{
			{tool: "fdl-mirror"}, // no time: no bar
		}},
	}}
	var out bytes.Buffer
	if err := writeSVG(&out, "fdl-mirror & rclone", b.chartRows()); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&out)
	var bars, titles []string
	root := ""
	inBar := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v\n%s", err, out.String())
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
			}
			for _, a := range el.Attr {
				if el.Name.Local == "rect" && a.Name.Local == "class" && a.Value == "bar" {
					bars = append(bars, "")
					inBar = true
				}
			}
		case xml.EndElement:
			if el.Name.Local == "rect" {
				inBar = false
			}
		case xml.CharData:
			if inBar && strings.TrimSpace(string(el)) != "" {
				titles = append(titles, string(el))
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	if len(bars) != 6 {
		t.Fatalf("%d bars, want 6 (fdl-mirror and rclone copy in 3 scenarios)\ntitles: %q", len(bars), titles)
	}
	want := []string{
		"small · full · s3→s3, fdl-mirror: 0.35 s",
		"small · full · s3→s3, rclone copy: 1.65 s",
		"medium · no-op · local→local, fdl-mirror: 0.02 s",
		"medium · no-op · local→local, rclone copy: 0.26 s",
		"big · one <large> file & more · local→s3, fdl-mirror: 5.68 s",
		"big · one <large> file & more · local→s3, rclone copy: 112.0 s",
	}
	if strings.Join(titles, "\n") != strings.Join(want, "\n") {
		t.Errorf("bar titles:\n%s\nwant:\n%s", strings.Join(titles, "\n"), strings.Join(want, "\n"))
	}
}
