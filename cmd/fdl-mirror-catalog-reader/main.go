// Command fdl-mirror-catalog-reader is fdl-mirror's catalog reader, a
// binary of its own installed beside fdl-mirror, which starts it once
// per catalog: confined to that one file (rlimits, Landlock, seccomp),
// it reads the catalog with DuckDB and answers over a pipe.
//
// It links the catalog package and nothing else of the mirror's, so a
// reader starts without the initializers of the stores' SDKs that
// fdl-mirror's own binary runs at every start. Where it is missing,
// fdl-mirror re-executes itself as the reader (internal/catalog,
// program.go).
package main

import (
	"os"

	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
)

func main() { os.Exit(catalog.ReaderMain(os.Args[1:])) }
