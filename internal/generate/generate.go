// Package generate writes FDL repositories for tests, the demo and the
// benchmarks: DuckLake catalogs made with DuckDB following the DuckLake
// table layout (the ducklake extension is not needed), real Parquet data
// and delete files written by DuckDB, version records with parents and
// sha256, refs, refs.json and HEAD.
//
// Each version's catalog is the previous version's catalog plus one new
// snapshot, as a DuckLake publisher would freeze it: rows of files that a
// later snapshot removes stay, with end_snapshot set, so every version
// needs every file its catalog has ever listed.
package generate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// Options shape a generated repository. The zero value is valid.
type Options struct {
	Versions             int                                 // versions in a chain on main (default 3)
	FilesPerVersion      int                                 // data files each version adds (default 2)
	RowsPerFile          int                                 // rows per generated Parquet file (default 100)
	LargeFiles           []int64                             // approximate sizes in bytes of extra large data files added in the first version
	DataDir              string                              // fdl.json data_dir (default "data/")
	Layout               string                              // "0.3" (default: schema and table paths) or "0.1" (no schema/table paths)
	DeleteFiles          bool                                // each version after the first adds a delete file against an earlier data file
	RemoveFiles          bool                                // each version after the first ends (sets end_snapshot on) one earlier data file: historical rows
	ScheduledForDeletion bool                                // add a row to ducklake_files_scheduled_for_deletion naming a file that is NOT written
	Tags                 bool                                // refs/tags/v1, v2, ... one per version
	ID                   string                              // repository id (default: random UUID)
	ExtraFiles           bool                                // dataset.json and files.json in each version directory
	Signer               func(record []byte) ([]byte, error) // when set, version.json.sig = Signer(version.json bytes)
	FastParquet          bool                                // write a few Parquet files with DuckDB and reuse their bytes under new names (catalog sizes still exact)
	UnwrittenFiles       int                                 // rows of data files the first version's catalog lists that are NOT written (a catalog as large as a wide repository's, for benchmarks of reading it)
	Seed                 int64                               // varies the generated values

	// CatalogDataPath is the data_path stored in new catalogs (default
	// "/var/lib/publisher/data/"): FDL readers replace it with
	// <root>/<data_dir>, so it only has to be consistent.
	CatalogDataPath string
	// WriteDataDir writes data_dir into fdl.json even when it is the default.
	WriteDataDir bool
	// AlternateCatalog, a DuckLake version such as "1.0", gives every
	// version an alternate catalog, catalogs/ducklake-<it>.duckdb, that
	// lists one data file more than the main one, and names it in
	// fdl.json's catalog_formats as the spec does.
	AlternateCatalog string
	// MetadataDB makes each version's catalog metadata.db, as fdl-cli 0.27
	// and later name it, instead of ducklake.duckdb: MetadataDuckDB (the
	// same DuckDB file) or MetadataSQLite (its tables copied into SQLite).
	// The record's sha256 is metadata.db's.
	MetadataDB string
}

// Defaults of Options.
const (
	DefaultVersions        = 3
	DefaultFilesPerVersion = 2
	DefaultRowsPerFile     = 100
	DefaultLayout          = "0.3"
	DefaultCatalogDataPath = "/var/lib/publisher/data/"

	// SchemaName and TableName are the schema and table generated catalogs
	// hold; with layout 0.3 data files live under
	// <data_dir>main/events/.
	SchemaName = "main"
	TableName  = "events"

	// SpecVersion is the fdl value of generated fdl.json files.
	SpecVersion = "0.1"
)

