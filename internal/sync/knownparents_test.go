package sync_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
)

// forgingSink is a mirror that, once version id is published in it (its
// version.json written), gives forged for that version's main catalog:
// what a reader of that catalog would say were the catalog planted and
// the reader taken over by it, read again from the mirror.
type forgingSink struct {
	backend.Backend
	catalog, published string
	forged             []byte
	done               chan struct{}
	mu                 sync.Mutex
	on                 bool
	served             int
}

func (f *forgingSink) wrote(name string) {
	if name == f.published {
		f.mu.Lock()
		if !f.on {
			f.on = true
			close(f.done)
		}
		f.mu.Unlock()
	}
}

// holdingSource is an upstream that gives the catalog named held only
// once done is closed (or after a while): the version it is of is read,
// and its files checked, after its parent is published.
type holdingSource struct {
	backend.Reader
	held string
	done chan struct{}
}

func (h *holdingSource) Unwrap() backend.Reader { return h.Reader }

func (h *holdingSource) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if name == h.held {
		select {
		case <-h.done:
		case <-time.After(20 * time.Second):
		case <-ctx.Done():
		}
	}
	return h.Reader.Open(ctx, name)
}

func (f *forgingSink) forging(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.on && name == f.catalog {
		f.served++
		return true
	}
	return false
}

func (f *forgingSink) Unwrap() backend.Reader { return f.Backend }

func (f *forgingSink) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	err := f.Backend.Put(ctx, name, r, size)
	if err == nil {
		f.wrote(name)
	}
	return err
}

func (f *forgingSink) Create(ctx context.Context, name string, r io.Reader, size int64) error {
	err := f.Backend.Create(ctx, name, r, size)
	if err == nil {
		f.wrote(name)
	}
	return err
}

func (f *forgingSink) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if f.forging(name) {
		return io.NopCloser(bytes.NewReader(f.forged)), nil
	}
	return f.Backend.Open(ctx, name)
}

func (f *forgingSink) Stat(ctx context.Context, name string) (backend.FileInfo, error) {
	fi, err := f.Backend.Stat(ctx, name)
	if err == nil && f.forging(name) {
		fi.Size = int64(len(f.forged))
	}
	return fi, err
}

// A version with alternate catalogs is checked against what its parents
// hold: the files the mirror confirmed for each (their lists), never
// their catalogs read again. A parent published in the same run is taken
// at its word, its files not looked up again; were its catalog read
// again, a planted one (whose reader, taken over, says the child's new
// files are its own: here, the child's catalog served for it) would have
// the child published without them. Against the parent's list the child
// is published complete: the planted parent costs no other version.
//
// Checked against knownFromParents before the lists (each parent's
// catalog read again from the mirror, at 582c581): the child was
// published missing its three new files, and this test failed.
func TestAParentsCatalogReadAgainVouchesForNoFileOfItsChild(t *testing.T) {
	up, mirror := filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	r, err := generate.Generate(context.Background(), up, generate.Options{Versions: 2, FilesPerVersion: 3, AlternateCatalog: "1.0", FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	parent, child := r.Versions[0], r.Versions[1]
	forged, err := os.ReadFile(filepath.Join(up, repo.VersionFile(child, repo.CatalogFile)))
	if err != nil {
		t.Fatal(err)
	}
	src, err := local.Open(up)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := local.Create(mirror)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	// The child's catalog comes only once the parent is published, so
	// that the child's files are checked against a parent of this run.
	done := make(chan struct{})
	f := &forgingSink{Backend: dst, catalog: repo.VersionFile(parent, repo.CatalogFile), published: repo.VersionFile(parent, repo.RecordFile), forged: forged, done: done}
	held := &holdingSource{Reader: src, held: repo.VersionFile(child, repo.CatalogFile), done: done}
	rep, err := syncTrusting(context.Background(), held, f, nil, fdlsync.Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.VersionsPublished) != 2 {
		t.Fatalf("published %v, refused %+v; want both versions", rep.VersionsPublished, rep.Refused)
	}
	if p := fdltest.Complete(t, mirror); len(p) > 0 {
		t.Fatalf("published without files (the parent's catalog, read again, was served %d times): %v", f.served, p[:min(3, len(p))])
	}
	if refIn(mirror, "refs/heads/main") != child {
		t.Fatal("main not moved")
	}
}
