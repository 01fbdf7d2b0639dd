//go:build !race

package catalog

const raceEnabled = false

// readerEnv is a reader's whole environment: empty, not nil, since nil
// would pass on the mirror's, credentials and all.
var readerEnv = []string{}
