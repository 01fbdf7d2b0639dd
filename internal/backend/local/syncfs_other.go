//go:build !linux

package local

import (
	"errors"
	"io/fs"
	"os"
)

// syncfsFunc: there is no syncfs(2) here; Barrier fsyncs each file.
var syncfsFunc = func(f *os.File) error { return errors.ErrUnsupported }

func deviceOf(fi fs.FileInfo) uint64 { return 0 }
