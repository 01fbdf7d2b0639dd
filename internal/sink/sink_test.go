package sink_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/location"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// The sink's contract, against each store a mirror is kept in: a local
// folder, the Versity S3 gateway and fake-gcs-server. Each typed
// operation writes what it says and nothing else; a write the run may
// not make (before the lock, after another run changed the file, of a
// stream that broke its size) is refused and publishes nothing.

// store is one kind of store, with a fresh upstream and a fresh mirror
// in it, both empty.
type store struct {
	name string
	open func(t *testing.T) (up, mirror backend.Backend)
	// conditional: the store fences writes by version tokens (a local
	// folder is fenced by its flock instead).
	conditional bool
	// copies: the mirror copies from the upstream server-side.
	copies bool
}

func stores(t *testing.T) []store {
	var s3 *testserver.S3Server
	var gcs *testserver.GCSServer
	var once sync.Once
	// Started once, by the first subtest that needs them, for the test
	// as a whole.
	parent := t
	start := func(*testing.T) {
		once.Do(func() { s3, gcs = testserver.S3(parent), testserver.GCS(parent) })
	}
	openAddr := func(t *testing.T, addr string) backend.Backend {
		t.Helper()
		b, closeB, err := location.OpenWritable(context.Background(), addr, location.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeB() })
		return b
	}
	return []store{
		{name: "local", open: func(t *testing.T) (backend.Backend, backend.Backend) {
			return openAddr(t, t.TempDir()), openAddr(t, t.TempDir())
		}},
		{name: "s3", conditional: true, copies: true, open: func(t *testing.T) (backend.Backend, backend.Backend) {
			start(t)
			bucket := s3.Bucket(t)
			return openAddr(t, s3.URL(bucket, "up")), openAddr(t, s3.URL(bucket, "mirror"))
		}},
		{name: "gcs", conditional: true, copies: true, open: func(t *testing.T) (backend.Backend, backend.Backend) {
			start(t)
			bucket := gcs.Bucket(t)
			return openAddr(t, gcs.URL(bucket, "up")), openAddr(t, gcs.URL(bucket, "mirror"))
		}},
	}
}

// eachStore runs fn once per store, each a subtest.
func eachStore(t *testing.T, fn func(t *testing.T, st store)) {
	for _, st := range stores(t) {
		t.Run(st.name, func(t *testing.T) { fn(t, st) })
	}
}

const settings = `{"fdl":"0.1","id":"contract","data_dir":"data/"}`

// upstream writes an upstream with fdl.json and the data files given
// (path below data_dir → bytes), and returns it as the source reads it.
func upstream(t *testing.T, up backend.Backend, files map[string]string) *source.Source {
	t.Helper()
	ctx := context.Background()
	put(t, up, repo.SettingsFile, settings)
	for p, b := range files {
		put(t, up, "data/"+p, b)
	}
	src := source.New(up, nil, nil)
	if _, err := src.ReadSettings(ctx); err != nil {
		t.Fatal(err)
	}
	return src
}

