package repo

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// RefReaders bounds the ref files read at once: a no-op run of a
// repository with 20,000 refs on S3 would otherwise wait for 20,000
// requests one after the other.
const RefReaders = 32

// ReadRefs reads a repository's refs: the ref files under refs/ where the
// store can list, else refs.json (readers that cannot list rely on it).
// Refs that break the rules are returned apart, each with its reason, so
// that the caller can refuse them and go on with the rest. The error is
// for refs that cannot be read at all: a failed listing, a missing or
// malformed refs.json.
func ReadRefs(ctx context.Context, r backend.Reader) (Refs, []*RefError, error) {
	if !r.Properties().CanList {
		raw, err := backend.ReadAll(ctx, r, RefsFile, MaxRefsJSON)
		if err != nil {
			return nil, nil, fmt.Errorf("%s cannot list and has no readable %s: %w", r.Location(), RefsFile, err)
		}
		return ParseRefsJSON(raw)
	}
	files, err := ListRefFiles(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	return ReadRefFiles(ctx, r, files, nil)
}

// ListRefFiles lists the files under refs/, sorted by name.
func ListRefFiles(ctx context.Context, r backend.Reader) ([]backend.FileInfo, error) {
	var files []backend.FileInfo
	err := r.List(ctx, RefsDir, func(fi backend.FileInfo) error {
		files = append(files, fi)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", RefsDir, err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, nil
}

// ReadRefFiles reads listed ref files, RefReaders at a time. known, when
// not nil, gives the value of a ref file the caller already knows from
// what the listing says of it (see ListingHolds); that file is not read.
// A known value is still checked as the file's content would be.
func ReadRefFiles(ctx context.Context, r backend.Reader, files []backend.FileInfo, known func(backend.FileInfo) (string, bool)) (Refs, []*RefError, error) {
	ids := make([]string, len(files))
	bad := make([]*RefError, len(files))
	errs := make([]error, len(files))
	var toRead []int // indexes of the files to read
	for i, fi := range files {
		if _, err := CheckRefName(fi.Name); err != nil {
			bad[i] = &RefError{fi.Name, err}
			continue
		}
		if known != nil {
			if id, ok := known(fi); ok {
				if _, err := ParseRefFile(fi.Name, RefFileContent(id)); err == nil {
					ids[i] = id
					continue
				}
			}
		}
		toRead = append(toRead, i)
	}
	readCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// RefReaders workers, each taking the next file to read: not a
	// goroutine per file, whose start and end for every one of 20,000
	// small local reads cost more than the reads (a no-op of the refs
	// bench's upstream on a disk spent 41,000 nanosleeps of the scheduler
	// in them).
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(RefReaders, len(toRead)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for readCtx.Err() == nil {
				k := int(next.Add(1)) - 1
				if k >= len(toRead) {
					return
				}
				i := toRead[k]
				raw, err := backend.ReadAll(readCtx, r, files[i].Name, MaxSmallFile)
				if err != nil {
					errs[i] = err
					cancel() // the whole read fails: stop the others
					return
				}
				if ids[i], err = ParseRefFile(files[i].Name, raw); err != nil {
					bad[i] = &RefError{files[i].Name, err}
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	// The first failure in name order that is not a cancellation another
	// failure caused.
	var first error
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, nil, err
		}
		if first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, nil, first
	}
	refs := Refs{}
	var refused []*RefError
	for i, fi := range files {
		switch {
		case bad[i] != nil:
			refused = append(refused, bad[i])
		case ids[i] != "":
			refs[fi.Name] = ids[i]
		}
	}
	return refs, refused, nil
}

// ListingHolds says whether a listed ref file holds id, from the listing
// alone: the store listed the MD5 of the file's content (S3's ETag of a
// plain object, GCS's md5Hash), and it is the MD5 of what a ref file
// naming id holds. A listing of the same store is as trustworthy as a
// read of the file, and a digest, unlike an ETag or a time, cannot come
// back to an old value while the file holds a new one. False where the
// store lists no MD5 (a local folder), or lists an ETag that is not one
// (server-side encryption, multipart): the file is then read.
func ListingHolds(fi backend.FileInfo, id string) bool {
	content := RefFileContent(id)
	if fi.MD5 == "" || fi.Size != int64(len(content)) {
		return false
	}
	sum := md5.Sum(content)
	return fi.MD5 == hex.EncodeToString(sum[:])
}

// RefsJSONLimitListed is RefsJSONLimit for refs known only by their listed
// files: a ref's entry is its name and an ID no longer than its file.
func RefsJSONLimitListed(files []backend.FileInfo) int64 {
	var n int64
	for _, fi := range files {
		n += int64(len(fi.Name)) + max(fi.Size, 0) + 8
	}
	return max(MaxRefsJSON, 2*n)
}

// ListVersions maps every version folder of a store to its files and
// their sizes, with one listing of versions/: a mirror's inventory, an
// upstream's where it lists, a prune's plan. Names that are not a version
// folder's (someone else's files) are left out. Each file's version token
// (FileInfo.Version) goes into tokens where it is not nil: a prune's
// removals are conditional on them.
func ListVersions(ctx context.Context, r backend.Reader, tokens map[string]string) (map[string]map[string]int64, error) {
	out := map[string]map[string]int64{}
	err := r.List(ctx, VersionsDir, func(fi backend.FileInfo) error {
		id, file, ok := strings.Cut(strings.TrimPrefix(fi.Name, VersionsDir), "/")
		if !ok || CheckVersionID(id) != nil {
			return nil
		}
		if out[id] == nil {
			out[id] = map[string]int64{}
		}
		out[id][file] = fi.Size
		if tokens != nil {
			tokens[fi.Name] = fi.Version
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", VersionsDir, err)
	}
	return out, nil
}
