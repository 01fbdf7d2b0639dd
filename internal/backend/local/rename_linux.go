package local

import (
	"os"
	"path"
	"syscall"
)

// renameInto moves tmp, in the temporary folder, to name, whose folder d
// is open: one renameat(2) between two open folders, with no path walked.
// A rename never follows a symbolic link in its last component, and the
// folders were opened through the root.
func (l *Local) renameInto(tmp string, d *os.File, name string) error {
	return syscall.Renameat(int(l.tmpDir.Fd()), tmp, int(d.Fd()), path.Base(name))
}
