//go:build !linux

package catalog

import (
	"os"
	"syscall"
)

// Elsewhere than Linux a reader has neither layer, nor its rlimits here:
// it still runs apart, with an empty environment.
func confine(readerArgs) (Layers, error) { return Layers{}, nil }

// ProbeSandbox says which layers a reader would get: none here.
func ProbeSandbox() Layers { return Layers{} }

func makeNonDumpable() error { return nil }

func readerNproc() uint64 { return 0 }

const maxLandlockABI = 0

func readerProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func waitExited(pid int) {}

func killGroup(pid int) bool { return syscall.Kill(-pid, syscall.SIGKILL) == nil }

func keepForExec(f *os.File) (string, error) { return f.Name(), nil }
