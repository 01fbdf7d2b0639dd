package sink_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/sink/lock"
)

const (
	mergeParent = "019a0000-0000-7000-8000-0000000000a1"
	mergeChild  = "019a0000-0000-7000-8000-0000000000a2"
)

// mergeSink is a sink on a folder, with its lists' epoch.
func mergeSink(t *testing.T) (*sink.Sink, backend.Backend, string) {
	t.Helper()
	b, err := local.Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := sink.New(b, sink.Options{})
	epoch, err := s.State().FileListEpoch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s, b, epoch
}

// listOfFiles writes version id's list of files to s and fetches it.
func listOfFiles(t *testing.T, s *sink.Sink, id, epoch string, files []catalog.File) *sink.FileList {
	t.Helper()
	writeListOf(t, s, id, epoch, files)
	return fetchList(t, s, id, epoch)
}

func writeAndFetch(t *testing.T, s *sink.Sink, w *sink.FileListWriter, id, epoch string) *sink.FileList {
	t.Helper()
	if err := s.State().WriteFileList(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	return fetchList(t, s, id, epoch)
}

func fetchList(t *testing.T, s *sink.Sink, id, epoch string) *sink.FileList {
	t.Helper()
	l, err := s.State().FetchFileList(context.Background(), id, epoch, t.TempDir())
	if err != nil || l == nil {
		t.Fatalf("fetching %s's list: %v", id, err)
	}
	t.Cleanup(l.Remove)
	return l
}

func filesOf(t *testing.T, l *sink.FileList) []catalog.File {
	t.Helper()
	var got []catalog.File
	if err := l.Each(func(f catalog.File) error { got = append(got, f); return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// mergeWant is what a child's list must be: the parent's files less the
// removed and those of a path added, with the added, in path order.
func mergeWant(parent []catalog.File, removed []int64, added []catalog.File) []catalog.File {
	paths := map[string]bool{}
	for _, f := range added {
		paths[f.Path] = true
	}
	var want []catalog.File
	for i, f := range parent {
		if !slices.Contains(removed, int64(i)) && !paths[f.Path] {
			want = append(want, f)
		}
	}
	want = append(want, added...)
	slices.SortFunc(want, func(a, b catalog.File) int { return strings.Compare(a.Path, b.Path) })
	return want
}

// A child's list merged from a parent in members is the parent's files
// less the removed, with the added, whatever members the changes fall in
// (the first, the last, a member's first path, before and after every
// path, none); each member of the parent that no change falls in is in
// the child's bytes as it was compressed, and the child is in members
// too. A parent of one member (written before members) merges alike.
func TestMergeCopiesTheMembersNoChangeFallsIn(t *testing.T) {
	s, b, epoch := mergeSink(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var parentFiles []catalog.File
	for i := range 30000 {
		f := catalog.File{Path: fmt.Sprintf("main/t/%06d.parquet", i*2), Size: rng.Int64N(1 << 30), Footer: rng.Int64N(1 << 16)}
		if i%997 == 5 {
			f.Path = fmt.Sprintf("main/t/%06d\tq.parquet", i*2) // written quoted
		}
		if i%500 == 7 {
			f.Delete, f.Footer = true, -1
		}
		parentFiles = append(parentFiles, f)
	}
	parent := listOfFiles(t, s, mergeParent, epoch, parentFiles)
	ms := parent.Members()
	if len(ms) < 3 {
		t.Fatalf("the parent's list of %d files in %d members; want 3 or more", len(parentFiles), len(ms))
	}
	parentRaw := readState(t, b, sink.FileListName(mergeParent))
	newFile := func(path string) catalog.File {
		return catalog.File{Path: path, Size: 42, Footer: 8}
	}
	firstOf := func(k int) int64 { return ms[k].Lo }
	cases := []struct {
		name    string
		removed []int64
		added   []catalog.File
	}{
		{"no change", nil, nil},
		{"one new file in the middle", nil, []catalog.File{newFile(fmt.Sprintf("main/t/%06d.parquet", 2*int(ms[1].Lo)+1))}},
		{"one removed", []int64{firstOf(1) + 3}, nil},
		{"a member's first path replaced", nil, []catalog.File{newFile(ms[2].First)}},
		{"a member's first removed", []int64{firstOf(2)}, nil},
		{"before every path", nil, []catalog.File{newFile("a.parquet")}},
		{"after every path", nil, []catalog.File{newFile("z.parquet")}},
		{"the last removed", []int64{int64(len(parentFiles) - 1)}, nil},
		{"every first line removed", func() (r []int64) {
			for _, m := range ms {
				r = append(r, m.Lo)
			}
			return r
		}(), nil},
	}
	var scattered []int64
	var scatteredAdded []catalog.File
	for i := 0; i < len(parentFiles); i += 1 + rng.IntN(3000) {
		scattered = append(scattered, int64(i))
		scatteredAdded = append(scatteredAdded, newFile(fmt.Sprintf("main/t/%06d.parquet", 2*i+1)))
	}
	cases = append(cases, struct {
		name    string
		removed []int64
		added   []catalog.File
	}{"scattered", scattered, scatteredAdded})

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := mergeWant(parentFiles, tc.removed, tc.added)
			for _, old := range []bool{false, true} {
				// A copy of the parent of its own, removed once merged
				// (as a run removes it, before the child is written).
				cp, err := s.State().FetchFileList(context.Background(), mergeParent, epoch, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				if old {
					// The same parent as a list of one member.
					cp.AsOneMember()
				}
				w, err := sink.NewFileListWriter(t.TempDir(), mergeChild, epoch)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Merge(cp, tc.removed, tc.added); err != nil {
					t.Fatal(err)
				}
				cp.Remove()
				child := writeAndFetch(t, s, w, mergeChild, epoch)
				if got := filesOf(t, child); !reflect.DeepEqual(got, want) {
					t.Fatalf("one member %v: the child's list has %d files, want %d", old, len(got), len(want))
				}
				if len(child.Members()) == 0 {
					t.Fatalf("the child's list is not in members")
				}
				if old {
					continue
				}
				childRaw := readState(t, b, sink.FileListName(mergeChild))
				for k, m := range ms {
					untouched := !slices.ContainsFunc(tc.removed, func(at int64) bool { return at >= m.Lo && at < m.Hi }) &&
						!slices.ContainsFunc(tc.added, func(f catalog.File) bool {
							return (k == 0 || f.Path >= m.First) && (k+1 == len(ms) || f.Path < ms[k+1].First)
						})
					copied := bytes.Contains(childRaw, parentRaw[m.CompressedFrom:m.CompressedTo])
					if untouched != copied {
						t.Errorf("member %d (lines %d–%d): no change in it %v, copied as it was %v", k, m.Lo, m.Hi, untouched, copied)
					}
				}
			}
		})
	}
}

// A list of one member (as written before members), and one whose
// members end inside a line, are read whole, without members; one whose
// end line shares a member is too.
func TestListsNotInMembersAreReadWhole(t *testing.T) {
	s, b, epoch := mergeSink(t)
	files := []catalog.File{{Path: "a.parquet", Size: 1, Footer: 1}, {Path: "b.parquet", Size: 2, Footer: 1}}
	listOfFiles(t, s, mergeParent, epoch, files)
	name := sink.FileListName(mergeParent)
	text := gunzip(t, readState(t, b, name))
	end := strings.Index(text, "end\t")
	a := strings.Index(text, "a.parquet")
	for _, tc := range []struct {
		name  string
		parts []string
		fails string
	}{
		{"one member", []string{text}, ""},
		{"the end line with the files", []string{text[:a], text[a:]}, ""},
		{"the header with the files", []string{text[:end], text[end:]}, ""},
		{"a member ends inside a line", []string{text[:a], text[a : a+4], text[a+4 : end], text[end:]}, "inside a line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var raw []byte
			for _, p := range tc.parts {
				raw = append(raw, gz(t, p)...)
			}
			if err := lock.WriteState(context.Background(), b, name, raw); err != nil {
				t.Fatal(err)
			}
			l, err := s.State().FetchFileList(context.Background(), mergeParent, epoch, t.TempDir())
			if tc.fails != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fails) {
					t.Fatalf("fetched %v, %v; want an error saying %q", l, err, tc.fails)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Remove()
			if l.Members() != nil || l.HasCompressedCopy() {
				t.Fatalf("members %v, a compressed copy %v; want none", l.Members(), l.HasCompressedCopy())
			}
			if got := filesOf(t, l); !reflect.DeepEqual(got, files) {
				t.Fatalf("read %v, want %v", got, files)
			}
		})
	}
}

// The parent's uncompressed copy changed after it was fetched (as only
// a process of the mirror's user outside a reader's sandbox could): a
// member the merge reads is read from the compressed copy, as fetched;
// one it copies is hashed from the changed copy, and the child's list
// fails its checksum, read as none. Never a list that holds itself and
// is wrong.
func TestMergeOfAChangedCopyIsNeverTrusted(t *testing.T) {
	s, _, epoch := mergeSink(t)
	var files []catalog.File
	for i := range 15000 {
		files = append(files, catalog.File{Path: fmt.Sprintf("main/t/%06d.parquet", i*2), Size: 1000, Footer: 10})
	}
	parent := listOfFiles(t, s, mergeParent, epoch, files)
	if len(parent.Members()) < 2 {
		t.Fatalf("%d members", len(parent.Members()))
	}
	plain, err := os.ReadFile(parent.Path())
	if err != nil {
		t.Fatal(err)
	}
	// The size of the first file (member 0) changed in place: 9999.
	changed := bytes.Replace(plain, []byte("\t1000\t"), []byte("\t9999\t"), 1)
	if err := os.WriteFile(parent.Path(), changed, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	merge := func(removed []int64) (*sink.FileList, error) {
		w, err := sink.NewFileListWriter(t.TempDir(), mergeChild, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Merge(parent, removed, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.State().WriteFileList(ctx, w); err != nil {
			t.Fatal(err)
		}
		l, err := s.State().FetchFileList(ctx, mergeChild, epoch, t.TempDir())
		if l != nil {
			t.Cleanup(l.Remove)
		}
		return l, err
	}

	// Member 0 read (its second file removed): the child is right.
	l, err := merge([]int64{1})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := filesOf(t, l), mergeWant(files, []int64{1}, nil); !reflect.DeepEqual(got, want) {
		t.Fatalf("the child's list of %d files is not the parent's less one (%d)", len(got), len(want))
	}

	// Member 0 copied (the change in member 1): read as none.
	if l, err := merge([]int64{parent.Members()[1].Lo}); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("a child's list made from a changed copy: %v, %v; want it damaged", l, err)
	}
}
