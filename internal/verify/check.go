package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"
	gosync "sync"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// Problem is one thing wrong in a repository.
type Problem struct {
	Ref     string `json:"ref,omitempty"`
	Version string `json:"version,omitempty"`
	File    string `json:"file,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string { return p.Message }

// CheckOptions tune CheckRepository.
type CheckOptions struct {
	// Concurrency bounds the size checks at once (default 8).
	Concurrency int
	// Note, when set, is told what is worth knowing but not wrong: a
	// version without a signature where signatures are not required.
	Note func(Problem)
	// Deep reads each data file's head and tail too (see deepCheck): a
	// file of the right size with damaged bytes at its ends is found.
	Deep bool
	// CatalogLimits bound each catalog read (zero fields: the defaults).
	CatalogLimits catalog.Limits
	// TempDir holds catalogs while they are read; "" is os.TempDir
	// (see internal/scratch for a folder the next run cleans).
	TempDir string
}

// CheckRepository checks a repository or mirror without trusting it, the
// way git fsck does: every ref resolves to a version whose version.json
// parses, whose catalog matches the record's sha256, and whose data files
// are all present with the sizes the catalog records. Ancestors that exist
// are checked as well. The repository is read through r, whose Trust
// (source.New) checks every version's signature too. It returns every
// problem found; the error is for a store that cannot be read at all.
func CheckRepository(ctx context.Context, r *source.Source, opts CheckOptions) ([]Problem, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	c := &checker{src: r, opts: opts}
	return c.run(ctx)
}

type checker struct {
	src      *source.Source // reads the repository; judges records and signatures
	opts     CheckOptions
	settings *repo.Settings
	problems []Problem
	mu       gosync.Mutex
	data     map[string]int64 // data_dir listing, where the store lists
	// versions are the files of each version's folder (name → size),
	// where the store lists.
	versions map[string]map[string]int64
}

func (c *checker) add(p Problem) {
	c.mu.Lock()
	c.problems = append(c.problems, p)
	c.mu.Unlock()
}

func (c *checker) run(ctx context.Context) ([]Problem, error) {
	var err error
	var unread *source.ReadError
	var broken *source.SettingsError
	c.settings, err = c.src.ReadSettings(ctx)
	switch {
	case errors.As(err, &unread):
		return nil, fmt.Errorf("%s: %w", c.src.Location(), unread)
	case errors.As(err, &broken):
		c.add(Problem{File: repo.SettingsFile, Message: broken.Error()})
		return c.problems, nil
	case err != nil:
		return nil, err
	}
	refs := c.refs(ctx)
	rootFiles := []string{repo.CatalogFile, repo.MetadataFile} // what a store that cannot list is asked for
	// One listing of everything, where the store lists: the data files'
	// sizes, and the files at the root, where no catalog may sit.
	listing, err := c.src.Whole().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: listing: %w", c.src.Location(), err)
	}
	if listing != nil {
		c.data, c.versions, rootFiles = listing.Data, listing.Versions, listing.Root
	}
	c.rootCatalogs(ctx, rootFiles)
	seen := map[string]bool{}
	queue := []string{}
	for _, name := range refs.Names() {
		queue = append(queue, refs[name])
	}
	roots := map[string]bool{}
	for _, id := range queue {
		roots[id] = true
	}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		if seen[id] {
			continue
		}
		seen[id] = true
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		queue = append(queue, c.version(ctx, id, roots[id])...)
	}
	sort.SliceStable(c.problems, func(i, j int) bool { return c.problems[i].Version < c.problems[j].Version })
	return c.problems, nil
}

func (c *checker) refs(ctx context.Context) repo.Refs {
	refs := repo.Refs{}
	canList := c.src.CanList()
	if canList {
		// The ref files, read and judged as sync reads them.
		got := c.src.ReadRefsWithoutHead(ctx)
		if got.Unread {
			c.add(Problem{File: repo.RefsDir, Message: got.Err.Error()})
		}
		for _, b := range got.Refused {
			if b.Ref != "" {
				c.add(Problem{Ref: b.Ref, File: b.Ref, Message: b.Message})
			}
		}
		for k, v := range got.Refs {
			refs[k] = v
		}
	}
	limit := int64(repo.MaxRefsJSON)
	if canList {
		limit = repo.RefsJSONLimit(refs)
	}
	listed, bad, err := c.src.Whole().RefsJSON(ctx, limit)
	var unread *source.ReadError
	switch {
	case !errors.As(err, &unread):
		if err != nil {
			c.add(Problem{File: repo.RefsFile, Message: err.Error()})
		}
		for _, b := range bad {
			c.add(Problem{Ref: b.Ref, File: repo.RefsFile, Message: b.Err.Error()})
		}
		if !canList {
			return listed
		}
		// Readers that cannot list follow refs.json, so its versions must
		// be complete too. It may lag the ref files by one interrupted
		// run (it is written after them): that is not a problem, a ref
		// to an incomplete version is.
		for name, id := range listed {
			if refs[name] != id {
				refs["refs.json:"+name] = id
			}
		}
	case backend.IsNotExist(unread.Err):
		if !canList {
			c.add(Problem{File: repo.RefsFile, Message: fmt.Sprintf("%s is missing and %s cannot list refs", repo.RefsFile, c.src.Location())})
		}
	default:
		c.add(Problem{File: repo.RefsFile, Message: unread.Err.Error()})
	}
	if head, err := c.src.Whole().Head(ctx); !errors.As(err, &unread) {
		if err != nil {
			c.add(Problem{File: repo.HeadFile, Message: err.Error()})
		} else if _, ok := refs[head]; !ok {
			c.add(Problem{File: repo.HeadFile, Message: fmt.Sprintf("%s names %s, which does not exist", repo.HeadFile, head)})
		}
	}
	return refs
}

// version checks one version and returns its parents.
func (c *checker) version(ctx context.Context, id string, isRoot bool) []string {
	bad := func(file, format string, args ...any) {
		c.add(Problem{Version: id, File: file, Message: fmt.Sprintf("version %s: "+format, append([]any{id}, args...)...)})
	}
	recordName := repo.VersionFile(id, repo.RecordFile)
	v, err := c.src.Versions().Read(ctx, id)
	var unread *source.ReadError
	if v == nil {
		if !errors.As(err, &unread) {
			c.add(Problem{Version: id, File: recordName, Message: err.Error()})
		} else if isRoot || !backend.IsNotExist(unread.Err) {
			bad(recordName, "%s: %v", recordName, unread.Err)
		}
		return nil
	}
	rec := v.Record
	if c.src.Versions().ChecksSignatures() {
		sigName := repo.VersionFile(id, repo.SignatureFile)
		switch {
		case errors.As(err, &unread):
			bad(sigName, "%v", unread.Err)
		case v.Verdict != nil:
			c.add(Problem{Version: id, File: sigName, Message: v.Verdict.Message})
		case v.Signature == nil && c.opts.Note != nil:
			c.opts.Note(Problem{Version: id, File: sigName, Message: fmt.Sprintf("version %s carries no signature (signatures are not required)", id)})
		}
	}
	// The catalog: ducklake.duckdb, or metadata.db where there is none
	// (asked for in that order where the store cannot list).
	files := c.versions[id]
	var mainFile string
	var fetched *catalog.Fetched
	if c.versions != nil {
		mainFile = repo.MainCatalog(files)
		fetched, err = c.src.Catalogs().FetchTo(ctx, id, mainFile, c.opts.TempDir, c.opts.CatalogLimits.MaxSize)
	} else {
		mainFile, fetched, err = c.src.Catalogs().FetchMainTo(ctx, id, c.opts.TempDir, c.opts.CatalogLimits.MaxSize)
	}
	catalogName := repo.VersionFile(id, mainFile)
	if err != nil {
		bad(catalogName, "%v", err)
		return rec.Parents
	}
	defer fetched.Remove()
	if fetched.SHA256 != rec.SHA256 {
		bad(catalogName, "catalog sha256 mismatch: %s has %s, version.json records %s", catalogName, fetched.SHA256, rec.SHA256)
		return rec.Parents
	}
	cat, err := catalog.Read(ctx, fetched.Path, catalogName, c.opts.CatalogLimits)
	if err != nil {
		bad(catalogName, "%v", err)
		return rec.Parents
	}
	checked := map[string]bool{}
	c.dataFiles(ctx, id, cat, "", checked)

	// The alternate catalogs: readers attach them like the main one, so
	// their data files must be there too.
	alternates := c.settings.CatalogFiles()
	if c.versions != nil {
		alternates = repo.AlternateCatalogs(files)
	}
	for _, f := range alternates {
		name := repo.VersionFile(id, f)
		fetched, err := c.src.Catalogs().FetchTo(ctx, id, f, c.opts.TempDir, c.opts.CatalogLimits.MaxSize)
		if c.versions == nil && backend.IsNotExist(err) {
			continue // not every version carries every format
		}
		if err != nil {
			bad(name, "%v", err)
			continue
		}
		cat, err := catalog.Read(ctx, fetched.Path, name, c.opts.CatalogLimits)
		fetched.Remove()
		if err != nil {
			bad(name, "%v", err)
			continue
		}
		c.dataFiles(ctx, id, cat, name, checked)
	}
	return rec.Parents
}

// dataFiles checks the data files a catalog of a version lists, but those
// checked already for the version (another of its catalogs lists them).
// via names an alternate catalog in the problems its files have.
func (c *checker) dataFiles(ctx context.Context, id string, cat *catalog.Catalog, via string, checked map[string]bool) {
	if via != "" {
		via = " (listed by the alternate catalog " + via + ")"
	}
	slots := make(chan struct{}, c.opts.Concurrency)
	var wg gosync.WaitGroup
	for _, f := range cat.Files {
		name := c.settings.DataDir + f.Path
		if checked[name] {
			continue
		}
		checked[name] = true
		if c.data != nil {
			have, exists := c.data[name]
			if !c.compare(id, name, have, exists, f.Size, via) || !c.opts.Deep {
				continue
			}
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if c.data == nil {
				size, err := c.src.Whole().FileSize(ctx, name)
				if err != nil && !backend.IsNotExist(err) {
					c.add(Problem{Version: id, File: name, Message: fmt.Sprintf("version %s: data file %s: %v", id, name, err)})
					return
				}
				if !c.compare(id, name, size, err == nil, f.Size, via) || !c.opts.Deep {
					return
				}
			}
			c.deep(ctx, id, name, f, via)
		}()
	}
	wg.Wait()
}

// compare reports a data file missing or of another size than recorded;
// true when it is there as recorded.
func (c *checker) compare(id, name string, have int64, exists bool, want int64, via string) bool {
	switch {
	case !exists:
		c.add(Problem{Version: id, File: name, Message: fmt.Sprintf("version %s: data file %s is missing%s", id, name, via)})
	case want >= 0 && have != want:
		c.add(Problem{Version: id, File: name, Message: fmt.Sprintf("version %s: data file %s has %d bytes, the catalog records %d%s", id, name, have, want, via)})
	default:
		return true
	}
	return false
}

// rootCatalogs reports a DuckDB or SQLite database among the files at the
// root: the spec forbids a catalog outside versions/ (it would hand readers
// a state that was never published). Files are judged by their header,
// whatever their name.
func (c *checker) rootCatalogs(ctx context.Context, names []string) {
	for _, name := range names {
		head, err := c.src.Whole().Prefix(ctx, name, 16)
		if backend.IsNotExist(err) {
			continue
		}
		if err != nil {
			c.add(Problem{File: name, Message: fmt.Sprintf("%s at the root: %v", name, err)})
			continue
		}
		if kind := databaseKind(head); kind != "" {
			c.add(Problem{File: name, Message: fmt.Sprintf("%s at the root is a %s database: no catalog may sit outside %s", name, kind, repo.VersionsDir)})
		}
	}
}

// databaseKind names the database a file's first bytes announce, or "".
func databaseKind(head []byte) string {
	switch {
	case len(head) >= 12 && string(head[8:12]) == "DUCK":
		return "DuckDB"
	case len(head) >= 16 && string(head) == "SQLite format 3\x00":
		return "SQLite"
	}
	return ""
}