func put(t *testing.T, b backend.Backend, name, content string) {
	t.Helper()
	if err := b.Put(context.Background(), name, strings.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
}

// read is name's bytes in b; ok false when it is absent.
func read(t *testing.T, b backend.Reader, name string) (content string, ok bool) {
	t.Helper()
	raw, err := backend.ReadAll(context.Background(), b, name, 1<<20)
	if backend.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(raw), true
}

// names lists every object of b (the store's own files are not listed).
func names(t *testing.T, b backend.Reader) []string {
	t.Helper()
	var out []string
	if err := b.List(context.Background(), "", func(fi backend.FileInfo) error {
		out = append(out, fi.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// recorder is a sink's Options.Copied and Planned, noted.
type recorder struct {
	mu      sync.Mutex
	copied  int64
	files   int
	planned []string
}

func (r *recorder) options(o sink.Options) sink.Options {
	o.Copied = func(n int64) { r.mu.Lock(); r.copied += n; r.files++; r.mu.Unlock() }
	o.Planned = func(name string) { r.mu.Lock(); r.planned = append(r.planned, name); r.mu.Unlock() }
	return o
}

func TestPutDataFileWritesTheSourcesStream(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		up, mirror := st.open(t)
		body := strings.Repeat("parquet bytes ", 1000)
		src := upstream(t, up, map[string]string{"t/a.parquet": body})
		var rec recorder
		s := sink.New(mirror, rec.options(sink.Options{}))
		f, err := src.Data().Open(ctx, "t/a.parquet", int64(len(body)), source.Spool{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if f.Name() != "data/t/a.parquet" {
			t.Fatalf("the source names the file %q, want data/t/a.parquet", f.Name())
		}
		if err := s.Data().Put(ctx, f.Name(), f); err != nil {
			t.Fatal(err)
		}
		if got, _ := read(t, mirror, "data/t/a.parquet"); got != body {
			t.Fatalf("the mirror holds %d bytes, want the upstream's %d", len(got), len(body))
		}
		if rec.files != 1 || rec.copied != int64(len(body)) {
			t.Fatalf("Copied told of %d files, %d bytes; want 1, %d", rec.files, rec.copied, len(body))
		}
	})
}

// A stream shorter or longer than its catalog says fails with the
// source's size refusal, and the mirror holds no such file: a store's
// Put publishes all of its bytes or none. The upstream is served over
// HTTP, where the size is known only as the bytes come.
func TestPutDataFileOfAStreamOfAnotherSizePublishesNothing(t *testing.T) {
	dir := t.TempDir()
	up, closeUp, err := location.OpenWritable(context.Background(), dir, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeUp()
	body := strings.Repeat("x", 5000)
	upstream(t, up, map[string]string{"a.parquet": body})
	web := testserver.HTTP(t, dir)
	httpUp, closeHTTP, err := location.Open(context.Background(), web.URL, location.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeHTTP()
	src := source.New(httpUp, nil, nil)
	if _, err := src.ReadSettings(context.Background()); err != nil {
		t.Fatal(err)
	}
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		_, mirror := st.open(t)
		s := sink.New(mirror, sink.Options{})
		for _, recorded := range []int64{int64(len(body)) + 1, int64(len(body)) - 1} {
			f, err := src.Data().Open(ctx, "a.parquet", recorded, source.Spool{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Data().Put(ctx, f.Name(), f)
			f.Close()
			var r *source.RefusalError
			if !errors.As(err, &r) || r.Reason != source.ReasonSizeMismatch || r.File != "data/a.parquet" {
				t.Fatalf("catalog records %d bytes of %d: err %v, want a %s refusal of data/a.parquet", recorded, len(body), err, source.ReasonSizeMismatch)
			}
			if got := names(t, mirror); len(got) != 0 {
				t.Fatalf("catalog records %d bytes of %d: the mirror holds %v, want nothing", recorded, len(body), got)
			}
		}
	})
}

// Where the mirror's store copies from the upstream's server-side, the
// sink copies without a byte through the mirror, through the source's
// Origin; elsewhere it says it cannot, before any request.
func TestCopyDataFileServerSide(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		up, mirror := st.open(t)
		body := strings.Repeat("copied ", 3000)
		src := upstream(t, up, map[string]string{"b.parquet": body})
		var rec recorder
		s := sink.New(mirror, rec.options(sink.Options{}))
		if got := s.Data().CanCopyFrom(src.Data().Origin()); got != st.copies {
			t.Fatalf("CanCopyFrom = %v, want %v", got, st.copies)
		}
		if !st.copies {
			return
		}
		ok, err := s.Data().Copy(ctx, src.Data().Origin(), "data/b.parquet", int64(len(body)))
		if err != nil || !ok {
			t.Fatalf("Data().Copy = %v, %v", ok, err)
		}
		if got, _ := read(t, mirror, "data/b.parquet"); got != body {
			t.Fatalf("the mirror holds %d bytes, want the upstream's %d", len(got), len(body))
		}
		if rec.files != 1 || rec.copied != int64(len(body)) {
			t.Fatalf("Copied told of %d files, %d bytes; want 1, %d", rec.files, rec.copied, len(body))
		}
	})
}

// A run that locks lazily writes nothing before it holds the lock: each
// typed write is refused, naming the file, and nothing is published.
func TestGuardedSinkRefusesWritesBeforeTheLock(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		up, mirror := st.open(t)
		src := upstream(t, up, map[string]string{"c.parquet": "ccc"})
		s := sink.New(mirror, sink.Options{Guarded: true})
		f, err := src.Data().Open(ctx, "c.parquet", 3, source.Spool{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		writes := map[string]error{
			"data/c.parquet": s.Data().Put(ctx, "data/c.parquet", f),
			repo.RefsFile:    s.Holdings().Replace(ctx, repo.RefsFile, []byte("{}\n"), ""),
		}
		if st.copies {
			_, writes["server-side copy of data/c.parquet"] = s.Data().Copy(ctx, src.Data().Origin(), "data/c.parquet", 3)
		}
		writes[repo.VersionFile("v1", repo.RecordFile)] = s.Versions().Publish(ctx, "v1", []byte("{}"), nil)
		for name, err := range writes {
			if err == nil || !strings.Contains(err.Error(), "before holding the mirror's lock") {
				t.Errorf("%s before the lock: err %v, want a refusal before holding the lock", name, err)
			}
		}
		if got := names(t, mirror); len(got) != 0 {
			t.Fatalf("the mirror holds %v, want nothing", got)
		}
		s.Runs().Locked()
		if err := s.Holdings().Replace(ctx, repo.RefsFile, []byte("{}\n"), ""); err != nil {
			t.Fatalf("after Locked: %v", err)
		}
	})
}

// The fence: a run reads the mirror (its inventory), another run takes
// the mirror over and writes a ref and refs.json, and the first run,
// paused past its lock's lifetime, writes from what it read. The store
// refuses that write (backend.ErrPreconditionFailed), and the other
// run's bytes stay. A removal from a stale read is refused the same way.
func TestWriteAfterAnotherRunChangedTheFileIsFenced(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		if !st.conditional {
			t.Skip("a local folder is fenced by its flock, held by the kernel through any pause (internal/sink/lock)")
		}
		ctx := context.Background()
		_, mirror := st.open(t)
		put(t, mirror, repo.SettingsFile, settings)
		put(t, mirror, "refs/heads/main", string(repo.RefFileContent("v1")))
		put(t, mirror, repo.RefsFile, string(repo.RefsJSON(repo.Refs{"refs/heads/main": "v1"})))
		put(t, mirror, "data/old.parquet", "old")

		paused := sink.New(mirror, sink.Options{})
		inv, err := paused.TakeInventory(ctx, "data/")
		if err != nil {
			t.Fatal(err)
		}
		stale := map[string]string{}
		for _, name := range []string{"refs/heads/main", repo.RefsFile, "data/old.parquet"} {
			fi, err := mirror.Stat(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			stale[name] = fi.Version
		}

		// Another run takes the mirror over.
		other := sink.New(mirror, sink.Options{})
		otherInv, err := other.TakeInventory(ctx, "data/")
		if err != nil {
			t.Fatal(err)
		}
		written, err := other.Refs().Write(ctx, otherInv, []*sink.RefWrite{{Name: "refs/heads/main", ID: "v2"}}, "")
		if err != nil || written.RefsJSONErr != nil {
			t.Fatalf("the other run's refs: %v, %+v", err, written)
		}
		put(t, mirror, "data/old.parquet", "rewritten by the other run")
		before := map[string]string{}
		for _, name := range names(t, mirror) {
			before[name], _ = read(t, mirror, name)
		}

		// The paused run wakes up.
		w := &sink.RefWrite{Name: "refs/heads/main", ID: "v3"}
		if _, err := paused.Refs().Write(ctx, inv, []*sink.RefWrite{w}, ""); !backend.IsPreconditionFailed(err) && !backend.IsPreconditionFailed(w.Err) {
			t.Fatalf("WriteRefs after another run moved the ref: err %v, ref %v; want a fenced refusal", err, w.Err)
		}
		err = paused.Holdings().Replace(ctx, repo.RefsFile, repo.RefsJSON(repo.Refs{"refs/heads/main": "v3"}), stale[repo.RefsFile])
		if !backend.IsPreconditionFailed(err) || !strings.Contains(err.Error(), "changed by another run") {
			t.Fatalf("Replace of refs.json from a stale read: %v; want a fenced refusal", err)
		}
		err = paused.Holdings().Remove(ctx, "data/old.parquet", stale["data/old.parquet"])
		if !backend.IsPreconditionFailed(err) {
			t.Fatalf("Remove from a stale listing: %v; want a fenced refusal", err)
		}
		for name, want := range before {
			if got, ok := read(t, mirror, name); !ok || got != want {
				t.Errorf("%s holds %q after the paused run's writes, want the other run's %q", name, got, want)
			}
		}
		if got := names(t, mirror); len(got) != len(before) {
			t.Errorf("the mirror holds %v after the paused run, want only the other run's %d files", got, len(before))
		}
		if ref, _ := read(t, mirror, "refs/heads/main"); ref != string(repo.RefFileContent("v2")) {
			t.Fatalf("refs/heads/main = %q, want the other run's v2", ref)
		}
	})
}

// Replace and Remove from a current read write and remove.
func TestReplaceAndRemoveFromACurrentRead(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		_, mirror := st.open(t)
		put(t, mirror, repo.RefsFile, "{}\n")
		put(t, mirror, "data/x.parquet", "x")
		version := func(name string) string {
			fi, err := mirror.Stat(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			return fi.Version
		}
		s := sink.New(mirror, sink.Options{})
		if err := s.Holdings().Replace(ctx, repo.RefsFile, []byte(`{"refs/heads/main":"v1"}`+"\n"), version(repo.RefsFile)); err != nil {
			t.Fatal(err)
		}
		if got, _ := read(t, mirror, repo.RefsFile); got != `{"refs/heads/main":"v1"}`+"\n" {
			t.Fatalf("refs.json = %q", got)
		}
		if err := s.Holdings().Replace(ctx, repo.HeadFile, []byte("ref: refs/heads/main\n"), ""); err != nil {
			t.Fatalf("creating HEAD where it was absent: %v", err)
		}
		if err := s.Holdings().Remove(ctx, "data/x.parquet", version("data/x.parquet")); err != nil {
			t.Fatal(err)
		}
		if _, ok := read(t, mirror, "data/x.parquet"); ok {
			t.Fatal("data/x.parquet is still there")
		}
		if st.conditional {
			// Absent when read, there since: the create is refused.
			put(t, mirror, "refs/heads/new", "v9\n")
			if err := s.Holdings().Replace(ctx, "refs/heads/new", []byte("v1\n"), ""); !backend.IsPreconditionFailed(err) {
				t.Fatalf("creating a ref another run made since: %v; want a fenced refusal", err)
			}
		}
	})
}

// PublishVersion writes the signature, then the record only where there
// is none: the same bytes again are fine (a retried write), other bytes
// mean another run published it, and are refused.
func TestPublishVersionCreatesTheRecordOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		_, mirror := st.open(t)
		s := sink.New(mirror, sink.Options{})
		record, sig := []byte(`{"id":"v1"}`), []byte("sig")
		if err := s.Versions().Publish(ctx, "v1", record, sig); err != nil {
			t.Fatal(err)
		}
		if got, _ := read(t, mirror, repo.VersionFile("v1", repo.RecordFile)); got != string(record) {
			t.Fatalf("version.json = %q", got)
		}
		if got, _ := read(t, mirror, repo.VersionFile("v1", repo.SignatureFile)); got != string(sig) {
			t.Fatalf("version.json.sig = %q", got)
		}
		if err := s.Versions().Publish(ctx, "v1", record, nil); err != nil {
			t.Fatalf("the same record again: %v", err)
		}
		err := s.Versions().Publish(ctx, "v1", []byte(`{"id":"v1","other":1}`), nil)
		var fe *sink.FileError
		if !errors.As(err, &fe) || fe.File != repo.VersionFile("v1", repo.RecordFile) || !backend.IsPreconditionFailed(err) {
			t.Fatalf("another record over a published one: %v; want a fenced FileError naming version.json", err)
		}
		if got, _ := read(t, mirror, repo.VersionFile("v1", repo.RecordFile)); got != string(record) {
			t.Fatalf("version.json = %q after the refused publish, want the first", got)
		}
	})
}

