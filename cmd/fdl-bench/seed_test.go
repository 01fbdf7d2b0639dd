package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sys/unix"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

// A bucket seeded in the gateway's folder holds what an upload through
// the gateway would: the gateway's own attributes for the same bytes and
// metadata, and through the gateway the project's S3 backend (and rclone,
// where installed) reads the source repository's names, sizes, bytes,
// MD5s and modification times. The source is left as it was, and a
// second seed after a replaced file replaces only that object.
func TestSeedPosixServesWhatAnUploadWould(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "up")
	if _, err := generate.Generate(ctx, src, generate.Options{Versions: 2, FilesPerVersion: 4, FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	before := treeState(t, src)

	s := testserver.S3(t)
	bucket := s.Bucket(t)
	bucketDir := filepath.Join(s.Dir, bucket)
	st, err := seedPosix(ctx, src, bucketDir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if st.files != int64(len(before)) || st.linked != st.files {
		t.Fatalf("seeded %v; want all %d files hard-linked (one file system)", st, len(before))
	}

	checkSeeded(t, s, bucket, src, before)

	// rclone sees the source's sizes, MD5s and modification times, so
	// that its incremental run has nothing to copy but what changed.
	if rclone, err := exec.LookPath("rclone"); err == nil {
		cmd := exec.Command(rclone, "lsjson", "-R", "--files-only", "--hash", "--config", filepath.Join(t.TempDir(), "rclone.conf"), "gw:"+bucket)
		cmd.Env = childEnv((&gateway{s}).env())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("rclone lsjson: %v", err)
		}
		var items []struct {
			Path    string
			Size    int64
			ModTime time.Time
			Hashes  map[string]string
		}
		if err := json.Unmarshal(out, &items); err != nil {
			t.Fatal(err)
		}
		if len(items) != len(before) {
			t.Errorf("rclone lists %d objects, the source holds %d files", len(items), len(before))
		}
		for _, it := range items {
			f := before[it.Path]
			sum := md5.Sum(f.data)
			if it.Size != int64(len(f.data)) || !it.ModTime.Equal(f.mtime) || it.Hashes["md5"] != hex.EncodeToString(sum[:]) {
				t.Errorf("rclone: %s is %d bytes of %s, modified %v; the source %d bytes of %x, %v",
					it.Path, it.Size, it.Hashes["md5"], it.ModTime, len(f.data), sum, f.mtime)
			}
		}
	} else {
		t.Log("rclone is not installed (scripts/bench installs it): its reading is not checked")
	}

	// A second seed keeps every object; after one source file is replaced
	// (as the generator replaces files), only that object is.
	if st, err := seedPosix(ctx, src, bucketDir, 3); err != nil || st.kept != st.files {
		t.Fatalf("second seed: %v, %v; want every object kept", st, err)
	}
	main := filepath.Join(src, "refs", "heads", "main")
	oldInode := inode(t, main)
	tmp := main + ".new"
	if err := os.WriteFile(tmp, []byte("0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, main); err != nil {
		t.Fatal(err)
	}
	if st, err := seedPosix(ctx, src, bucketDir, 3); err != nil || st.kept != st.files-1 || st.linked != 1 {
		t.Fatalf("seed after one replaced file: %v, %v; want 1 linked, the rest kept", st, err)
	}
	out, err := s.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("refs/heads/main")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(b) != "0123456789abcdef\n" || aws.ToString(out.ETag) != `"`+hex.EncodeToString(md5sum(b))+`"` {
		t.Errorf("refs/heads/main after the second seed: %q, ETag %s", b, aws.ToString(out.ETag))
	}
	if _, err := os.Stat(filepath.Join(bucketDir, "refs", "heads", ".fdl-bench-seed.main")); !os.IsNotExist(err) {
		t.Errorf("the seed's temporary file is left: %v", err)
	}

	// Nothing wrote into the source files: names, bytes and modification
	// times are as before (the replaced file aside, whose old inode the
	// bucket no longer holds).
	after := treeState(t, src)
	for name, f := range before {
		a := after[name]
		if name == "refs/heads/main" {
			continue
		}
		if !bytes.Equal(a.data, f.data) || !a.mtime.Equal(f.mtime) {
			t.Errorf("%s changed in the source", name)
		}
	}
	if len(after) != len(before) {
		t.Errorf("the source holds %d files, %d before", len(after), len(before))
	}
	if inode(t, filepath.Join(bucketDir, "refs", "heads", "main")) == oldInode {
		t.Error("the bucket still holds the replaced file")
	}
}

// checkSeeded checks bucket against the source files before: each
// object's attributes are the gateway's own for a PUT of the same bytes
// and metadata, HEAD answers them, and the project's S3 backend lists and
// reads the source's names, sizes, MD5s and bytes.
func checkSeeded(t *testing.T, s *testserver.S3Server, bucket, src string, before map[string]fileState) {
	t.Helper()
	ctx := context.Background()
	bucketDir := filepath.Join(s.Dir, bucket)
	// The same bytes and metadata PUT through the gateway, as rclone v1.60
	// sends them (its SDK sends no checksum; the gateway then computes
	// CRC64NVME, named here so that this SDK does not send CRC32).
	c := s.Client()
	ref := s.Bucket(t)
	for name, f := range before {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(ref), Key: aws.String(name), Body: bytes.NewReader(f.data),
			ContentLength: aws.Int64(int64(len(f.data))), ContentType: aws.String(rcloneMimeType(name)),
			Metadata: map[string]string{"mtime": rcloneMtime(f.mtime)}, ChecksumAlgorithm: types.ChecksumAlgorithmCrc64nvme})
		if err != nil {
			t.Fatal(err)
		}
		for _, attr := range []string{"etag", "checksums", "metadata", "content-type"} {
			got, want := xattr(t, filepath.Join(bucketDir, name), attr), xattr(t, filepath.Join(s.Dir, ref, name), attr)
			if got != want {
				t.Errorf("%s: user.%s is %s, the gateway's own %s", name, attr, got, want)
			}
		}
		head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(name), ChecksumMode: types.ChecksumModeEnabled})
		if err != nil {
			t.Fatal(err)
		}
		sum := md5.Sum(f.data)
		if aws.ToString(head.ETag) != `"`+hex.EncodeToString(sum[:])+`"` || aws.ToInt64(head.ContentLength) != int64(len(f.data)) ||
			aws.ToString(head.ChecksumCRC64NVME) == "" || head.Metadata["mtime"] != rcloneMtime(f.mtime) {
			t.Errorf("HEAD %s: ETag %s, length %d, CRC64NVME %q, metadata %v", name, aws.ToString(head.ETag),
				aws.ToInt64(head.ContentLength), aws.ToString(head.ChecksumCRC64NVME), head.Metadata)
		}
	}

	// The project's S3 backend lists and reads the source repository.
	up, closeUp, err := location.Open(ctx, s.URL(bucket, ""), location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeUp()
	local, closeLocal, err := location.Open(ctx, src, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeLocal()
	got, want := listing(t, up), listing(t, local)
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("the bucket lists %d objects, the source %d", len(got), len(want))
	}
	for name, fi := range want {
		g, ok := got[name]
		sum := md5.Sum(before[name].data)
		if !ok || g.Size != fi.Size || g.MD5 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: listed %+v, source %+v", name, g, fi)
			continue
		}
		rc, err := up.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(b, before[name].data) {
			t.Errorf("%s: read %d bytes (%v), the source has %d", name, len(b), err, len(before[name].data))
		}
	}

}

