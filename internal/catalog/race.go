//go:build race

package catalog

// raceEnabled: this is a race-detector build, whose shadow memory takes
// address space of its own (see readerAddressSpace).
const raceEnabled = true
