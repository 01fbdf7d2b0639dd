package source

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"sync"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Fan-out: one run to several sinks (internal/mirror's RunSinks) reads the
// upstream once, as Debian's two-stage mirrors feed a second mirror from
// the first. The sinks run one after another on one Source, which
// remembers what it read and judged (Fanout().Share): fdl.json, the
// refs, the version listing, records and signatures; from the second
// sink on (Fanout().NextSink) it serves those as read rather than asking
// the upstream again, so that every sink is given the same upstream. An
// immutable file (a data file, a version's file) is read from an earlier
// sink of the run that holds it (Fanout().AddPeer) before the upstream.
// A catalog's bytes are read by a confined reader once in the run
// (sharedreads.go).
//
// A peer's bytes are untrusted as the upstream's are, and pass the same
// checks: a data file's size against its catalog's, a catalog's sha256
// against its record's. A peer's file that fails them is not refused (the
// upstream's is what is judged): it is read from the upstream instead.

// share is what a Source remembers for the sinks after the first. Its
// methods are the memory itself: what was read is remembered while the
// fan-out is on, and served only once the next sink runs, so that a
// single sink's run reads the upstream as it always did.
type share struct {
	mu      sync.Mutex
	on      bool // Share was called: remember what is read
	replay  bool // NextSink was called: serve what was remembered
	refs    *Refs
	records map[string][]byte           // version → version.json as read
	sigs    map[string][]byte           // version → version.json.sig as read
	files   map[string]map[string]int64 // version → its folder's files (a store that cannot list)
	expired map[string]bool             // version → marked expired (a store that cannot list)
	earlier []backend.Reader            // earlier sinks of the run, in order (AddPeer)
	refused sync.Map                    // name → true: a peer's copy failed its check; upstream only
	reads   reads                       // catalogs read, for every sink (sharedreads.go)
}

// Fanout is the Source as one run to several sinks reads it: what it
// remembers for the later sinks, and the earlier sinks it reads from.
// A concern of its own so that a run to one sink never meets it.
type Fanout struct{ s *Source }

// Fanout is the Source's memory for a run to several sinks.
func (s *Source) Fanout() Fanout { return Fanout{s} }

// Share makes the Source remember what it reads and judges, for the
// sinks of a fan-out after the first (see NextSink).
func (f Fanout) Share() {
	sh := &f.s.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.on = true
	sh.records = map[string][]byte{}
	sh.sigs = map[string][]byte{}
	sh.files = map[string]map[string]int64{}
	sh.expired = map[string]bool{}
}

// Close removes what the Source kept for the sinks (the catalogs read),
// once the run's last sink is done.
func (f Fanout) Close() error { return f.s.shared.closeReads() }

// NextSink starts the run of the next sink of a fan-out: from now on the
// settings, refs, version listing, records and signatures already read
// are served as they were read (a sink run after the first reads the same
// upstream), and what was not read yet is read and remembered.
func (f Fanout) NextSink() {
	sh := &f.s.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.replay = sh.on
}

// AddPeer names an earlier sink of the run, whose store r holds the
// repository's immutable files under the same names as the upstream: the
// data files and version files later sinks copy are read from it first.
func (f Fanout) AddPeer(r backend.Reader) {
	sh := &f.s.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.earlier = append(sh.earlier, r)
}

// peers is the earlier sinks of the run, in order.
func (sh *share) peers() []backend.Reader {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.earlier
}

// replaying says whether a sink after the first is running.
func (sh *share) replaying() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.replay
}

// rememberedRefs is the refs as last read, for a sink after the first.
func (sh *share) rememberedRefs() (Refs, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.replay || sh.refs == nil {
		return Refs{}, false
	}
	out := *sh.refs
	out.Refs = maps.Clone(out.Refs)
	out.Refused = append([]*RefusalError(nil), out.Refused...)
	return out, true
}

func (sh *share) rememberRefs(r Refs) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.on {
		r.Refs = maps.Clone(r.Refs)
		sh.refs = &r
	}
}

// remembered looks a version's file up in m (records, sigs) for a sink
// after the first.
func (sh *share) remembered(m func(*share) map[string][]byte, id string) ([]byte, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.replay {
		return nil, false
	}
	b, ok := m(sh)[id]
	return b, ok
}

