package sync_test

import (
	"os"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
)

func TestMain(m *testing.M) { os.Exit(fdltest.Main(m)) }
