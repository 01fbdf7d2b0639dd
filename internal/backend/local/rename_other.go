//go:build !linux

package local

import (
	"os"
	"path"
	"path/filepath"
	"syscall"
)

// renameInto moves tmp, in the temporary folder, to name, through the root.
func (l *Local) renameInto(tmp string, d *os.File, name string) error {
	return l.root.Rename(path.Join(TempDir, tmp), filepath.FromSlash(name))
}

// openIn opens name, one component, in the folder root.
func openIn(root *os.Root, _ int, name string, flag int, perm os.FileMode, _ string) (*os.File, error) {
	return root.OpenFile(name, flag, perm)
}

// openRegularIn opens name, one component, in the folder root for
// reading, if it is a regular file (see Local.openRegular).
func openRegularIn(root *os.Root, _ int, name string, _ string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	return f, regularOnly(f)
}
