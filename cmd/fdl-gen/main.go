// Command fdl-gen writes FDL repositories for tests, demos and benchmarks:
// DuckLake catalogs made with DuckDB, real Parquet data files, records,
// refs. It is a thin wrapper around internal/generate.
//
//	fdl-gen [flags] DIR          a new repository in DIR
//	fdl-gen -add N [flags] DIR   one more version on main, adding N data files
//	fdl-gen -fixture X.db.gz [-fixture-parquet D] [-fixture-add N] DIR
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fdl-mirror/fdl-mirror/internal/generate"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// sizeList is a comma-separated list of byte sizes with optional binary or
// decimal units: 256MiB,2GiB,10MB,4096.
type sizeList []int64

func (s *sizeList) String() string {
	var parts []string
	for _, v := range *s {
		parts = append(parts, strconv.FormatInt(v, 10))
	}
	return strings.Join(parts, ",")
}

func (s *sizeList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		n, err := parseSize(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		*s = append(*s, n)
	}
	return nil
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = num, u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional unit (KiB, MiB, GiB, KB, MB, GB)", s)
	}
	return int64(n * float64(mult)), nil
}

func run(args []string) int {
	fs := flag.NewFlagSet("fdl-gen", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: fdl-gen [flags] DIR\n       fdl-gen -add N [flags] DIR\n       fdl-gen -fixture X.db.gz [-fixture-parquet DIR] [-fixture-add N] DIR\n\nflags:\n")
		fs.PrintDefaults()
	}
	var opts generate.Options
	var large sizeList
	fs.IntVar(&opts.Versions, "versions", generate.DefaultVersions, "versions in the chain on main")
	fs.IntVar(&opts.FilesPerVersion, "files", generate.DefaultFilesPerVersion, "data files each version adds")
	fs.IntVar(&opts.RowsPerFile, "rows", generate.DefaultRowsPerFile, "rows per data file")
	fs.Var(&large, "large", "extra large data files in the first version, comma-separated approximate sizes (e.g. 256MiB,2GiB)")
	fs.StringVar(&opts.DataDir, "data-dir", "data/", "fdl.json data_dir")
	fs.BoolVar(&opts.WriteDataDir, "write-data-dir", false, "write data_dir into fdl.json even when it is the default")
	fs.StringVar(&opts.Layout, "layout", generate.DefaultLayout, "DuckLake catalog layout: 0.3 (schema and table paths) or 0.1")
	fs.StringVar(&opts.CatalogDataPath, "catalog-data-path", generate.DefaultCatalogDataPath, "data_path stored in the catalogs")
	fs.BoolVar(&opts.DeleteFiles, "deletes", false, "each version after the first adds a delete file")
	fs.BoolVar(&opts.RemoveFiles, "removes", false, "each version after the first ends one earlier data file")
	fs.BoolVar(&opts.ScheduledForDeletion, "scheduled", false, "list a file scheduled for deletion (not written) in the catalog")
	fs.BoolVar(&opts.Tags, "tags", false, "tag every version refs/tags/vN")
	fs.BoolVar(&opts.ExtraFiles, "extra", false, "write dataset.json and files.json in every version")
	fs.BoolVar(&opts.FastParquet, "fast", false, "reuse the bytes of a few real Parquet files for the rest (benchmarks)")
	fs.StringVar(&opts.ID, "id", "", "repository id (default: a random UUID)")
	fs.Int64Var(&opts.Seed, "seed", 0, "varies the generated values")
	fs.StringVar(&opts.AlternateCatalog, "alternate-catalog", "", "give every version catalogs/ducklake-`V`.duckdb, listing one data file more than the main catalog, named in catalog_formats")
	fs.StringVar(&opts.MetadataDB, "metadata-db", "", "write each version's catalog as metadata.db, in `FORMAT` duckdb or sqlite, instead of ducklake.duckdb")
	asJSON := fs.Bool("json", false, "print what was made as JSON (dir, id, versions, refs, data_files)")
	add := fs.Int("add", 0, "add one version with N data files to the existing repository in DIR")
	fixture := fs.String("fixture", "", "build a one-version repository around this DuckLake catalog (.db.gz)")
	fixtureParquet := fs.String("fixture-parquet", "", "with -fixture: the folder holding the catalog's Parquet files")
	fixtureAdd := fs.Int("fixture-add", 0, "with -fixture: data files to add to the catalog first")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	opts.LargeFiles = large
	dir := fs.Arg(0)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	switch {
	case *add > 0:
		id, err := generate.AddVersion(ctx, dir, *add, opts)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fdl-gen: %v\n", err)
			return 1
		}
		if *asJSON {
			return printJSON(map[string]string{"dir": dir, "version": id})
		}
		fmt.Printf("%s: added version %s with %d data files on refs/heads/main (%s)\n", dir, id, *add, time.Since(start).Round(time.Millisecond))
		return 0
	case *fixture != "":
		r, err := generate.FromFixture(ctx, *fixture, *fixtureParquet, dir, *fixtureAdd, opts)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fdl-gen: %v\n", err)
			return 1
		}
		if *asJSON {
			return printJSON(r)
		}
		report(r, time.Since(start))
		for _, m := range r.Missing {
			fmt.Printf("  missing (not in %q): %s\n", *fixtureParquet, m)
		}
		return 0
	}
	r, err := generate.Generate(ctx, dir, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fdl-gen: %v\n", err)
		return 1
	}
	if *asJSON {
		return printJSON(r)
	}
	report(r, time.Since(start))
	return 0
}

func printJSON(v any) int {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(os.Stderr, "fdl-gen: %v\n", err)
		return 1
	}
	return 0
}

func report(r *generate.Repo, took time.Duration) {
	var bytes int64
	for _, p := range r.DataFiles {
		if fi, err := os.Stat(r.Dir + "/" + p); err == nil {
			bytes += fi.Size()
		}
	}
	fmt.Printf("%s: repository %s, %d versions, %d data and delete files (%d bytes), %s\n",
		r.Dir, r.ID, len(r.Versions), len(r.DataFiles), bytes, took.Round(time.Millisecond))
	for i, v := range r.Versions {
		fmt.Printf("  version %d: %s\n", i+1, v)
	}
	for _, name := range sortedKeys(r.Refs) {
		fmt.Printf("  %s -> %s\n", name, r.Refs[name])
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