func (o Options) withDefaults() (Options, error) {
	if o.Versions == 0 {
		o.Versions = DefaultVersions
	}
	if o.FilesPerVersion == 0 {
		o.FilesPerVersion = DefaultFilesPerVersion
	}
	if o.RowsPerFile == 0 {
		o.RowsPerFile = DefaultRowsPerFile
	}
	if o.DataDir == "" {
		o.DataDir = repo.DefaultDataDir
	}
	if o.Layout == "" {
		o.Layout = DefaultLayout
	}
	if o.CatalogDataPath == "" {
		o.CatalogDataPath = DefaultCatalogDataPath
	}
	switch {
	case o.Versions < 0 || o.FilesPerVersion < 0 || o.RowsPerFile < 0:
		return o, fmt.Errorf("versions, files per version and rows per file must not be negative")
	case o.Layout != "0.3" && o.Layout != "0.1":
		return o, fmt.Errorf("layout %q: the generator writes DuckLake 0.3 or 0.1", o.Layout)
	case !strings.HasSuffix(o.CatalogDataPath, "/"):
		return o, fmt.Errorf("catalog data path %q does not end in /", o.CatalogDataPath)
	case o.MetadataDB != "" && o.MetadataDB != MetadataDuckDB && o.MetadataDB != MetadataSQLite:
		return o, fmt.Errorf("metadata.db format %q: %s or %s", o.MetadataDB, MetadataDuckDB, MetadataSQLite)
	case o.AlternateCatalog != "" && (strings.ContainsAny(o.AlternateCatalog, "/\\") || strings.HasPrefix(o.AlternateCatalog, ".")):
		return o, fmt.Errorf("alternate catalog version %q cannot be part of a file name", o.AlternateCatalog)
	}
	if err := repo.CheckDataDir(o.DataDir); err != nil {
		return o, err
	}
	for _, s := range o.LargeFiles {
		if s <= 0 {
			return o, fmt.Errorf("large file size %d is not positive", s)
		}
	}
	return o, nil
}

// Repo describes a generated repository.
type Repo struct {
	Dir       string            `json:"dir"`
	ID        string            `json:"id"`
	Versions  []string          `json:"versions"`   // oldest first; Versions[len-1] is refs/heads/main
	Refs      map[string]string `json:"refs"`       // every ref written
	DataFiles []string          `json:"data_files"` // repo-relative paths of every data and delete file, sorted

	// Missing lists the repo-relative paths of files a fixture's catalog
	// references that FromFixture did not find to copy (sorted).
	Missing []string `json:"missing,omitempty"`
}

// MainRef is the branch generated repositories publish on.
const MainRef = "refs/heads/main"

// builder writes one repository.
type builder struct {
	dir     string
	opts    Options
	dataDir string
	e       *engine
	w       *parquetWriter
	written map[string]bool // repo-relative data and delete files written
	// workingCatalogs are ducklake.duckdb files kept only for the next
	// version to start from, where metadata.db is the catalog.
	workingCatalogs []string
}

func newBuilder(ctx context.Context, dir, dataDir string, opts Options) (*builder, error) {
	e, err := openEngine(ctx)
	if err != nil {
		return nil, err
	}
	return &builder{
		dir: dir, opts: opts, dataDir: dataDir, e: e,
		w:       &parquetWriter{e: e, seed: opts.Seed, fast: opts.FastParquet},
		written: map[string]bool{},
	}, nil
}

func (b *builder) close() { b.e.Close() }

// local turns a repo-relative path into a path on disk.
func (b *builder) local(rel string) string { return filepath.Join(b.dir, filepath.FromSlash(rel)) }