// A dry-run sink writes nothing, and tells Planned of each write.
func TestDryRunSinkWritesNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		up, mirror := st.open(t)
		src := upstream(t, up, map[string]string{"d.parquet": "ddd"})
		put(t, mirror, "data/gone.parquet", "g")
		before := names(t, mirror)
		var rec recorder
		s := sink.New(mirror, rec.options(sink.Options{DryRun: true}))
		f, err := src.Data().Open(ctx, "d.parquet", 3, source.Spool{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		steps := []error{
			s.Data().Put(ctx, "data/d.parquet", f),
			s.Holdings().Replace(ctx, repo.RefsFile, []byte("{}\n"), ""),
			s.Holdings().Remove(ctx, "data/gone.parquet", ""),
			s.Versions().Publish(ctx, "v1", []byte("{}"), []byte("sig")),
		}
		if ok, err := s.Data().Copy(ctx, src.Data().Origin(), "data/e.parquet", 3); err != nil || !ok {
			t.Fatalf("dry-run Data().Copy = %v, %v", ok, err)
		}
		for i, err := range steps {
			if err != nil {
				t.Fatalf("dry-run step %d: %v", i, err)
			}
		}
		if got := names(t, mirror); !slices.Equal(got, before) {
			t.Fatalf("a dry run changed the mirror: %v, was %v", got, before)
		}
		want := []string{"data/d.parquet", repo.RefsFile, "data/gone.parquet",
			repo.VersionFile("v1", repo.SignatureFile), repo.VersionFile("v1", repo.RecordFile), "data/e.parquet"}
		if !slices.Equal(rec.planned, want) || rec.files != 0 {
			t.Fatalf("planned %v (copied %d files), want %v and none copied", rec.planned, rec.files, want)
		}
	})
}

