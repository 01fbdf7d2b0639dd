// Package source is the upstream, read and judged: everything untrusted
// enters the mirror here. It reads the repository's settings (fdl.json),
// its refs (by listing refs/, or from refs.json where the store cannot
// list, with the values the mirror saw last as a hint), version records,
// signatures (judged by a Trust: keys the operator trusts, never the
// repository's own list), the files and sizes of version folders, its
// catalogs (fetched to the local disk for a confined reader), and
// whether a version was withdrawn or expired. A verdict against the
// upstream is a Refusal, with one of the reasons below; internal/sync
// decides what a refusal stops.
//
// A record is parsed in one place (JudgeRecord) and a signature checked
// in one (JudgeSignature), whoever read their bytes: the mirror's copies
// (read by internal/sink) are judged here too. Refs are read in one way
// (ReadRefs) for sync, status, prune and verify.
//
// A Source is reached by concern, each a small value holding it (as
// internal/sink's are): Versions (version folders listed, records and
// signatures read and judged, withdrawn or expired), Catalogs (fetched
// to the local disk for a confined reader), Data (data files, opened and
// checked as they are read), Whole (the repository read whole, for
// verify) and Fanout (one read of the upstream for several sinks). The
// Source itself reads fdl.json and the refs.
//
// In a run (see internal/sync): ReadSettings first; ReadRefs while the
// sink takes its inventory (and again once the run holds the lock);
// Versions().List; then, per version, Versions().ReadRecord, .Files,
// .ReadSignature (read and judged), Catalogs().Fetch; and the data files
// through Data(): opened for a copy, or sized before a server-side copy.
// Ancestry, verify and prune ask Versions().Read; a prune asks
// CheckRefTargets and Versions().Status; verify reads the repository
// whole as well (Whole, Catalogs().FetchTo).
//
// Files: source.go (Source, settings; Versions' listing and sizes),
// refs.go (the upstream's refs), records.go (Versions: records and
// signatures, Trust), catalogs.go (Catalogs), files.go (Data),
// refusal.go (Refusal, its reasons), status.go (withdrawn or expired),
// reftargets.go (whether refs name versions upstream holds),
// repository.go (Whole), fanout.go (Fanout: what the later sinks are
// served, and the earlier sinks read before the upstream).
package source

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Source is an upstream repository as one run reads it.
type Source struct {
	r        backend.Reader
	log      *zap.Logger
	trust    Trust          // nil: no signature is checked
	settings *repo.Settings // once ReadSettings
	versions map[string]map[string]int64
	data     backend.LazyListing // data_dir, listed for many server-side copies
	stats    atomic.Int64        // files asked for their size one by one (see Size)
	read     repo.Refs           // the refs as ReadRefs last read them
	shared   share               // what a fan-out's later sinks are served (fanout.go)
}

// New is the upstream in r; trust nil checks no signature.
func New(r backend.Reader, trust Trust, log *zap.Logger) *Source {
	if log == nil {
		log = zap.NewNop()
	}
	return &Source{r: r, trust: trust, log: log}
}

// Location is the upstream's address, for messages.
func (s *Source) Location() string { return s.r.Location() }

// Settings is the upstream's fdl.json, as ReadSettings read it.
func (s *Source) Settings() *repo.Settings { return s.settings }

// ReadSettings reads and checks the upstream's fdl.json, and warns where
// the signers it lists differ from the trusted ones. The error wraps a
// *ReadError where fdl.json could not be read, else the rule it breaks
// (a *SettingsError).
func (s *Source) ReadSettings(ctx context.Context) (*repo.Settings, error) {
	if s.settings != nil && s.shared.replaying() {
		return s.settings, nil // a fan-out's later sink: as the first read it
	}
	raw, err := backend.ReadAll(ctx, s.r, repo.SettingsFile, repo.MaxSmallFile)
	if err != nil {
		return nil, s.errorf("%w", &ReadError{repo.SettingsFile, err})
	}
	settings, err := repo.ParseSettings(raw)
	if err != nil {
		return nil, s.errorf("%w", &SettingsError{err})
	}
	s.settings = settings
	if s.trust != nil {
		if w := s.trust.CompareRepoSigners(settings.Signers); w != "" {
			s.log.Warn("repository signers differ from the trusted signers", zap.String("detail", w))
		}
	}
	return settings, nil
}