func (b *builder) dataFiles() []string {
	out := make([]string, 0, len(b.written))
	for p := range b.written {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// newFileName is a data file name as DuckLake makes them.
func newFileName(suffix string) string { return "ducklake-" + newUUIDv7() + suffix + ".parquet" }

// addFiles writes n data files of rows rows each and records them in the
// catalog's pending snapshot.
func (b *builder) addFiles(ctx context.Context, c *catalog, n, rows int) error {
	files := make([]*dataFile, 0, n)
	next := c.nextRowID
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := b.dataDir + c.tableDir + newFileName("")
		if err := os.MkdirAll(filepath.Dir(b.local(rel)), 0o755); err != nil {
			return err
		}
		f, err := b.w.writeDataFile(ctx, c, b.local(rel), next, int64(rows))
		if err != nil {
			return err
		}
		b.written[rel] = true
		next += f.records
		files = append(files, f)
	}
	return c.addDataFiles(ctx, files)
}

// addLargeFiles writes one data file of about each size.
func (b *builder) addLargeFiles(ctx context.Context, c *catalog, sizes []int64) error {
	next := c.nextRowID
	var files []*dataFile
	for _, size := range sizes {
		rel := b.dataDir + c.tableDir + newFileName("")
		if err := os.MkdirAll(filepath.Dir(b.local(rel)), 0o755); err != nil {
			return err
		}
		f, err := b.w.writeLargeFile(ctx, c, b.local(rel), next, size)
		if err != nil {
			return err
		}
		b.written[rel] = true
		next += f.records
		files = append(files, f)
	}
	return c.addDataFiles(ctx, files)
}

// laterChanges are what every version after the first does besides adding
// files: end one earlier data file, add a delete file against another.
func (b *builder) laterChanges(ctx context.Context, c *catalog) error {
	if b.opts.RemoveFiles {
		live, err := c.liveFiles(ctx)
		if err != nil {
			return err
		}
		if len(live) > 0 {
			if err := c.endDataFile(ctx, live[0]); err != nil {
				return err
			}
		}
	}
	if b.opts.DeleteFiles {
		live, err := c.liveFiles(ctx)
		if err != nil {
			return err
		}
		for _, target := range live {
			if target.hasDelete || target.records == 0 {
				continue
			}
			rel := b.dataDir + c.tableDir + newFileName("-delete")
			del, err := b.w.writeDeleteFile(ctx, c, b.local(rel), target)
			if err != nil {
				return err
			}
			b.written[rel] = true
			if err := c.addDeleteFile(ctx, target, del); err != nil {
				return err
			}
			break
		}
	}
	return nil
}

// scheduleMissing records a file scheduled for deletion that is not
// written: readers must not need it. Its path is relative to the data path.
func (b *builder) scheduleMissing(ctx context.Context, c *catalog, now time.Time) error {
	return c.scheduleForDeletion(ctx, c.tableDir+newFileName(""), now)
}

// record is version.json as the generator writes it.
type record struct {
	ID      string   `json:"id"`
	Parents []string `json:"parents"`
	SHA256  string   `json:"sha256"`
	Created string   `json:"created"`
	Message string   `json:"message"`
}

// publish writes the version directory around its finished catalog:
// optional dataset.json and files.json, the signature, then version.json
// last, as a publisher must.
func (b *builder) publish(id, catalogPath string, parents []string, message string, now time.Time, extra map[string][]byte) error {
	sum, err := fileSHA256(catalogPath)
	if err != nil {
		return fmt.Errorf("version %s: %w", id, err)
	}
	if parents == nil {
		parents = []string{}
	}
	rec, err := json.MarshalIndent(record{ID: id, Parents: parents, SHA256: sum, Created: now.UTC().Format(time.RFC3339), Message: message}, "", "  ")
	if err != nil {
		return err
	}
	rec = append(rec, '\n')
	names := make([]string, 0, len(extra))
	for n := range extra {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := writeAtomic(b.local(repo.VersionFile(id, n)), extra[n]); err != nil {
			return fmt.Errorf("version %s: %w", id, err)
		}
	}
	if b.opts.Signer != nil {
		sig, err := b.opts.Signer(rec)
		if err != nil {
			return fmt.Errorf("version %s: sign %s: %w", id, repo.RecordFile, err)
		}
		if err := writeAtomic(b.local(repo.VersionFile(id, repo.SignatureFile)), sig); err != nil {
			return fmt.Errorf("version %s: %w", id, err)
		}
	}
	if err := writeAtomic(b.local(repo.VersionFile(id, repo.RecordFile)), rec); err != nil {
		return fmt.Errorf("version %s: %w", id, err)
	}
	return nil
}

// describe makes dataset.json and files.json for a version from its
// catalog (before it is closed).
func (b *builder) describe(ctx context.Context, c *catalog, id string) (map[string][]byte, error) {
	live, err := c.liveFiles(ctx)
	if err != nil {
		return nil, err
	}
	type colDoc struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	type tableDoc struct {
		Schema  string   `json:"schema"`
		Table   string   `json:"table"`
		Columns []colDoc `json:"columns"`
		Records int64    `json:"records"`
	}
	td := tableDoc{Schema: c.schemaName, Table: c.tableName, Records: c.recordCount}
	for _, col := range c.columns {
		td.Columns = append(td.Columns, colDoc{Name: col.name, Type: col.ducklakeType})
	}
	dataset, err := json.MarshalIndent(map[string]any{
		"title":       "generated dataset",
		"description": "written by fdl-mirror's generator for tests, the demo and benchmarks",
		"version":     id,
		"tables":      []tableDoc{td},
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	type fileDoc struct {
		Path        string `json:"path"`
		Size        int64  `json:"size"`
		RecordCount int64  `json:"record_count"`
	}
	var fd []fileDoc
	for _, f := range live {
		fd = append(fd, fileDoc{Path: b.dataDir + c.tableDir + f.name, Size: f.size, RecordCount: f.records})
	}
	files, err := json.MarshalIndent(map[string]any{
		"tables": map[string]any{c.schemaName + "." + c.tableName: map[string]any{"data_files": fd}},
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"dataset.json": append(dataset, '\n'), "files.json": append(files, '\n')}, nil
}

// SetRefs writes refs (ref name → version ID) into the repository in dir
// as the generator writes its own: the ref files, then refs.json naming
// every ref under refs/, then HEAD. It returns every ref.
func SetRefs(dir string, refs repo.Refs) (repo.Refs, error) {
	return (&builder{dir: dir}).writeRefs(refs)
}

// writeRefs writes ref files, then refs.json (every ref under refs/), then
// HEAD, in the order readers rely on.
func (b *builder) writeRefs(changed repo.Refs) (repo.Refs, error) {
	for _, name := range changed.Names() {
		if _, err := repo.CheckRefName(name); err != nil {
			return nil, err
		}
		if err := writeAtomic(b.local(name), repo.RefFileContent(changed[name])); err != nil {
			return nil, err
		}
	}
	all, err := readRefFiles(b.dir)
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(b.local(repo.RefsFile), repo.RefsJSON(all)); err != nil {
		return nil, err
	}
	if err := writeAtomic(b.local(repo.HeadFile), []byte("ref: "+MainRef+"\n")); err != nil {
		return nil, err
	}
	return all, nil
}

// readRefFiles reads every ref file under dir/refs.
func readRefFiles(dir string) (repo.Refs, error) {
	refs := repo.Refs{}
	root := filepath.Join(dir, "refs")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		content, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		id, err := repo.ParseRefFile(name, content)
		if err != nil {
			return err
		}
		refs[name] = id
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read refs in %s: %w", dir, err)
	}
	return refs, nil
}

// writeSettings creates fdl.json, refusing to overwrite a repository.
func writeSettings(dir, id, dataDir string, always bool, alternate string) error {
	doc := struct {
		FDL            string              `json:"fdl"`
		ID             string              `json:"id"`
		DataDir        string              `json:"data_dir,omitempty"`
		CatalogFormats []map[string]string `json:"catalog_formats,omitempty"`
	}{FDL: SpecVersion, ID: id}
	if always || dataDir != repo.DefaultDataDir {
		doc.DataDir = dataDir
	}
	if alternate != "" {
		// The spec's form; the main catalog's format is not listed, as
		// it is ducklake.duckdb (or metadata.db) itself.
		doc.CatalogFormats = []map[string]string{{"ducklake": alternate}}
	}
	content, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p := filepath.Join(dir, repo.SettingsFile)
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	if _, err := fh.Write(append(content, '\n')); err != nil {
		fh.Close()
		return fmt.Errorf("write %s: %w", p, err)
	}
	return fh.Close()
}

// startRepo writes a new repository's fdl.json in dir (with opts.ID, or a
// new one) and opens the builder that writes its versions.
func startRepo(ctx context.Context, dir string, opts Options) (Options, string, *builder, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return opts, "", nil, err
	}
	id := opts.ID
	if id == "" {
		id = newUUIDv4()
	}
	if err := writeSettings(dir, id, opts.DataDir, opts.WriteDataDir, opts.AlternateCatalog); err != nil {
		return opts, "", nil, err
	}
	b, err := newBuilder(ctx, dir, opts.DataDir, opts)
	if err != nil {
		return opts, "", nil, err
	}
	return opts, id, b, nil
}

// Generate writes a new repository in dir (which must not hold one): a
// chain of opts.Versions versions on refs/heads/main.
func Generate(ctx context.Context, dir string, opts Options) (*Repo, error) {
	opts, id, b, err := startRepo(ctx, dir, opts)
	if err != nil {
		return nil, err
	}
	defer b.close()

	out := &Repo{Dir: dir, ID: id}
	changed := repo.Refs{}
	var prev string
	for v := 1; v <= opts.Versions; v++ {
		vid := newUUIDv7()
		now := time.Now()
		catalogPath := b.local(repo.VersionFile(vid, repo.CatalogFile))
		if err := os.MkdirAll(filepath.Dir(catalogPath), 0o755); err != nil {
			return nil, err
		}
		var c *catalog
		var parents []string
		if prev == "" {
			c, err = createCatalog(ctx, b.e, catalogPath, opts.Layout, opts.CatalogDataPath, now)
			if err != nil {
				return nil, err
			}
			c.begin()
			err = b.firstVersion(ctx, c, now)
		} else {
			parents = []string{prev}
			c, err = copyCatalog(ctx, b.e, b.local(repo.VersionFile(prev, repo.CatalogFile)), catalogPath)
			if err != nil {
				return nil, err
			}
			c.begin()
			if err = b.laterChanges(ctx, c); err == nil {
				err = b.addFiles(ctx, c, opts.FilesPerVersion, opts.RowsPerFile)
			}
		}
		message := fmt.Sprintf("version %d", v)
		extra, err := b.finish(ctx, c, vid, message, now, err)
		if err != nil {
			return nil, fmt.Errorf("version %s: %w", vid, err)
		}
		catalogFile, err := b.versionCatalogs(ctx, vid, now)
		if err != nil {
			return nil, fmt.Errorf("version %s: %w", vid, err)
		}
		if err := b.publish(vid, catalogFile, parents, message, now, extra); err != nil {
			return nil, err
		}
		out.Versions = append(out.Versions, vid)
		changed[MainRef] = vid
		if opts.Tags {
			changed["refs/tags/v"+strconv.Itoa(v)] = vid
		}
		prev = vid
	}
	if err := b.removeWorkingCatalogs(); err != nil {
		return nil, err
	}
	if out.Refs, err = b.writeRefs(changed); err != nil {
		return nil, err
	}
	out.DataFiles = b.dataFiles()
	return out, nil
}

// firstVersion fills the first version's snapshot: the table, its files,
// the large files and the scheduled-for-deletion row.
func (b *builder) firstVersion(ctx context.Context, c *catalog, now time.Time) error {
	if err := c.createTable(ctx, TableName); err != nil {
		return err
	}
	if err := b.addFiles(ctx, c, b.opts.FilesPerVersion, b.opts.RowsPerFile); err != nil {
		return err
	}
	if err := b.addLargeFiles(ctx, c, b.opts.LargeFiles); err != nil {
		return err
	}
	if err := c.addUnwrittenFiles(ctx, b.opts.UnwrittenFiles); err != nil {
		return err
	}
	if b.opts.ScheduledForDeletion {
		return b.scheduleMissing(ctx, c, now)
	}
	return nil
}

// finish commits the pending snapshot (unless err), describes the version
// and closes the catalog.
func (b *builder) finish(ctx context.Context, c *catalog, vid, message string, now time.Time, err error) (map[string][]byte, error) {
	if err == nil && c.pending != nil {
		err = c.commit(ctx, now, message)
	}
	var extra map[string][]byte
	if err == nil && b.opts.ExtraFiles {
		extra, err = b.describe(ctx, c, vid)
	}
	if err != nil {
		c.detach(ctx)
		return nil, err
	}
	return extra, c.close(ctx)
}

// AddVersion appends one version on refs/heads/main of an existing
// repository in dir (fdl.json, refs/heads/main and the tip's catalog are
// read back), adding files new data files (opts.RowsPerFile rows each),
// and, as opts say, a delete file and an ended data file. It moves main,
// adds the next refs/tags/vN if opts.Tags, rewrites refs.json and returns
// the new version ID.
func AddVersion(ctx context.Context, dir string, files int, opts Options) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	raw, err := os.ReadFile(filepath.Join(dir, repo.SettingsFile))
	if err != nil {
		return "", err
	}
	settings, err := repo.ParseSettings(raw)
	if err != nil {
		return "", err
	}
	refs, err := readRefFiles(dir)
	if err != nil {
		return "", err
	}
	tip, ok := refs[MainRef]
	if !ok {
		return "", fmt.Errorf("%s: no %s", dir, MainRef)
	}
	b, err := newBuilder(ctx, dir, settings.DataDir, opts)
	if err != nil {
		return "", err
	}
	defer b.close()

	vid := newUUIDv7()
	now := time.Now()
	catalogPath := b.local(repo.VersionFile(vid, repo.CatalogFile))
	if err := os.MkdirAll(filepath.Dir(catalogPath), 0o755); err != nil {
		return "", err
	}
	prev := b.local(repo.VersionFile(tip, repo.CatalogFile))
	if _, err := os.Stat(prev); err != nil {
		// A repository whose catalogs are metadata.db: a DuckDB one is
		// started from as it is.
		if prev, err = duckDBMetadata(b.local(repo.VersionFile(tip, repo.MetadataFile))); err != nil {
			return "", fmt.Errorf("version %s: %w", tip, err)
		}
	}
	c, err := copyCatalog(ctx, b.e, prev, catalogPath)
	if err != nil {
		return "", err
	}
	c.begin()
	if !c.hasTable {
		err = c.createTable(ctx, TableName)
	}
	if err == nil {
		err = b.laterChanges(ctx, c)
	}
	if err == nil {
		err = b.addFiles(ctx, c, files, opts.RowsPerFile)
	}
	message := fmt.Sprintf("add %d data files", files)
	extra, err := b.finish(ctx, c, vid, message, now, err)
	if err != nil {
		return "", fmt.Errorf("version %s: %w", vid, err)
	}
	catalogFile, err := b.versionCatalogs(ctx, vid, now)
	if err != nil {
		return "", fmt.Errorf("version %s: %w", vid, err)
	}
	if err := b.removeWorkingCatalogs(); err != nil {
		return "", err
	}
	if err := b.publish(vid, catalogFile, []string{tip}, message, now, extra); err != nil {
		return "", err
	}
	changed := repo.Refs{MainRef: vid}
	if opts.Tags {
		changed["refs/tags/v"+strconv.Itoa(nextTagNumber(refs))] = vid
	}
	if _, err := b.writeRefs(changed); err != nil {
		return "", err
	}
	return vid, nil
}

// nextTagNumber is one more than the highest refs/tags/vN.
func nextTagNumber(refs repo.Refs) int {
	n := 0
	for name := range refs {
		if s, ok := strings.CutPrefix(name, "refs/tags/v"); ok {
			if i, err := strconv.Atoi(s); err == nil && i > n {
				n = i
			}
		}
	}
	return n + 1
}

func fileSHA256(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := fh.WriteTo(h); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeAtomic writes a file through a temporary file and a rename, so a
// reader never sees it half written.
func writeAtomic(path string, content []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