func (sh *share) remember(m func(*share) map[string][]byte, id string, b []byte) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.on {
		m(sh)[id] = b
	}
}

// rememberedFiles is a version folder's files, as a store that cannot
// list was asked for them, for a sink after the first.
func (sh *share) rememberedFiles(id string) (map[string]int64, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.replay {
		return nil, false
	}
	files, ok := sh.files[id]
	return maps.Clone(files), ok
}

func (sh *share) rememberFiles(id string, files map[string]int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.on {
		sh.files[id] = maps.Clone(files)
	}
}

// rememberedExpired is whether a version was found expired, as a store
// that cannot list was asked, for a sink after the first.
func (sh *share) rememberedExpired(id string) (expired, ok bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.replay {
		return false, false
	}
	expired, ok = sh.expired[id]
	return expired, ok
}

func (sh *share) rememberExpired(id string, expired bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.on {
		sh.expired[id] = expired
	}
}

func records(sh *share) map[string][]byte { return sh.records }
func sigs(sh *share) map[string][]byte    { return sh.sigs }

// readRecordBytes reads version id's version.json, or serves it as a
// sink before read it.
func (v Versions) readRecordBytes(ctx context.Context, name, id string) ([]byte, error) {
	return v.readOnce(ctx, records, name, id, repo.MaxRecordFile)
}

// readSignatureBytes reads version id's signature, or serves it as a sink
// before read it.
func (v Versions) readSignatureBytes(ctx context.Context, name, id string) ([]byte, error) {
	return v.readOnce(ctx, sigs, name, id, repo.MaxSmallFile)
}

// readOnce reads name, at most max bytes, unless m (records, sigs) holds
// version id's already; what it reads, it remembers there.
func (v Versions) readOnce(ctx context.Context, m func(*share) map[string][]byte, name, id string, max int64) ([]byte, error) {
	sh := &v.s.shared
	if b, ok := sh.remembered(m, id); ok {
		return b, nil
	}
	b, err := backend.ReadAll(ctx, v.s.r, name, max)
	if err == nil {
		sh.remember(m, id, b)
	}
	return b, err
}

// fromPeer opens name, of size bytes (known: a peer's file of unknown
// size is not taken), from the first earlier sink of the run that holds
// it at that size; nil where none does.
func (d Data) fromPeer(ctx context.Context, name string, size int64) *DataFile {
	s := d.s
	if size < 0 {
		return nil
	}
	if _, bad := s.shared.refused.Load(name); bad {
		return nil
	}
	for _, p := range s.shared.peers() {
		if f := d.openPeer(ctx, p, name, size); f != nil {
			return f
		}
	}
	return nil
}

func (d Data) openPeer(ctx context.Context, p backend.Reader, name string, size int64) *DataFile {
	s := d.s
	rc, err := p.Open(ctx, name)
	if err != nil {
		if !backend.IsNotExist(err) {
			s.log.Debug("earlier sink could not give a file; read upstream", zap.String("earlier_sink", p.Location()), zap.String("file", name), zap.Error(err))
		}
		return nil
	}
	if st, ok := rc.(interface{ Stat() (fs.FileInfo, error) }); ok {
		// A local folder: its size is known without reading it.
		fi, err := st.Stat()
		if err != nil || fi.Size() != size {
			rc.Close()
			return nil
		}
		return &DataFile{name: name, size: size, body: rc, close: rc.Close}
	}
	fi, err := p.Stat(ctx, name)
	if err != nil || fi.Size != size {
		rc.Close()
		return nil
	}
	// Checked as it is read too: a peer's file that is not what its Stat
	// said fails this copy, whose next try reads the upstream.
	x := &exactReader{r: rc, left: size, name: name, want: size, peer: p.Location(), onPeerMismatch: func() {
		s.shared.refused.Store(name, true)
	}}
	return &DataFile{name: name, size: size, body: x, close: rc.Close}
}

// peerMismatch is a peer's file that broke its size as it was read: not
// a refusal (the upstream's file is what is judged), a failed try.
func peerMismatch(name, peer string, want int64) error {
	return fmt.Errorf("data file %s in the earlier sink %s is not of the %d bytes its catalog records; read from the upstream instead", name, peer, want)
}