// The catalogs and state files a run reads back come from the mirror.
func TestReadsComeFromTheMirror(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		_, mirror := st.open(t)
		cat := bytes.Repeat([]byte("catalog"), 100)
		put(t, mirror, repo.VersionFile("v1", repo.CatalogFile), string(cat))
		s := sink.New(mirror, sink.Options{})
		f, err := s.Versions().FetchFile(ctx, repo.VersionFile("v1", repo.CatalogFile), t.TempDir(), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Remove()
		if f.Size != int64(len(cat)) {
			t.Fatalf("fetched %d bytes, want %d", f.Size, len(cat))
		}
		if _, err := s.Versions().FetchFile(ctx, repo.VersionFile("v1", repo.CatalogFile), t.TempDir(), int64(len(cat))-1); err == nil {
			t.Fatal("a catalog past its bound was fetched")
		}
		state, raw, err := s.State().UpstreamState(ctx)
		if err != nil || raw != nil || len(state.Refs) != 0 {
			t.Fatalf("a mirror without upstream.json: %+v, %q, %v", state, raw, err)
		}
		if err := s.State().WriteUpstreamState(ctx, sink.UpstreamState{Refs: map[string]sink.RefSeen{"refs/heads/main": {Version: "v1"}}}); err != nil {
			t.Fatal(err)
		}
		if state, _, err = s.State().UpstreamState(ctx); err != nil || state.Refs["refs/heads/main"].Version != "v1" {
			t.Fatalf("upstream.json read back: %+v, %v", state, err)
		}
		rec, err := s.State().SourceRecord(ctx)
		if err != nil || rec != nil {
			t.Fatalf("a mirror without source.json: %+v, %v", rec, err)
		}
	})
}

