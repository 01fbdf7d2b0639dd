package catalog

import (
	"fmt"
	"time"
)

// Limits bound what reading one catalog may cost. A catalog is bytes an
// upstream chose: without bounds, one file could keep the mirror busy for
// hours or take all its memory and disk. Zero fields take the defaults.
type Limits struct {
	// MaxFiles bounds the rows of ducklake_data_file and
	// ducklake_delete_file together (the files of one version, current
	// and historical), and the rows of each other table read.
	MaxFiles int64
	// Timeout bounds the wall-clock time of reading one catalog; the
	// query running when it passes is interrupted.
	Timeout time.Duration
	// MemoryLimit is DuckDB's memory_limit in bytes for one catalog.
	MemoryLimit int64
	// Threads is DuckDB's threads for one catalog.
	Threads int
	// MaxSize bounds the bytes of a catalog download (Fetch).
	MaxSize int64
	// RequireSandbox refuses to read a catalog in a reader that lacks
	// Landlock or seccomp (ReaderError, CauseNoSandbox).
	RequireSandbox bool
}

// Defaults of Limits: generous for real catalogs (a DuckLake catalog of
// ten million files is a large lake), small against a hostile one.
const (
	DefaultMaxFiles    = 10_000_000
	DefaultTimeout     = 60 * time.Second
	DefaultMemoryLimit = 128 << 20
	DefaultThreads     = 1
	DefaultMaxSize     = 4 << 30
)

// Config keys (and, with dashes and a leading --, flags) that set the
// limits: refusals name them so an operator knows what to raise.
const (
	KeyMaxFiles    = "catalog_max_files"
	KeyTimeout     = "catalog_timeout"
	KeyMemoryLimit = "catalog_memory_limit"
	KeyMaxSize     = "catalog_max_size"
)

// WithDefaults fills the zero fields with the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.MemoryLimit <= 0 {
		l.MemoryLimit = DefaultMemoryLimit
	}
	if l.Threads <= 0 {
		l.Threads = DefaultThreads
	}
	if l.MaxSize <= 0 {
		l.MaxSize = DefaultMaxSize
	}
	return l
}

// LimitError is a catalog refused for passing one of the Limits: the
// catalog may be fine, the operator may raise the limit.
type LimitError struct {
	Catalog string // the catalog's name in the repository
	Key     string // the config key of the limit passed (KeyMaxFiles, ...)
	Detail  string // what passed it, and the limit
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("catalog %s: %s (limit %s)", e.Catalog, e.Detail, e.Key)
}

// FormatBytes writes a byte count for messages: 4 GiB, 256 MiB, 1234 bytes.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		unit  string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.unit)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
