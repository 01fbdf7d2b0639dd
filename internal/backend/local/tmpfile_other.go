//go:build !linux

package local

import (
	"errors"
	"io"
	"os"
)

// writeUnnamed: unnamed files are Linux's (O_TMPFILE); elsewhere every
// write goes through the temporary folder.
func writeUnnamed(_ *folder, _ string, _ io.Reader, _ int64, _ bool) (*os.File, error) {
	return nil, errors.ErrUnsupported
}

func (l *Local) placeUnnamed(_ *os.File, _ string) error { return errors.ErrUnsupported }
