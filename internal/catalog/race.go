//go:build race

package catalog

// raceEnabled: this is a race-detector build, whose shadow memory takes
// address space of its own (see readerAddressSpace).
const raceEnabled = true

// readerEnv is a reader's whole environment. A race-built process sleeps
// a second at exit (the race runtime's atexit_sleep_ms, so that other
// threads may still report): with one catalog per reader, that second was
// most of a reader's life in the tests, which run race-built readers of
// the test binary. A race is still reported when it happens; only the
// wait at exit goes.
var readerEnv = []string{readerProcs, "GORACE=atexit_sleep_ms=0"}
