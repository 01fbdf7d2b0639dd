package source

import (
	"context"
	"io"
	"strings"
	"sync"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// A repository read whole, as verify checks it without trusting it: one
// listing of everything, refs.json and HEAD as a reader that follows
// them finds them, the sizes and ends of its data files, and the first
// bytes of the files at its root. Each error of a read is the store's
// (a *ReadError where a file could not be read at all), each error of a
// rule repo's parser's, for the caller to report as it finds them.

// Whole is the repository as verify reads it, whole.
type Whole struct{ s *Source }

// Whole is the repository read whole, for verify.
func (s *Source) Whole() Whole { return Whole{s} }

// Listing is the whole repository, listed once (see Whole.List).
type Listing struct {
	Versions map[string]map[string]int64 // each version's files and sizes
	Data     map[string]int64            // data_dir's files and sizes
	Root     []string                    // the files at the root
}

// List lists the whole repository once, by data_dir as ReadSettings
// read it; nil where the store cannot list.
func (w Whole) List(ctx context.Context) (*Listing, error) {
	s := w.s
	if !s.CanList() {
		return nil, nil
	}
	l := &Listing{Versions: map[string]map[string]int64{}, Data: map[string]int64{}}
	err := s.r.List(ctx, "", func(fi backend.FileInfo) error {
		if id, file, ok := strings.Cut(strings.TrimPrefix(fi.Name, repo.VersionsDir), "/"); ok && strings.HasPrefix(fi.Name, repo.VersionsDir) {
			if l.Versions[id] == nil {
				l.Versions[id] = map[string]int64{}
			}
			l.Versions[id][file] = fi.Size
		}
		if strings.HasPrefix(fi.Name, s.settings.DataDir) {
			l.Data[fi.Name] = fi.Size
		} else if !strings.Contains(fi.Name, "/") {
			l.Root = append(l.Root, fi.Name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// RefsJSON reads refs.json, under limit bytes: the refs it lists that
// follow the rules, those that break them, and the error of a refs.json
// that could not be read (a *ReadError) or breaks the rules as a whole.
func (w Whole) RefsJSON(ctx context.Context, limit int64) (repo.Refs, []*repo.RefError, error) {
	raw, err := backend.ReadAll(ctx, w.s.r, repo.RefsFile, limit)
	if err != nil {
		return nil, nil, &ReadError{repo.RefsFile, err}
	}
	return repo.ParseRefsJSON(raw)
}

// Head reads HEAD: the ref it names. The error is a *ReadError where
// HEAD could not be read (or is not there), else the rule it breaks.
func (w Whole) Head(ctx context.Context) (string, error) {
	raw, err := backend.ReadAll(ctx, w.s.r, repo.HeadFile, repo.MaxSmallFile)
	if err != nil {
		return "", &ReadError{repo.HeadFile, err}
	}
	return repo.ParseHead(raw)
}

// FileSize is a file's size, asked of the store alone.
func (w Whole) FileSize(ctx context.Context, name string) (int64, error) {
	fi, err := w.s.r.Stat(ctx, name)
	return fi.Size, err
}

// Prefix reads a file's first n bytes (fewer where it is shorter).
func (w Whole) Prefix(ctx context.Context, name string, n int) ([]byte, error) {
	rc, err := w.s.r.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	head := make([]byte, n)
	got, _ := io.ReadFull(rc, head)
	return head[:got], nil
}

// Ends reads the first nHead and the last nTail bytes of a file and its
// size. A store whose reader can seek (a local file) is read at both ends
// only; other stores stream the file through, keeping its last bytes.
func (w Whole) Ends(ctx context.Context, name string, nHead, nTail int) (head, tail []byte, size int64, err error) {
	rc, err := w.s.r.Open(ctx, name)
	if err != nil {
		return nil, nil, 0, err
	}
	defer rc.Close()
	if ra, ok := rc.(interface {
		io.ReaderAt
		io.Seeker
	}); ok {
		size, err = ra.Seek(0, io.SeekEnd)
		if err != nil {
			return nil, nil, 0, err
		}
		head = make([]byte, min(int64(nHead), size))
		if _, err := ra.ReadAt(head, 0); err != nil && err != io.EOF {
			return nil, nil, 0, err
		}
		tail = make([]byte, min(int64(nTail), size))
		if _, err := ra.ReadAt(tail, size-int64(len(tail))); err != nil && err != io.EOF {
			return nil, nil, 0, err
		}
		return head, tail, size, nil
	}
	buf := endsBuffers.Get().(*[]byte)
	defer endsBuffers.Put(buf)
	var last []byte // the last nTail bytes seen so far
	for {
		n, err := rc.Read(*buf)
		chunk := (*buf)[:n]
		if len(head) < nHead {
			head = append(head, chunk[:min(n, nHead-len(head))]...)
		}
		size += int64(n)
		last = append(last, chunk[max(0, n-nTail):]...)
		if len(last) > nTail {
			last = append(last[:0], last[len(last)-nTail:]...)
		}
		if err == io.EOF {
			return head, last, size, nil
		}
		if err != nil {
			return nil, nil, 0, err
		}
		if ctx.Err() != nil {
			return nil, nil, 0, ctx.Err()
		}
	}
}

var endsBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
