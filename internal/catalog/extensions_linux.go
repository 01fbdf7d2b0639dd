//go:build linux && cgo

package catalog

// #cgo LDFLAGS: -Wl,--wrap=_ZN6duckdb15ExtensionHelper17LoadAllExtensionsERNS_6DuckDBE
// extern int fdl_reader_extensions_only_core;
import "C"

// readerOnlyCoreFunctions makes every DuckDB this process opens after it
// load only core_functions of the extensions linked into DuckDB's
// library, not all five (extensions_linux.cpp). A reader starts one
// DuckDB and reads one catalog with it: registering ICU's collations and
// time zones, JSON's and Parquet's functions and autocomplete's cost
// each reader about 9 ms of CPU and 250 page faults it never uses
// (`perf stat` of a process that opens DuckDB and runs `select 1`: 42.0
// against 32.6 ms), and the code a crafted catalog could reach is the
// smaller for it. The mirror's own DuckDBs (tests, the generator) load
// every extension as before.
func readerOnlyCoreFunctions() { C.fdl_reader_extensions_only_core = 1 }
