package testserver

import (
	"os"
	"path/filepath"
)

// Objects lists the objects under prefix in bucket, by name relative to
// the prefix, with their sizes: read from the gateway's posix root, so
// that a test sees what a run wrote without going through a store.
func (s *S3Server) Objects(bucket, prefix string) map[string]int64 {
	out := map[string]int64{}
	dir := filepath.Join(s.Dir, bucket, filepath.FromSlash(prefix))
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out[filepath.ToSlash(rel)] = info.Size()
		}
		return nil
	})
	return out
}
