package source

import (
	"context"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Refs is the upstream's refs as ReadRefs read them.
type Refs struct {
	Refs repo.Refs // the refs that follow the rules
	Head string    // the ref HEAD names; "" without a readable HEAD
	// Refused are the refs (and HEAD) that break the rules, and the
	// failure to read them at all.
	Refused []*RefusalError
	// Unread: the refs could not be read at all (Refs is empty); Err
	// says why (the refusal in Refused says it naming the source).
	Unread bool
	Err    error
}

// ReadRefs reads every ref upstream: by listing refs/ where the store can
// list, else from refs.json. Refs that break the rules are refused and
// left out; the rest go on. A ref file whose listing shows the content of
// the value seen gives for it (the value the mirror last saw upstream),
// or of the value the previous ReadRefs read (before the run took the
// lock), is not read again (see repo.ListingHolds).
func (s *Source) ReadRefs(ctx context.Context, seen func(ref string) (version string, ok bool)) Refs {
	if out, ok := s.shared.rememberedRefs(); ok {
		return out // a fan-out's later sink: the refs as the first read them
	}
	out := s.readRefs(ctx, seen)
	head, err := s.readHead(ctx)
	if err != nil {
		out.Refused = append(out.Refused, err.(*RefusalError))
	}
	out.Head = head
	s.shared.rememberRefs(out)
	return out
}

// RefsHint is upstream's refs as its refs.json gives them, read in one
// request and not judged further: a hint, for a run that decides from it
// whether to take the mirror's lock before it reads both sides. Nothing
// is mirrored from it; the refs a run mirrors are those ReadRefs reads.
// ok is false where refs.json is absent, larger than limit or malformed.
// A fan-out's later sink gets the refs as the first sink read them, and
// no request.
func (s *Source) RefsHint(ctx context.Context, limit int64) (refs repo.Refs, ok bool) {
	if out, ok := s.shared.rememberedRefs(); ok {
		return out.Refs, !out.Unread
	}
	raw, err := backend.ReadAll(ctx, s.r, repo.RefsFile, limit)
	if err != nil {
		return nil, false
	}
	refs, _, err = repo.ParseRefsJSON(raw)
	return refs, err == nil
}

// ReadRefsWithoutHead is ReadRefs for a reader that follows no HEAD
// (status, prune): the same refs, refused for the same rules; HEAD is
// not read.
func (s *Source) ReadRefsWithoutHead(ctx context.Context) Refs {
	return s.readRefs(ctx, nil)
}

// readRefs is ReadRefs but HEAD; seen may be nil.
func (s *Source) readRefs(ctx context.Context, seen func(ref string) (version string, ok bool)) Refs {
	var out Refs
	var bad []*repo.RefError
	var err error
	if s.r.Properties().CanList {
		var files []backend.FileInfo
		if files, err = repo.ListRefFiles(ctx, s.r); err == nil {
			read := s.read
			out.Refs, bad, err = repo.ReadRefFiles(ctx, s.r, files, func(fi backend.FileInfo) (string, bool) {
				if seen != nil {
					if id, ok := seen(fi.Name); ok && repo.ListingHolds(fi, id) {
						return id, true
					}
				}
				id, ok := read[fi.Name]
				return id, ok && repo.ListingHolds(fi, id)
			})
			if err == nil {
				s.read = out.Refs
			}
		}
	} else {
		out.Refs, bad, err = repo.ReadRefs(ctx, s.r)
	}
	if err != nil {
		where := repo.RefsDir
		if !s.r.Properties().CanList {
			where = repo.RefsFile
		}
		out.Refused = append(out.Refused, Refuse(ReasonBadRef, "", where, "source %s: %v", s.r.Location(), err))
		out.Refs, out.Unread, out.Err = repo.Refs{}, true, err
	}
	for _, b := range bad {
		r := Refuse(ReasonBadRef, "", b.Ref, "%v", b.Err)
		r.Ref = b.Ref
		out.Refused = append(out.Refused, r)
	}
	return out
}

// readHead reads the ref HEAD names: "" and no error without a HEAD.
func (s *Source) readHead(ctx context.Context) (string, error) {
	raw, err := backend.ReadAll(ctx, s.r, repo.HeadFile, repo.MaxSmallFile)
	switch {
	case backend.IsNotExist(err):
		return "", nil
	case err != nil:
		return "", Refuse(ReasonBadRef, "", repo.HeadFile, "reading %s: %v", repo.HeadFile, err)
	}
	head, err := repo.ParseHead(raw)
	if err != nil {
		r := Refuse(ReasonBadRef, "", repo.HeadFile, "%v", err)
		r.Ref = repo.HeadFile
		return "", r
	}
	return head, nil
}
