//go:build !unix

package local

import "os"

// clearNonblock has nothing to clear where there is no O_NONBLOCK.
func clearNonblock(*os.File) error { return nil }