// Across file systems the seed copies: the objects are the same, and the
// source files get no attributes (they share no inode with the bucket).
func TestSeedPosixCopiesAcrossFileSystems(t *testing.T) {
	ctx := context.Background()
	shm, err := os.MkdirTemp("/dev/shm", "fdl-bench-seed-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	s := testserver.S3(t)
	var a, b unix.Stat_t
	if unix.Stat(shm, &a) != nil || unix.Stat(s.Dir, &b) != nil || a.Dev == b.Dev {
		t.Skip("/dev/shm is on the file system of the test's temporary folder")
	}
	src := filepath.Join(shm, "up")
	if _, err := generate.Generate(ctx, src, generate.Options{Versions: 1, FilesPerVersion: 3, FastParquet: true}); err != nil {
		t.Fatal(err)
	}
	before := treeState(t, src)
	bucket := s.Bucket(t)
	st, err := seedPosix(ctx, src, filepath.Join(s.Dir, bucket), 2)
	if err != nil {
		if errors.Is(err, errNoXattr) {
			t.Skipf("seeding: %v", err)
		}
		t.Fatal(err)
	}
	if st.copied != int64(len(before)) || st.linked != 0 {
		t.Fatalf("seeded %v; want all %d files copied", st, len(before))
	}
	checkSeeded(t, s, bucket, src, before)
	for name := range before {
		if attrs, err := xattrNames(filepath.Join(src, name)); err != nil || len(attrs) != 0 {
			t.Errorf("source %s has attributes %q (%v)", name, attrs, err)
		}
	}
	if st, err := seedPosix(ctx, src, filepath.Join(s.Dir, bucket), 2); err != nil || st.kept != st.files {
		t.Fatalf("second seed: %v, %v; want every object kept", st, err)
	}
}

func xattrNames(file string) ([]string, error) {
	b := make([]byte, 4096)
	n, err := unix.Listxattr(file, b)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range bytes.Split(b[:n], []byte{0}) {
		if len(a) > 0 {
			out = append(out, string(a))
		}
	}
	return out, nil
}

type fileState struct {
	data  []byte
	mtime time.Time
}

func treeState(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = fileState{b, fi.ModTime()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func listing(t *testing.T, r backend.Reader) map[string]backend.FileInfo {
	t.Helper()
	out := map[string]backend.FileInfo{}
	err := r.List(context.Background(), "", func(fi backend.FileInfo) error {
		out[fi.Name] = fi
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func xattr(t *testing.T, file, attr string) string {
	t.Helper()
	b := make([]byte, 4096)
	n, err := unix.Getxattr(file, xattrPrefix+attr, b)
	if err != nil {
		t.Fatalf("%s: user.%s: %v", file, attr, err)
	}
	return string(b[:n])
}

func inode(t *testing.T, file string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func md5sum(b []byte) []byte {
	s := md5.Sum(b)
	return s[:]
}
