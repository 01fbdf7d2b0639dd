//go:build !race

package catalog

const raceEnabled = false

// readerEnv is a reader's whole environment: its one setting
// (readerProcs), never nil, since nil would pass on the mirror's,
// credentials and all.
var readerEnv = []string{readerProcs}
