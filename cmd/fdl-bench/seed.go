package main

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"io/fs"
	"mime"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Seeding an upstream bucket through the gateway (rclone copy, one PUT per
// file) takes more than ten minutes for the 300,000 files of the wide
// repository on a 2-core machine. The gateway's posix backend keeps each
// object as a plain file, <root>/<bucket>/<key>, and what it knows of it
// in extended attributes; seedPosix puts the files there itself, with the
// attributes the gateway would have stored for rclone's PUT, so that both
// tools read the same objects as after an rclone seed.
//
// What versitygw v1.8.0 (backend/posix, backend/meta/xattr.go) stores,
// under "user." on Linux, for a single-part PUT without a checksum
// header, as rclone v1.60 sends it:
//
//	user.etag          "<MD5 hex>" (quoted: backend.GenerateEtag)
//	user.checksums     the JSON of s3response.Checksum: CRC64NVME of the
//	                   bytes, computed by the gateway, FULL_OBJECT
//	user.metadata      the x-amz-meta-* headers as JSON: rclone's
//	                   {"mtime":"<seconds>.<nanoseconds>"}
//	user.content-type  rclone's type by extension
//
// Without user.etag the gateway answers GET, HEAD and listings with an
// empty ETag (its -default-etag): fdl-mirror would then check no MD5 and
// pin no version, rclone would compare no hashes. Without user.checksums
// GET answers no x-amz-checksum-crc64nvme, which the SDK of fdl-mirror
// checks on every read. Without user.metadata rclone takes the file's
// modification time for the object's, and on the incremental run would
// find every object of the rclone mirror (written later) newer than
// upstream's. So all four are set, exactly as the gateway writes them.

// seedAttrs are the extended attributes of one seeded object.
type seedAttrs struct {
	etag, checksums, metadata, contentType string
}

// xattrPrefix is the namespace versitygw's xattr store uses on Linux.
const xattrPrefix = "user."

// crc64NVME is the table of CRC-64/NVME (reflected polynomial
// 0x9a6c9329ac4bc9b5, initial value and final XOR all ones, which Go's
// crc64 applies), the gateway's default checksum.
var crc64NVME = crc64.MakeTable(0x9a6c9329ac4bc9b5)

// attrsFor are the attributes of an object of the bytes that md5sum and
// crc summed, whose source file was last modified at mtime.
func attrsFor(name string, md5sum []byte, crc uint64, mtime time.Time) seedAttrs {
	var c [8]byte
	binary.BigEndian.PutUint64(c[:], crc)
	return seedAttrs{
		etag: `"` + hex.EncodeToString(md5sum) + `"`,
		// encoding/json of versitygw's s3response.Checksum, field by field.
		checksums: `{"Algorithm":"CRC64NVME","Type":"FULL_OBJECT","CRC32":null,"CRC32C":null,"SHA1":null,"SHA256":null,"CRC64NVME":"` +
			base64.StdEncoding.EncodeToString(c[:]) + `","SHA512":null,"MD5":null,"XXHASH64":null,"XXHASH3":null,"XXHASH128":null}`,
		metadata:    `{"mtime":"` + rcloneMtime(mtime) + `"}`,
		contentType: rcloneMimeType(name),
	}
}

// rcloneMtime is rclone's x-amz-meta-mtime of a modification time
// (swift.TimeToFloatString): seconds, a dot, nine digits of nanoseconds.
func rcloneMtime(t time.Time) string {
	ns := t.UnixNano()
	return fmt.Sprintf("%d.%09d", ns/1e9, ns%1e9)
}

// rcloneMimeType is rclone's Content-Type of an upload
// (fs.MimeTypeFromName).
func rcloneMimeType(name string) string {
	t := mime.TypeByExtension(path.Ext(name))
	if !strings.ContainsRune(t, '/') {
		return "application/octet-stream"
	}
	return t
}

func (a seedAttrs) set(file string) error {
	for _, kv := range [...][2]string{
		{"etag", a.etag}, {"checksums", a.checksums}, {"metadata", a.metadata}, {"content-type", a.contentType},
	} {
		if err := unix.Setxattr(file, xattrPrefix+kv[0], []byte(kv[1]), 0); err != nil {
			return &os.PathError{Op: "setxattr " + xattrPrefix + kv[0], Path: file, Err: err}
		}
	}
	return nil
}

// seedStats says what seedPosix did.
type seedStats struct {
	files, linked, copied, kept int64
	bytes                       int64 // bytes of the files linked or copied
}

func (s *seedStats) String() string {
	return fmt.Sprintf("%d files (%d hard-linked, %d copied, %d already there), %s", s.files, s.linked, s.copied, s.kept, mib(s.bytes))
}

// errNoXattr is a bucket folder whose file system keeps no user extended
// attributes: the gateway could not either, and seeding falls back to
// rclone.
var errNoXattr = errors.New("the file system keeps no user extended attributes")

// seedPosix makes bucketDir, a posix gateway's bucket folder, hold every
// regular file below src as an object of the same key, as rclone copy
// src gw:bucket would (symbolic links are skipped, nothing is deleted).
// Each file is hard-linked where src and the bucket are on one file
// system, else copied; its attributes (see above) are set on the object.
// A hard link shares the source's inode, so the attributes land on the
// source file too (its bytes, name and modification time are untouched),
// and the bucket's object is the source file: neither the gateway nor the
// tools write into an upstream object (the gateway writes a new object to
// a temporary file and renames it into place; the bench only reads the
// upstream bucket), and the generator replaces a file, never writes into
// it. An object already there is kept when it is the source file (or, a
// copy, of its size) and its user.metadata gives the source's
// modification time; any other is replaced by rename, never written into.
func seedPosix(ctx context.Context, src, bucketDir string, workers int) (*seedStats, error) {
	if workers < 1 {
		workers = 1
	}
	type job struct {
		rel string
		fi  fs.FileInfo
	}
	jobs := make(chan job, 256)
	st := &seedStats{}
	var noLink atomic.Bool // a link failed with EXDEV or EPERM: copy from then on
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for j := range jobs {
				if ctx.Err() != nil {
					continue
				}
				if err := seedOne(filepath.Join(src, j.rel), filepath.Join(bucketDir, j.rel), j.rel, j.fi, buf, &noLink, st); err != nil {
					cancel(err)
				}
			}
		}()
	}
	walkErr := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		atomic.AddInt64(&st.files, 1)
		jobs <- job{filepath.ToSlash(rel), fi}
		return nil
	})
	close(jobs)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return st, err
	}
	if walkErr != nil {
		return st, walkErr
	}
	return st, ctx.Err()
}

