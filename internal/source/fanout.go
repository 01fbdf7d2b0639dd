package source

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"sync"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Fan-out: one run to several sinks (internal/mirror's RunSinks) reads the
// upstream once, as Debian's two-stage mirrors feed a second mirror from
// the first. The sinks run one after another on one Source, which
// remembers what it read and judged (Share): fdl.json, the refs, the
// version listing, records and signatures; from the second sink on
// (NextSink) it serves those as read rather than asking the upstream
// again, so that every sink is given the same upstream. An immutable file
// (a data file, a version's file) is read from an earlier sink of the run
// that holds it (AddPeer) before the upstream.
//
// A peer's bytes are untrusted as the upstream's are, and pass the same
// checks: a data file's size against its catalog's, a catalog's sha256
// against its record's. A peer's file that fails them is not refused (the
// upstream's is what is judged): it is read from the upstream instead.

// share is what a Source remembers for the sinks after the first.
type share struct {
	mu      sync.Mutex
	on      bool // Share was called: remember what is read
	replay  bool // NextSink was called: serve what was remembered
	refs    *Refs
	records map[string][]byte           // version → version.json as read
	sigs    map[string][]byte           // version → version.json.sig as read
	files   map[string]map[string]int64 // version → its folder's files (a store that cannot list)
	expired map[string]bool             // version → marked expired (a store that cannot list)
	peers   []backend.Reader            // earlier sinks of the run, in order
	refused sync.Map                    // name → true: a peer's copy failed its check; upstream only
}

// Share makes the Source remember what it reads and judges, for the
// sinks of a fan-out after the first (see NextSink).
func (s *Source) Share() {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	s.shared.on = true
	s.shared.records = map[string][]byte{}
	s.shared.sigs = map[string][]byte{}
	s.shared.files = map[string]map[string]int64{}
	s.shared.expired = map[string]bool{}
}

// NextSink starts the run of the next sink of a fan-out: from now on the
// settings, refs, version listing, records and signatures already read
// are served as they were read (a sink run after the first reads the same
// upstream), and what was not read yet is read and remembered.
func (s *Source) NextSink() {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	s.shared.replay = s.shared.on
}

// AddPeer names an earlier sink of the run, whose store r holds the
// repository's immutable files under the same names as the upstream: the
// data files and version files later sinks copy are read from it first.
func (s *Source) AddPeer(r backend.Reader) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	s.shared.peers = append(s.shared.peers, r)
}

func (s *Source) peers() []backend.Reader {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	return s.shared.peers
}

func (s *Source) replaying() bool {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	return s.shared.replay
}

// rememberedRefs is the refs as last read, for a sink after the first.
func (s *Source) rememberedRefs() (Refs, bool) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if !s.shared.replay || s.shared.refs == nil {
		return Refs{}, false
	}
	out := *s.shared.refs
	out.Refs = maps.Clone(out.Refs)
	out.Refused = append([]*RefusalError(nil), out.Refused...)
	return out, true
}

func (s *Source) rememberRefs(r Refs) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if s.shared.on {
		r.Refs = maps.Clone(r.Refs)
		s.shared.refs = &r
	}
}

// remembered looks a version's file up in m (records, sigs) for a sink
// after the first.
func (s *Source) remembered(m func(*share) map[string][]byte, id string) ([]byte, bool) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if !s.shared.replay {
		return nil, false
	}
	b, ok := m(&s.shared)[id]
	return b, ok
}

func (s *Source) remember(m func(*share) map[string][]byte, id string, b []byte) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if s.shared.on {
		m(&s.shared)[id] = b
	}
}

// rememberedFiles is a version folder's files, as a store that cannot
// list was asked for them, for a sink after the first.
func (s *Source) rememberedFiles(id string) (map[string]int64, bool) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if !s.shared.replay {
		return nil, false
	}
	files, ok := s.shared.files[id]
	return maps.Clone(files), ok
}

func (s *Source) rememberFiles(id string, files map[string]int64) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if s.shared.on {
		s.shared.files[id] = maps.Clone(files)
	}
}

// rememberedExpired is whether a version was found expired, as a store
// that cannot list was asked, for a sink after the first.
func (s *Source) rememberedExpired(id string) (expired, ok bool) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if !s.shared.replay {
		return false, false
	}
	expired, ok = s.shared.expired[id]
	return expired, ok
}

func (s *Source) rememberExpired(id string, expired bool) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if s.shared.on {
		s.shared.expired[id] = expired
	}
}

func records(sh *share) map[string][]byte { return sh.records }
func sigs(sh *share) map[string][]byte    { return sh.sigs }

// readRecordBytes reads version id's version.json, or serves it as a
// sink before read it.
func (s *Source) readRecordBytes(ctx context.Context, name, id string) ([]byte, error) {
	return s.readOnce(ctx, records, name, id, repo.MaxRecordFile)
}

// readSignatureBytes reads version id's signature, or serves it as a sink
// before read it.
func (s *Source) readSignatureBytes(ctx context.Context, name, id string) ([]byte, error) {
	return s.readOnce(ctx, sigs, name, id, repo.MaxSmallFile)
}

// readOnce reads name, at most max bytes, unless m (records, sigs) holds
// version id's already; what it reads, it remembers there.
func (s *Source) readOnce(ctx context.Context, m func(*share) map[string][]byte, name, id string, max int64) ([]byte, error) {
	if b, ok := s.remembered(m, id); ok {
		return b, nil
	}
	b, err := backend.ReadAll(ctx, s.r, name, max)
	if err == nil {
		s.remember(m, id, b)
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
	for _, p := range s.peers() {
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
			s.log.Debug("earlier sink could not give a file; read upstream", zap.String("sink", p.Location()), zap.String("file", name), zap.Error(err))
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

// FetchCatalogFromPeer fetches file, one of version id's catalogs, from
// the first earlier sink of the run whose copy has the sha256 its record
// gives (want): nil where there is no peer, no sum to check it by, or no
// peer with that copy. The caller then fetches it upstream.
func (s *Source) FetchCatalogFromPeer(ctx context.Context, pool *catalog.Pool, id, file, want string) *catalog.Fetched {
	if want == "" {
		return nil
	}
	name := repo.VersionFile(id, file)
	for _, p := range s.peers() {
		f, err := pool.Fetch(ctx, p, name)
		if err != nil {
			continue
		}
		if f.SHA256 == want {
			return f
		}
		f.Remove()
	}
	return nil
}

// peerMismatch is a peer's file that broke its size as it was read: not
// a refusal (the upstream's file is what is judged), a failed try.
func peerMismatch(name, peer string, want int64) error {
	return fmt.Errorf("data file %s in the earlier sink %s is not of the %d bytes its catalog records; read from the upstream instead", name, peer, want)
}
