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
