// Package verify checks FDL repositories and mirrors, and the SSH
// signatures of their versions, trusting nothing it reads.
//
// CheckRepository is `fdl-mirror verify` (and the tests' check of every
// mirror they make): like git fsck, it follows every ref (the ref files,
// refs.json and HEAD) to its version and each version to its parents, and
// reports each version.json that does not parse, each catalog whose sha256
// is not the one its version records, each data file the catalog lists
// that is missing or of another size, catalogs left at the repository's
// root, and with Deep, data files whose Parquet or puffin ends are damaged.
// It reads the repository through a source.Source, as a run reads an
// upstream; with a source made with a Policy's Trust it checks each
// version's signature as well.
//
// Policy is what the operator trusts: an allowed_signers file they got
// from the publisher by another channel, never keys the repository lists
// about itself. Signatures are OpenSSH's SSHSIG (`ssh-keygen -Y sign`),
// parsed and verified here rather than by running ssh-keygen; the engine
// asks the same Policy before it publishes a version.
//
// Nothing read is trusted, whether a repository upstream or a mirror on
// disk: every file is read with a size limit (repo's Max* constants, the
// catalog Limits), every name it holds is checked before it is used as a
// path, and a file that breaks a rule is reported as a Problem naming the
// file and the rule instead of stopping the check, so one bad version does
// not hide the others. The error CheckRepository returns is only for a
// store that cannot be read at all.
package verify
