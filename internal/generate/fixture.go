package generate

import (
	"compress/gzip"
	"context"
	"database/sql"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// FromFixture builds a one-version repository in dir around a real DuckLake
// catalog (a gzipped .db as in ../shared/fixtures/ducklake, or a plain one). The Parquet
// files its catalog references are copied from under parquetDir (may be
// "") into the data_dir where the catalog's paths say they belong, byte for
// byte: a file whose size differs from its record stays as it is, so the
// sync engine must refuse the version. With addFiles > 0 the catalog first
// gets a new snapshot adding that many data files (real Parquet written by
// DuckDB) to its first table, in the catalog's own layout; only then is it
// rewritten, otherwise the fixture's catalog bytes are kept.
//
// Files the catalog references but parquetDir does not hold are listed in
// Repo.Missing and not written.
func FromFixture(ctx context.Context, dbGz, parquetDir, dir string, addFiles int, opts Options) (*Repo, error) {
	opts, id, b, err := startRepo(ctx, dir, opts)
	if err != nil {
		return nil, err
	}
	defer b.close()

	vid := newUUIDv7()
	now := time.Now()
	catalogPath := b.local(repo.VersionFile(vid, repo.CatalogFile))
	if err := gunzipFile(catalogPath, dbGz); err != nil {
		return nil, err
	}
	modify := addFiles > 0 || opts.ScheduledForDeletion
	c, err := attachCatalog(ctx, b.e, catalogPath, !modify)
	if err != nil {
		return nil, fmt.Errorf("fixture %s: %w", dbGz, err)
	}
	out := &Repo{Dir: dir, ID: id}
	err = b.copyFixtureFiles(ctx, c, parquetDir, out)
	if err == nil && modify {
		c.begin()
		if !c.hasTable {
			err = c.createTable(ctx, TableName)
		}
		if err == nil {
			err = b.addFiles(ctx, c, addFiles, opts.RowsPerFile)
		}
		if err == nil && opts.ScheduledForDeletion {
			err = b.scheduleMissing(ctx, c, now)
		}
	}
	message := "from fixture " + filepath.Base(dbGz)
	extra, err := b.finish(ctx, c, vid, message, now, err)
	if err != nil {
		return nil, fmt.Errorf("fixture %s: version %s: %w", dbGz, vid, err)
	}
	if err := b.publish(vid, catalogPath, nil, message, now, extra); err != nil {
		return nil, err
	}
	out.Versions = []string{vid}
	changed := repo.Refs{MainRef: vid}
	if opts.Tags {
		changed["refs/tags/v1"] = vid
	}
	if out.Refs, err = b.writeRefs(changed); err != nil {
		return nil, err
	}
	out.DataFiles = b.dataFiles()
	sort.Strings(out.Missing)
	return out, nil
}

// copyFixtureFiles copies every file the catalog references from under
// parquetDir: found by its path under the data path, else by its name.
func (b *builder) copyFixtureFiles(ctx context.Context, c *catalog, parquetDir string, out *Repo) error {
	files, err := c.referencedFiles(ctx)
	if err != nil {
		return err
	}
	byName := map[string]string{}
	if parquetDir != "" {
		err := filepath.WalkDir(parquetDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				if _, dup := byName[d.Name()]; !dup {
					byName[d.Name()] = p
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("fixture files %s: %w", parquetDir, err)
		}
	}
	for _, rel := range files {
		dst := b.dataDir + rel
		src := ""
		if parquetDir != "" {
			if p := filepath.Join(parquetDir, filepath.FromSlash(rel)); fileExists(p) {
				src = p
			} else {
				src = byName[filepath.Base(rel)]
			}
		}
		if src == "" {
			out.Missing = append(out.Missing, dst)
			continue
		}
		if err := copyFile(b.local(dst), src); err != nil {
			return fmt.Errorf("fixture file %s: %w", src, err)
		}
		b.written[dst] = true
	}
	return nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// referencedFiles lists the paths, relative to the stored data path, of
// every data and delete file in the catalog, current and historical,
// resolved as DuckLake does: data path + schema path + table path + file
// path, each joined only where its path is relative.
func (c *catalog) referencedFiles(ctx context.Context) ([]string, error) {
	pathCols := "NULL, TRUE, NULL, TRUE"
	if c.hasPaths {
		pathCols = "s.path, s.path_is_relative, t.path, t.path_is_relative"
	}
	q := `WITH f AS (SELECT table_id, path, path_is_relative FROM ` + c.q("ducklake_data_file") + `
			UNION ALL SELECT table_id, path, path_is_relative FROM ` + c.q("ducklake_delete_file") + `),
		t AS (SELECT * FROM ` + c.q("ducklake_table") + ` QUALIFY row_number() OVER (PARTITION BY table_id ORDER BY begin_snapshot DESC) = 1),
		s AS (SELECT * FROM ` + c.q("ducklake_schema") + ` QUALIFY row_number() OVER (PARTITION BY schema_id ORDER BY begin_snapshot DESC) = 1)
		SELECT f.path, f.path_is_relative, ` + pathCols + `
		FROM f LEFT JOIN t ON t.table_id = f.table_id LEFT JOIN s ON s.schema_id = t.schema_id ORDER BY f.path`
	rows, err := c.e.conn.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list the catalog's files: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		var rel bool
		var sp, tp sql.NullString
		var srel, trel sql.NullBool
		if err := rows.Scan(&p, &rel, &sp, &srel, &tp, &trel); err != nil {
			return nil, fmt.Errorf("list the catalog's files: %w", err)
		}
		full := p
		if rel {
			full = tp.String + full
			if !tp.Valid || !trel.Valid || trel.Bool {
				full = sp.String + full
				if !sp.Valid || !srel.Valid || srel.Bool {
					full = c.dataPath + full
				}
			}
		}
		under, ok := strings.CutPrefix(full, c.dataPath)
		if !ok || under == "" || strings.Contains("/"+under+"/", "/../") {
			return nil, fmt.Errorf("catalog file %q is not under the data path %q", full, c.dataPath)
		}
		out = append(out, under)
	}
	return out, rows.Err()
}

func gunzipFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	// A catalog that is not gzipped is copied as it is.
	var r io.Reader = in
	var magic [2]byte
	if _, err := io.ReadFull(in, magic[:]); err != nil {
		return fmt.Errorf("fixture %s: %w", src, err)
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if magic == [2]byte{0x1f, 0x8b} {
		zr, err := gzip.NewReader(in)
		if err != nil {
			return fmt.Errorf("fixture %s: %w", src, err)
		}
		r = zr
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return fmt.Errorf("fixture %s: %w", src, err)
	}
	return out.Close()
}
