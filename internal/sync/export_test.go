package sync

// SetNoUnsyncedRecord turns the record of unsynced files off, for the
// test that shows what a power cut does without it.
func SetNoUnsyncedRecord(off bool) { noUnsyncedRecord = off }
