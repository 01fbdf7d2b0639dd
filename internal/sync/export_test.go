package sync

// SetNoUnsyncedRecord turns the record of unsynced files off, for the
// test that shows what a power cut does without it.
func SetNoUnsyncedRecord(off bool) { noUnsyncedRecord = off }

// SetDataBatch sets how many files go through the steps of mirroring at
// once, and returns a function that puts the old value back.
func SetDataBatch(n int) (restore func()) {
	old := dataBatch
	dataBatch = n
	return func() { dataBatch = old }
}

// SetMaxStatChecks sets how many data files of a version are checked one
// by one before data_dir is listed, and returns a function that puts the
// old value back.
func SetMaxStatChecks(n int) (restore func()) {
	old := maxStatChecks
	maxStatChecks = n
	return func() { maxStatChecks = old }
}

// SetSourcePassFiles sets how many files a catalog lists before its
// server-side copies take sizes from a pass over the upstream's data_dir
// in a first mirror too, and returns a function that puts the old value
// back.
func SetSourcePassFiles(n int64) (restore func()) {
	old := sourcePassFiles
	sourcePassFiles = n
	return func() { sourcePassFiles = old }
}
