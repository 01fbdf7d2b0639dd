//go:build !linux

package local

import (
	"os"
	"path"
	"path/filepath"
)

// renameInto moves tmp, in the temporary folder, to name, through the root.
func (l *Local) renameInto(tmp string, d *os.File, name string) error {
	return l.root.Rename(path.Join(TempDir, tmp), filepath.FromSlash(name))
}
