//go:build !linux || !cgo

package catalog

// readerOnlyCoreFunctions: elsewhere a reader's DuckDB loads every
// extension linked into it (extensions_linux.go says why Linux does not).
func readerOnlyCoreFunctions() {}
