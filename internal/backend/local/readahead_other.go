//go:build !linux

package local

import "os"

// willNeed does nothing where posix_fadvise is not at hand.
func willNeed(*os.File) {}

// uncached cannot tell where preadv2 is not at hand: nothing is read
// ahead.
func uncached(*os.File) bool { return false }
