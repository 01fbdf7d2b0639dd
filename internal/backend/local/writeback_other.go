//go:build !linux

package local

import "os"

// startWriteback: only Linux has sync_file_range(2); the Barrier writes
// everything.
func startWriteback(*os.File) {}
