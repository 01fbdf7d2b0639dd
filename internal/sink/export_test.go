package sink

import "os"

// What the tests of package sink_test see of a list's members.

// MemberSpan is a member of a list's file lines: its lines' places
// [Lo, Hi), its bytes in the stored (compressed) list, its first path.
type MemberSpan struct {
	Lo, Hi                       int64
	CompressedFrom, CompressedTo int64
	First                        string
}

// Members are the members the fetch noted; nil for a list not in
// members.
func (l *FileList) Members() []MemberSpan {
	if l.members == nil {
		return nil
	}
	spans := []MemberSpan{}
	for _, m := range l.members {
		spans = append(spans, MemberSpan{Lo: m.lo, Hi: m.hi, CompressedFrom: m.compressedFrom, CompressedTo: m.compressed, First: m.first})
	}
	return spans
}

// AsOneMember makes the list one a merge reads as a list written in one
// member: no members, no compressed copy.
func (l *FileList) AsOneMember() {
	if l.gzPath != "" {
		os.Remove(l.gzPath)
	}
	l.members, l.gzPath = nil, ""
}

// HasCompressedCopy says whether the fetch kept the compressed bytes.
func (l *FileList) HasCompressedCopy() bool { return l.gzPath != "" }

// FileListName is the state file of version id's list.
var FileListName = fileListName