// SettingsError is an fdl.json that breaks the rules; its message is
// the rule's.
type SettingsError struct{ Err error }

func (e *SettingsError) Error() string { return e.Err.Error() }
func (e *SettingsError) Unwrap() error { return e.Err }

// CanList says whether the upstream's store can list (else a reader
// follows refs.json, and asks for files by the names the layout knows).
func (s *Source) CanList() bool { return s.r.Properties().CanList }

// List lists versions/ upstream, where the store can list: one listing,
// whatever the number of versions.
func (v Versions) List(ctx context.Context) error {
	s := v.s
	if !s.r.Properties().CanList || (s.versions != nil && s.shared.replaying()) {
		return nil
	}
	versions, err := repo.ListVersions(ctx, s.r, nil)
	if err != nil {
		return s.errorf("%w", err)
	}
	s.versions = versions
	return nil
}

// Listing maps every version folder upstream to its files and sizes, as
// List listed them; nil where the store cannot list.
func (v Versions) Listing() map[string]map[string]int64 { return v.s.versions }

// Files names the files of a version's folder upstream, with their sizes
// (-1 where unknown until read). A store that cannot list is asked for
// the names the layout knows.
func (v Versions) Files(ctx context.Context, id string) (map[string]int64, error) {
	s := v.s
	if s.versions != nil {
		return s.versions[id], nil
	}
	if files, ok := s.shared.rememberedFiles(id); ok {
		return files, nil
	}
	names := append(append([]string{}, repo.KnownVersionFiles...), s.settings.CatalogFiles()...)
	files := map[string]int64{}
	stat := func(name string) (struct{}, error) {
		fi, err := s.r.Stat(ctx, repo.VersionFile(id, name))
		if err == nil {
			files[name] = fi.Size
		}
		return struct{}{}, err
	}
	for _, n := range names {
		var err error
		if n == repo.CatalogFile {
			_, _, err = repo.FindMainCatalog(stat) // ducklake.duckdb, else metadata.db
		} else {
			_, err = stat(n)
		}
		if err != nil && !backend.IsNotExist(err) {
			return nil, err
		}
	}
	s.shared.rememberFiles(id, files)
	return files, nil
}

// listPage is how many names a list request returns (S3's and GCS's
// default page).
const listPage = 1000

// Size is an upstream file's size, checked before a server-side copy (no
// byte passes through the mirror to count). A run copying many files (it
// listed the sink's data_dir, of sinkFiles files, rather than asking file
// by file) takes the sizes from one listing of the upstream's data_dir: a
// page per thousand files instead of a request per file. It asks file by
// file first, as many times as that listing would take pages (guessed
// from the sink's, which holds most of the same files): a run adding ten
// files to a mirror of twenty thousand asks ten times rather than listing
// twenty pages, and one copying everything pays at most twice the cheaper
// way.
func (d Data) Size(ctx context.Context, name string, sinkListed bool, sinkFiles int) (int64, error) {
	s := d.s
	if sinkListed && s.r.Properties().CanList && strings.HasPrefix(name, s.settings.DataDir) &&
		(s.data.Loaded() || s.stats.Add(1) > int64(sinkFiles/listPage+1)) {
		if err := s.data.Load(ctx, s.r, s.settings.DataDir); err == nil {
			if size, ok := s.data.Size(name); ok {
				return size, nil
			}
		}
		// Not listed (or the listing failed): ask for it alone.
	}
	fi, err := s.r.Stat(ctx, name)
	return fi.Size, err
}

// Listed says whether the upstream's data_dir was listed (by Size).
func (d Data) Listed() bool { return d.s.data.Loaded() }

// errorf is an error about the upstream, naming it.
func (s *Source) errorf(format string, args ...any) error {
	return fmt.Errorf("source %s: "+format, append([]any{s.r.Location()}, args...)...)
}
