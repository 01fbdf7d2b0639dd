package sink_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

const listVersion = "019a0000-0000-7000-8000-000000000001"

var listFiles = []catalog.File{
	{Path: "main/events/a b.parquet", Size: 10, Footer: 4},
	{Path: "main/events/delete-1.parquet", Size: 7, Footer: -1, Delete: true},
	{Path: "main/events/dv.puffin", Size: 3, Footer: -1, Delete: true, Puffin: true},
	{Path: "main/events/tab\there.parquet", Size: 5, Footer: 2}, // written quoted
	{Path: "main/events/é.parquet", Size: -1, Footer: -1},
}

// writeList writes listVersion's list of the given files and epoch.
func writeList(t *testing.T, s *sink.Sink, epoch string, files []catalog.File) {
	t.Helper()
	writeListOf(t, s, listVersion, epoch, files)
}

// writeListOf writes version id's list of the given files and epoch.
func writeListOf(t *testing.T, s *sink.Sink, id, epoch string, files []catalog.File) {
	t.Helper()
	w, err := sink.NewFileListWriter(t.TempDir(), id, epoch)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := w.Add(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.State().WriteFileList(context.Background(), w); err != nil {
		t.Fatal(err)
	}
}

// readList fetches listVersion's list of epoch and gives its files.
func readList(t *testing.T, s *sink.Sink, epoch string) ([]catalog.File, error) {
	t.Helper()
	l, err := s.State().FetchFileList(context.Background(), listVersion, epoch, t.TempDir())
	if err != nil || l == nil {
		return nil, err
	}
	defer l.Remove()
	var got []catalog.File
	err = l.Each(func(f catalog.File) error {
		got = append(got, f)
		return nil
	})
	if err == nil && l.Files != int64(len(got)) {
		t.Fatalf("the list says %d files, gave %d", l.Files, len(got))
	}
	return got, err
}

// A version's file list is written and read back as it was, in each
// store; a list of another epoch, or one cut short or damaged, is an
// error (the caller reads the child whole), and none is nil; a new epoch
// makes every earlier list another epoch's; a dry run writes none.
func TestFileListsAreReadBackOnlyWhole(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		_, mirror := st.open(t)
		s := sink.New(mirror, sink.Options{})
		epoch, err := s.State().FileListEpoch(ctx)
		if err != nil || len(epoch) != 32 {
			t.Fatalf("epoch %q, %v", epoch, err)
		}
		if again, err := s.State().FileListEpoch(ctx); err != nil || again != epoch {
			t.Fatalf("the epoch read again is %q, %v; was %q", again, err, epoch)
		}
		if got, err := readList(t, s, epoch); got != nil || err != nil {
			t.Fatalf("no list: %v, %v", got, err)
		}
		w, err := sink.NewFileListWriter(t.TempDir(), listVersion, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Add(listFiles[1]); err != nil {
			t.Fatal(err)
		}
		if err := w.Add(listFiles[0]); err == nil || !strings.Contains(err.Error(), "not in path order") {
			t.Fatalf("a file out of order: %v", err)
		}
		w.Discard()
		writeList(t, s, epoch, listFiles)
		if got, err := readList(t, s, epoch); err != nil || !reflect.DeepEqual(got, listFiles) {
			t.Fatalf("read back %v, %v; want %v", got, err, listFiles)
		}
		if _, err := readList(t, s, strings.Repeat("0", 32)); err == nil || !strings.Contains(err.Error(), "another epoch") {
			t.Fatalf("a list of another epoch: %v", err)
		}

		// Damaged: the stored bytes, changed.
		name := sink.FileListsDir + listVersion + ".tsv.gz"
		raw := readState(t, mirror, name)
		text := gunzip(t, raw)
		for _, tc := range []struct {
			name string
			raw  []byte
			says string
		}{
			{"cut short (gzip)", raw[:len(raw)/2], "unexpected EOF"},
			{"without its end line", gz(t, text[:strings.Index(text, "end\t")]), "cut short"},
			{"a file taken out", gz(t, strings.Replace(text, "main/events/dv.puffin\t3\t-1\t3\n", "", 1)), "damaged"},
			{"a quoted path changed", gz(t, strings.Replace(text, `"main/events/tab\there.parquet"`, `"main/events/tab\tthere.parquet"`, 1)), "damaged"},
			{"a size changed", gz(t, strings.Replace(text, "\t10\t4\t", "\t11\t4\t", 1)), "damaged"},
			{"bytes after the end", gz(t, text+"x\n"), "after its end line"},
			{"another version's", gz(t, strings.Replace(text, listVersion, "019a0000-0000-7000-8000-000000000002", 1)), "not the file list of version"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := lock.WriteState(ctx, mirror, name, tc.raw); err != nil {
					t.Fatal(err)
				}
				if got, err := readList(t, s, epoch); err == nil || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("read %v, %v; want an error saying %q", got, err, tc.says)
				}
			})
		}

		// Its local copy, the file lines only, damaged after the fetch:
		// Each says so.
		writeList(t, s, epoch, listFiles)
		l, err := s.State().FetchFileList(ctx, listVersion, epoch, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		local, err := os.ReadFile(l.Path())
		if err != nil {
			t.Fatal(err)
		}
		if want := "main/events/a b.parquet\t10\t4\t0\n"; !strings.HasPrefix(string(local), want) || strings.Contains(string(local), "end\t") {
			t.Fatalf("the local copy is\n%s\nwant the file lines only, from %q", local, want)
		}
		if err := os.WriteFile(l.Path(), bytes.Replace(local, []byte("\t10\t4\t"), []byte("\t11\t4\t"), 1), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := l.Each(func(catalog.File) error { return nil }); err == nil || !strings.Contains(err.Error(), "damaged") {
			t.Fatalf("a local copy changed: %v", err)
		}
		l.Remove()

		// A new epoch (a prune's): the list written before is not read.
		writeList(t, s, epoch, listFiles)
		if err := s.State().NewFileListEpoch(ctx); err != nil {
			t.Fatal(err)
		}
		now, err := s.State().FileListEpoch(ctx)
		if err != nil || now == epoch {
			t.Fatalf("epoch after a new one: %q, %v (was %q)", now, err, epoch)
		}
		if _, err := readList(t, s, now); err == nil || !strings.Contains(err.Error(), "another epoch") {
			t.Fatalf("a list of the epoch before: %v", err)
		}

		// Removed, and removed again.
		for range 2 {
			if err := s.State().RemoveFileList(ctx, listVersion); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := readList(t, s, now); got != nil || err != nil {
			t.Fatalf("a removed list: %v, %v", got, err)
		}

		// A dry run writes none.
		dry := sink.New(mirror, sink.Options{DryRun: true})
		writeList(t, dry, now, listFiles)
		if got, err := readList(t, s, now); got != nil || err != nil {
			t.Fatalf("a dry run's list: %v, %v", got, err)
		}
	})
}

func readState(t *testing.T, b backend.Reader, name string) []byte {
	t.Helper()
	rc, err := lock.OpenState(context.Background(), b, name)
	if err != nil || rc == nil {
		t.Fatalf("opening %s: %v", name, err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func gunzip(t *testing.T, raw []byte) string {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func gz(t *testing.T, text string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write([]byte(text))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
