package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/s3"
)

// A listing split in parts, where the caller says how many names each
// part holds, is answered no key past its bounds: what the store sends
// is what a plain listing sends, wherever the bounds fall (issue 43: two
// sinks' upstream bytes moved with them). Without the counts, a part's
// last page reads on past its bound.
func TestASplitListingWithCountsReadsNoKeyPastItsBounds(t *testing.T) {
	srv := startS3(t)
	bucket := srv.Bucket(t)
	u, _ := url.Parse(srv.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(u)
	var lists, keys atomic.Int64
	rp.ModifyResponse = func(r *http.Response) error {
		if r.Request.URL.Query().Get("list-type") != "2" {
			return nil
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return err
		}
		lists.Add(1)
		keys.Add(int64(bytes.Count(body, []byte("<Key>"))))
		r.Body = io.NopCloser(bytes.NewReader(body))
		return nil
	}
	proxy := httptest.NewServer(rp)
	t.Cleanup(proxy.Close)
	st := open(t, strings.Replace(srv.URL(bucket, ""), url.QueryEscape(srv.Endpoint), url.QueryEscape(proxy.URL), 1), s3.Options{})

	const n = 1300
	ctx := context.Background()
	var wg sync.WaitGroup
	slots := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := st.Put(ctx, fmt.Sprintf("p/%04d", i), strings.NewReader("x"), 1); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, c := range []struct {
		what     string
		split    backend.ListSplit
		keys     int64 // keys answered
		atLeast  bool  // keys is a floor: what a part reads past its bound
		listings int64
	}{
		{"plain", backend.ListSplit{}, n, false, 2},
		{"in two parts, counted", backend.ListSplit{Bounds: []string{"p/0649"}, Expect: []int{650}}, n, false, 2},
		{"in three parts, counted", backend.ListSplit{Bounds: []string{"p/0099", "p/1249"}, Expect: []int{100, 1150}}, n, false, 4},
		{"in two parts, not counted", backend.ListSplit{Bounds: []string{"p/0649"}}, n + 350, true, 2},
	} {
		lists.Store(0)
		keys.Store(0)
		listed := 0
		err := st.List(backend.WithListBounds(ctx, func() backend.ListSplit { return c.split }), "p/", func(backend.FileInfo) error {
			listed++
			return nil
		})
		if err != nil || listed != n {
			t.Fatalf("%s: listed %d names, %v; want %d", c.what, listed, err, n)
		}
		got := keys.Load()
		if c.atLeast && got < c.keys || !c.atLeast && got != c.keys {
			t.Errorf("%s: the store answered %d keys in %d listings; want %d", c.what, got, lists.Load(), c.keys)
		}
		if !c.atLeast && lists.Load() != c.listings {
			t.Errorf("%s: %d listings, want %d", c.what, lists.Load(), c.listings)
		}
	}
}
