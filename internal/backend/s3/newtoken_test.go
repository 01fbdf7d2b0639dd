package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
)

// TestWriteWithANewTokenFencesTheOld writes the same bytes again under
// backend.WithNewToken, for objects of no bytes, of one part and of
// several: each time the ETag changes, a removal conditional on the old
// one is refused (a prune's late removal), and the bytes are intact.
// A plain write of the same bytes, for contrast, keeps the ETag, which
// is why a sync that makes a candidate its own must ask.
func TestWriteWithANewTokenFencesTheOld(t *testing.T) {
	srv := startS3(t)
	const partSize = 5 << 20
	st := open(t, srv.URL(srv.Bucket(t), "m"), s3.Options{PartSize: partSize})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int64{0, 1000, partSize, partSize + 1, 3*partSize - 7} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			body := make([]byte, size)
			for i := range body {
				body[i] = byte(rng.Uint32())
			}
			name := fmt.Sprintf("data/f%d", size)
			put := func(ctx context.Context) string {
				t.Helper()
				if err := st.Put(ctx, name, bytes.NewReader(body), size); err != nil {
					t.Fatalf("Put: %v", err)
				}
				fi, err := st.Stat(context.Background(), name)
				if err != nil {
					t.Fatal(err)
				}
				return fi.Version
			}
			first := put(ctx)
			if again := put(ctx); again != first {
				t.Logf("a plain write of the same bytes changed the ETag %s to %s", first, again)
				first = again
			}
			seen := map[string]bool{first: true}
			token := first
			for range 3 {
				next := put(backend.WithNewToken(ctx, token))
				if next == token {
					t.Fatalf("a write under WithNewToken(%s) kept the ETag", token)
				}
				err := st.RemoveIfMatch(ctx, name, token)
				if !errors.Is(err, backend.ErrPreconditionFailed) {
					t.Fatalf("RemoveIfMatch of the old ETag %s after the object became %s: %v, want a refusal", token, next, err)
				}
				got, err := backend.ReadAll(ctx, st, name, size+1)
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("after the refused removal: %d bytes, %v; want the %d written", len(got), err, size)
				}
				seen[next] = true
				token = next
			}
			t.Logf("ETags of %d bytes: %v", size, seen)
		})
	}
}

// TestCopyDeclinesUnderANewToken: a server-side copy would take the
// bytes' own ETag, so under WithNewToken the store declines it and the
// caller streams.
func TestCopyDeclinesUnderANewToken(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	up := open(t, srv.URL(bucket, "up"), s3.Options{})
	st := open(t, srv.URL(bucket, "m"), s3.Options{})
	ctx := context.Background()
	if err := up.Put(ctx, "f", bytes.NewReader([]byte("hello")), 5); err != nil {
		t.Fatal(err)
	}
	ok, err := st.CopyFrom(backend.WithNewToken(ctx, `"5d41402abc4b2a76b9719d911017c592"`), up, "f", "f", 5)
	if ok || err != nil {
		t.Fatalf("CopyFrom under WithNewToken = %v, %v; want declined", ok, err)
	}
	if _, err := st.Stat(ctx, "f"); !backend.IsNotExist(err) {
		t.Fatalf("a declined copy wrote the object: %v", err)
	}
}