func seedOne(srcPath, dst, key string, fi fs.FileInfo, buf []byte, noLink *atomic.Bool, st *seedStats) error {
	dfi, err := os.Lstat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		dfi = nil
	case err != nil:
		return err
	case seededAlready(dst, dfi, fi):
		atomic.AddInt64(&st.kept, 1)
		return nil
	}
	if dfi != nil && os.SameFile(fi, dfi) {
		// The source file, written into since its attributes were set
		// (nothing here does that): set them again.
		attrs, err := sumFile(srcPath, key, fi, nil, buf)
		if err == nil {
			err = attrs.set(dst)
		}
		if err == nil {
			atomic.AddInt64(&st.linked, 1)
			atomic.AddInt64(&st.bytes, fi.Size())
		}
		return xattrErr(err, dst)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	// The object is made under a temporary name beside its key and renamed
	// onto it: an object already there (another inode) is replaced, not
	// written into. The gateway's listing would show the temporary name,
	// but nothing lists the bucket while it is seeded.
	tmp := filepath.Join(filepath.Dir(dst), ".fdl-bench-seed."+filepath.Base(dst))
	os.Remove(tmp)
	var attrs seedAttrs
	linked := false
	if !noLink.Load() {
		err := os.Link(srcPath, tmp)
		switch {
		case err == nil:
			linked = true
			if attrs, err = sumFile(srcPath, key, fi, nil, buf); err != nil {
				os.Remove(tmp)
				return err
			}
		case errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EMLINK):
			noLink.Store(true)
		default:
			return err
		}
	}
	if !linked {
		out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		attrs, err = sumFile(srcPath, key, fi, out, buf)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(tmp)
			return err
		}
	}
	if err := attrs.set(tmp); err != nil {
		os.Remove(tmp)
		return xattrErr(err, dst)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	if linked {
		atomic.AddInt64(&st.linked, 1)
	} else {
		atomic.AddInt64(&st.copied, 1)
	}
	atomic.AddInt64(&st.bytes, fi.Size())
	return nil
}

// xattrErr is errNoXattr for a file system without user attributes.
func xattrErr(err error, dst string) error {
	if errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("%s: %w", filepath.Dir(dst), errNoXattr)
	}
	return err
}

// seededAlready says whether dst (dfi) is already the object of the
// source file fi: of its size (the same file, a hard link, or a copy),
// with an ETag and the source's modification time in its metadata, as
// rclone copy decides by size and modification time whether to upload
// again.
func seededAlready(dst string, dfi, fi fs.FileInfo) bool {
	if !dfi.Mode().IsRegular() || dfi.Size() != fi.Size() {
		return false
	}
	want := `{"mtime":"` + rcloneMtime(fi.ModTime()) + `"}`
	meta := make([]byte, len(want)+1)
	n, err := unix.Getxattr(dst, xattrPrefix+"metadata", meta)
	if err != nil || n != len(want) || string(meta[:n]) != want {
		return false
	}
	n, err = unix.Getxattr(dst, xattrPrefix+"etag", make([]byte, 64))
	return err == nil && n == 34
}

// sumFile reads the source file (copying it to out unless nil) and gives
// its object's attributes.
func sumFile(srcPath, key string, fi fs.FileInfo, out io.Writer, buf []byte) (seedAttrs, error) {
	in, err := os.Open(srcPath)
	if err != nil {
		return seedAttrs{}, err
	}
	defer in.Close()
	m, c := md5.New(), crc64.New(crc64NVME)
	w := io.MultiWriter(m, c)
	if out != nil {
		w = io.MultiWriter(m, c, out)
	}
	n, err := io.CopyBuffer(w, in, buf)
	if err != nil {
		return seedAttrs{}, fmt.Errorf("reading %s: %w", srcPath, err)
	}
	if n != fi.Size() {
		return seedAttrs{}, fmt.Errorf("%s changed while seeded: %d bytes, %d listed", srcPath, n, fi.Size())
	}
	return attrsFor(key, m.Sum(nil), c.Sum64(), fi.ModTime()), nil
}

// seedWorkers is how many files seedPosix handles at once: its work is
// hashing (CPU) and file-system calls, so a few per core.
func seedWorkers() int { return 2 * runtime.NumCPU() }