// A prune's reads (holdings.go) give each object it may remove with the
// version token its listing or read gave, so that a removal conditional
// on it removes that object and not one another run wrote since; a ref
// that breaks the rules comes back apart, for the prune to refuse,
// never dropped as if the mirror had no such ref.
func TestPruneReadsGiveEachObjectItsToken(t *testing.T) {
	eachStore(t, func(t *testing.T, st store) {
		ctx := context.Background()
		_, mirror := st.open(t)
		s := sink.New(mirror, sink.Options{})
		if _, err := s.Holdings().ReadSettings(ctx); !backend.IsNotExist(err) {
			t.Fatalf("fdl.json of an empty mirror: %v; want not found", err)
		}
		put(t, mirror, repo.SettingsFile, settings)
		put(t, mirror, "refs/heads/main", "v1\n")
		put(t, mirror, "refs/heads/Upper", "v1\n")
		put(t, mirror, repo.RefsFile, string(repo.RefsJSON(repo.Refs{"refs/heads/main": "v1"})))
		put(t, mirror, repo.HeadFile, "ref: refs/heads/main\n")
		put(t, mirror, repo.VersionFile("v1", repo.RecordFile), "{}")
		put(t, mirror, "data/b.parquet", "b")
		put(t, mirror, "data/a.parquet", "a")

		if !s.Holdings().CanList() {
			t.Fatalf("%s: the store cannot list", st.name)
		}
		if raw, err := s.Holdings().ReadSettings(ctx); err != nil || string(raw) != settings {
			t.Fatalf("fdl.json: %q, %v", raw, err)
		}
		tokens := map[string]string{}
		refs, bad, err := s.Holdings().ReadRefFiles(ctx, tokens)
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) != 1 || refs["refs/heads/main"] != "v1" {
			t.Errorf("refs %v, want only refs/heads/main → v1", refs)
		}
		if len(bad) != 1 || bad[0].Ref != "refs/heads/Upper" {
			t.Errorf("refs refused %v, want refs/heads/Upper", bad)
		}
		raw, refsVersion, err := s.Holdings().ReadRefsJSON(ctx)
		if err != nil || !strings.Contains(string(raw), "refs/heads/main") {
			t.Fatalf("refs.json: %q, %v", raw, err)
		}
		head, headVersion, err := s.Holdings().ReadHead(ctx)
		if err != nil || string(head) != "ref: refs/heads/main\n" {
			t.Fatalf("HEAD: %q, %v", head, err)
		}
		versions, err := s.Holdings().ListVersions(ctx, tokens)
		if _, ok := versions["v1"][repo.RecordFile]; err != nil || !ok {
			t.Fatalf("versions %v, %v; want v1 with its record", versions, err)
		}
		data, err := s.Holdings().ListDataFiles(ctx, "data/", tokens)
		if want := []string{"data/a.parquet", "data/b.parquet"}; err != nil || !slices.Equal(data, want) {
			t.Fatalf("data files %v, %v; want %v", data, err, want)
		}
		if !st.conditional {
			return
		}
		tokens[repo.RefsFile], tokens[repo.HeadFile] = refsVersion, headVersion
		for _, name := range []string{"refs/heads/main", repo.RefsFile, repo.HeadFile, repo.VersionFile("v1", repo.RecordFile), "data/a.parquet"} {
			if tokens[name] == "" {
				t.Errorf("%s: no version token", name)
			}
		}
		put(t, mirror, "data/a.parquet", "rewritten by another run")
		if err := s.Holdings().Remove(ctx, "data/a.parquet", tokens["data/a.parquet"]); !backend.IsPreconditionFailed(err) {
			t.Fatalf("removing a file rewritten since it was listed: %v; want a fenced refusal", err)
		}
		if got, _ := read(t, mirror, "data/a.parquet"); got != "rewritten by another run" {
			t.Fatalf("data/a.parquet = %q after the refused removal", got)
		}
		for _, name := range []string{"data/b.parquet", "refs/heads/main", repo.HeadFile} {
			if err := s.Holdings().Remove(ctx, name, tokens[name]); err != nil {
				t.Fatalf("removing %s as it was read: %v", name, err)
			}
			if _, ok := read(t, mirror, name); ok {
				t.Fatalf("%s is still there", name)
			}
		}
	})
}
