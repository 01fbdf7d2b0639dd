package sync_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/generate"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	fdlsync "github.com/fdl-mirror/fdl-mirror/internal/sync"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

// Issue 10: a ref in the mirror points at a version whose files are all
// there, match its record, and pass the operator's current policy.

// runLocal runs the engine from folder up into folder mirror.
func runLocal(t *testing.T, up, mirror string, opts fdlsync.Options) (*fdlsync.Report, error) {
	t.Helper()
	return runLocalThrough(t, up, mirror, opts, nil)
}

// runLocalThrough is runLocal with the mirror's store seen through wrap
// (a recorder, a store that says it is an object store); nil: as it is.
func runLocalThrough(t *testing.T, up, mirror string, opts fdlsync.Options, wrap func(backend.Backend) backend.Backend) (*fdlsync.Report, error) {
	t.Helper()
	return runLocalWith(t, up, mirror, nil, opts, wrap)
}

// runLocalWith is runLocalThrough with the upstream judged by trust (nil:
// no signature is checked).
func runLocalWith(t *testing.T, up, mirror string, trust fdlsync.Trust, opts fdlsync.Options, wrap func(backend.Backend) backend.Backend) (*fdlsync.Report, error) {
	t.Helper()
	src, err := local.Open(up)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := local.Create(mirror)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if opts.Concurrency == 0 {
		opts.Concurrency = 4
	}
	var sink backend.Backend = dst
	if wrap != nil {
		sink = wrap(dst)
	}
	return syncTrusting(context.Background(), src, sink, trust, opts)
}

func mustRun(t *testing.T, up, mirror string, opts fdlsync.Options) *fdlsync.Report {
	t.Helper()
	rep, err := runLocal(t, up, mirror, opts)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return rep
}

// mustRunTrusting is mustRun with the upstream judged by trust.
func mustRunTrusting(t *testing.T, up, mirror string, trust fdlsync.Trust, opts fdlsync.Options) *fdlsync.Report {
	t.Helper()
	rep, err := runLocalWith(t, up, mirror, trust, opts, nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return rep
}

func generated(t *testing.T, opts generate.Options) (up, mirror string, r *generate.Repo) {
	t.Helper()
	up, mirror = filepath.Join(t.TempDir(), "up"), filepath.Join(t.TempDir(), "mirror")
	opts.FastParquet = true
	if opts.Signer == nil {
		// Each test calls it once (or once a subtest) and compares no two:
		// a copy of the upstream generated once per shape will do.
		return up, mirror, fdltest.GenerateCopy(t, up, opts)
	}
	r, err := generate.Generate(context.Background(), up, opts)
	if err != nil {
		t.Fatal(err)
	}
	return up, mirror, r
}

// refusedOnly checks that the report refused exactly the given version
// with reason (refusals of refs to it aside), and returns its message.
func refusedOnly(t *testing.T, rep *fdlsync.Report, version, reason string) string {
	t.Helper()
	msg := ""
	for _, r := range rep.Refused {
		switch {
		case r.Ref != "" && r.Reason == fdlsync.ReasonVersion && r.Version == version:
		case r.Version == version && r.Reason == reason && r.Ref == "":
			msg = r.Message
		default:
			t.Errorf("unexpected refusal: %+v", r)
		}
	}
	if msg == "" {
		t.Fatalf("version %s not refused for %s: %+v", version, reason, rep.Refused)
	}
	return msg
}

func assertUnpublished(t *testing.T, mirror, id string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(mirror, "versions", id, repo.RecordFile)); err == nil {
		t.Fatalf("version %s was published", id)
	}
}

func writeRef(t *testing.T, dir, ref, id string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(ref))
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func refIn(dir, ref string) string {
	b, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(ref)))
	return strings.TrimSpace(string(b))
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-r", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
}

// sshSigner makes a key with ssh-keygen and returns a generate.Signer and
// the path of an allowed_signers file trusting it.
func sshSigner(t *testing.T) (func([]byte) ([]byte, error), string) {
	t.Helper()
	key := fdltest.NewSSHKey(t, "ed25519", "pub@example.org")
	return key.Signer(t, "fdl"), fdltest.AllowedSigners(t, "", key)
}

func requireSigned(t *testing.T, allowed string) fdlsync.Trust {
	t.Helper()
	signers, err := verify.LoadAllowedSigners(allowed)
	if err != nil {
		t.Fatal(err)
	}
	return (&verify.Policy{Signers: signers, Require: true}).AsTrust()
}

// A version mirrored while signatures were optional stays in the mirror;
// a later run requiring them must not move a ref to it: the policy is
// applied to every ref move, not only to versions copied now.
func TestRefMovedOnlyToAVersionThatPassesThePolicy(t *testing.T) {
	_, allowed := sshSigner(t)
	up, mirror, r := generated(t, generate.Options{Versions: 2})
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run: %+v", rep.Refused)
	}
	old := r.Versions[0]
	writeRef(t, up, "refs/heads/old", old)
	rep := mustRunTrusting(t, up, mirror, requireSigned(t, allowed), fdlsync.Options{})
	var refused bool
	for _, x := range rep.Refused {
		if x.Ref == "refs/heads/old" && x.Reason == fdlsync.ReasonSignature && x.Version == old {
			refused = true
		}
	}
	if !refused {
		t.Fatalf("ref to an unsigned version under --require-signatures: refusals %+v", rep.Refused)
	}
	if got := refIn(mirror, "refs/heads/old"); got != "" {
		t.Fatalf("refs/heads/old moved to %s", got)
	}
	for _, m := range rep.RefsMoved {
		t.Errorf("ref moved: %+v", m)
	}
}

// A run stopped after writing a version's catalog but before its
// version.json leaves the catalog behind; upstream then replaced the
// version. Nothing in a folder without version.json is trusted by size:
// the catalog is checked against the record's sha256, other files are
// rewritten.
func TestLeftoversOfAnInterruptedRunAreNotTrustedBySize(t *testing.T) {
	up, mirror, r := generated(t, generate.Options{Versions: 2, ExtraFiles: true})
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run: %+v", rep.Refused)
	}
	id, err := generate.AddVersion(context.Background(), up, 2, generate.Options{FastParquet: true, ExtraFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = r
	for _, f := range []string{repo.CatalogFile, "dataset.json"} {
		fi, err := os.Stat(filepath.Join(up, "versions", id, f))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(mirror, "versions", id, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, make([]byte, fi.Size()), 0o644) // the right size, other bytes
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	if p := fdltest.Complete(t, mirror); len(p) > 0 {
		t.Fatalf("verify after the run: %v", p)
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
}

// rehash fixes a version's record after its catalog changed.
func rehash(t *testing.T, dir, id string, edit func(rec map[string]any)) {
	t.Helper()
	rehashFile(t, dir, id, repo.CatalogFile, edit)
}

// rehashFile fixes a version's record after its catalog, file, changed.
func rehashFile(t *testing.T, dir, id, file string, edit ...func(rec map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "versions", id, file))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	p := filepath.Join(dir, "versions", id, repo.RecordFile)
	raw, _ := os.ReadFile(p)
	var rec map[string]any
	json.Unmarshal(raw, &rec)
	rec["sha256"] = hex.EncodeToString(sum[:])
	for _, e := range edit {
		if e != nil {
			e(rec)
		}
	}
	raw, _ = json.Marshal(rec)
	os.WriteFile(p, raw, 0o644)
	os.Remove(p + ".sig")
}

func execCatalog(t *testing.T, dir, id, stmt string) {
	t.Helper()
	db, err := sql.Open("duckdb", filepath.Join(dir, "versions", id, repo.CatalogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatal(err)
	}
	db.Exec("CHECKPOINT")
}

// Two new versions record one shared data file with different sizes: the
// refusal lands on the version whose record disagrees with the file, with
// its own message, whichever version reaches the file first.
func TestSharedDataFileRefusesTheVersionThatDisagrees(t *testing.T) {
	up, _, r := generated(t, generate.Options{Versions: 2, FilesPerVersion: 3})
	honest := r.Versions[1]
	liar := "019a7777-0000-7000-8000-000000000001"
	copyDir(t, filepath.Join(up, "versions", honest), filepath.Join(up, "versions", liar))
	execCatalog(t, up, liar, "UPDATE ducklake_data_file SET file_size_bytes = file_size_bytes + 7 WHERE begin_snapshot = (SELECT max(begin_snapshot) FROM ducklake_data_file)")
	rehash(t, up, liar, func(rec map[string]any) { rec["id"] = liar })
	writeRef(t, up, "refs/heads/liar", liar)
	runs := 6 // concurrencies 1 to 3, twice: whichever version reaches the file first
	if testing.Short() {
		runs = 2
	}
	for i := range runs {
		mirror := filepath.Join(t.TempDir(), "mirror")
		rep := mustRun(t, up, mirror, fdlsync.Options{Concurrency: 1 + i%3})
		msg := refusedOnly(t, rep, liar, fdlsync.ReasonSizeMismatch)
		if !strings.Contains(msg, liar) {
			t.Errorf("run %d: the refusal of %s does not name it: %s", i, liar, msg)
		}
		if refIn(mirror, "refs/heads/main") != honest {
			t.Fatalf("run %d: main is %q, want the honest %s", i, refIn(mirror, "refs/heads/main"), honest)
		}
		assertUnpublished(t, mirror, liar)
	}
}

// A signed version.json copied under another version ID (with its
// signature and catalog) is a replay: refused, even though the signature
// and the sha256 check out.
func TestRecordOfAnotherVersionIsRefusedAsAReplay(t *testing.T) {
	sign, allowed := sshSigner(t)
	up, mirror, r := generated(t, generate.Options{Versions: 2, Signer: sign})
	replay := "019a7777-0000-7000-8000-000000000002"
	copyDir(t, filepath.Join(up, "versions", r.Versions[0]), filepath.Join(up, "versions", replay))
	writeRef(t, up, "refs/heads/evil", replay)
	rep := mustRunTrusting(t, up, mirror, requireSigned(t, allowed), fdlsync.Options{})
	refusedOnly(t, rep, replay, fdlsync.ReasonReplay)
	assertUnpublished(t, mirror, replay)
	if refIn(mirror, "refs/heads/evil") != "" {
		t.Fatal("refs/heads/evil written")
	}
	if refIn(mirror, "refs/heads/main") != r.Versions[1] {
		t.Fatal("main not mirrored")
	}
}

// A data file deleted from the mirror (a lifecycle rule, an operator) is
// put back by sync --repair before a new version needing it is published.
// A plain run no longer notices it: a version whose parent is published
// is read as its difference from the parent's catalog, and only the files
// it adds are checked (issue 29: a run costs what changed), the parent's
// being in the mirror since it was published.
func TestVersionPublishedOnlyWithItsDataFilesInTheSink(t *testing.T) {
	up, mirror, r := generated(t, generate.Options{Versions: 2, FilesPerVersion: 3})
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run: %+v", rep.Refused)
	}
	id, err := generate.AddVersion(context.Background(), up, 1, generate.Options{FastParquet: true})
	if err != nil {
		t.Fatal(err)
	}
	gone := r.DataFiles[0]
	if err := os.Remove(filepath.Join(mirror, gone)); err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{Repair: true})
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	if _, err := os.Stat(filepath.Join(mirror, gone)); err != nil {
		t.Fatalf("version %s published without %s: %v", id, gone, err)
	}
	if refIn(mirror, "refs/heads/main") != id {
		t.Fatal("main not moved")
	}
}

// A run that waited for the lock plans from what upstream and the sink
// say once it holds it: another run published main=V2 meanwhile, and the
// waiting run must not move main back to the V1 it read before waiting.
func TestRunThatWaitedForTheLockPlansFromFreshRefs(t *testing.T) {
	up, mirror, r := generated(t, generate.Options{Versions: 1})
	var v2 string
	opts := fdlsync.Options{
		Lock: func(ctx context.Context) (context.Context, func(), error) {
			// While this run "waits", upstream moves on and another run
			// mirrors it.
			var err error
			if v2, err = generate.AddVersion(ctx, up, 1, generate.Options{FastParquet: true}); err != nil {
				t.Fatal(err)
			}
			if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
				t.Fatalf("other run: %+v", rep.Refused)
			}
			return ctx, func() {}, nil
		},
	}
	rep := mustRun(t, up, mirror, opts)
	if !rep.OK() {
		t.Fatalf("refused: %+v", rep.Refused)
	}
	if got := refIn(mirror, "refs/heads/main"); got != v2 {
		t.Fatalf("main is %s after the waiting run, want %s (it read %s before waiting)", got, v2, r.Versions[0])
	}
	for _, m := range rep.RefsMoved {
		t.Errorf("the waiting run moved %+v", m)
	}
}

// Refs are written through a sink that holds 300,004 refs' worth of
// refs.json: what the mirror writes, its next run reads. Long ref names
// make the same 17 MB with fewer files.
func TestRefsJSONTheMirrorWritesItReadsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: writes 4,500 refs in folders 14 deep")
	}
	up, mirror, r := generated(t, generate.Options{Versions: 1})
	dir := "refs/heads"
	for i := range 14 {
		dir += "/" + strings.Repeat(string(rune('a'+i)), 250)
	}
	os.MkdirAll(filepath.Join(up, filepath.FromSlash(dir)), 0o755)
	const n = 4500
	for i := range n {
		name := filepath.Join(up, filepath.FromSlash(dir), strings.Repeat("x", 200)+fmt.Sprintf("%06d", i))
		if err := os.WriteFile(name, []byte(r.Versions[0]+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.OK() {
		t.Fatalf("first run refused %d: %.300s", len(rep.Refused), rep.Refused[0].Message)
	}
	fi, err := os.Stat(filepath.Join(mirror, repo.RefsFile))
	if err != nil || fi.Size() <= repo.MaxRefsJSON {
		t.Fatalf("refs.json: %v, %d bytes; the test wants more than %d", err, fi.Size(), repo.MaxRefsJSON)
	}
	if _, err := runLocal(t, up, mirror, fdlsync.Options{}); err != nil {
		t.Fatalf("second run over the mirror's own %d-byte refs.json: %v", fi.Size(), err)
	}
	if p := fdltest.Complete(t, mirror); len(p) > 0 {
		t.Fatalf("verify: %v", p[:min(3, len(p))])
	}
}

// An ancestor refused for a reason that may pass (its catalog missing
// upstream for a while) is kept in the mirror's state and retried by later
// runs until it is mirrored; its child does not wait for it.
func TestRefusedAncestorIsRetriedUntilMirrored(t *testing.T) {
	up, mirror, r := generated(t, generate.Options{Versions: 3})
	mid := r.Versions[1]
	cat := filepath.Join(up, "versions", mid, repo.CatalogFile)
	if err := os.Rename(cat, cat+".away"); err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	refusedOnly(t, rep, mid, fdlsync.ReasonMissingFile)
	if len(rep.Pending) != 1 || rep.Pending[0].Version != mid || rep.Pending[0].Reason != fdlsync.ReasonMissingFile {
		t.Fatalf("pending after the first run: %+v, want %s", rep.Pending, mid)
	}
	if refIn(mirror, "refs/heads/main") != r.Versions[2] {
		t.Fatal("the child was not published: it does not wait for a refused ancestor")
	}
	// Nothing changed upstream: the next run still tries, and says so.
	rep = mustRun(t, up, mirror, fdlsync.Options{})
	refusedOnly(t, rep, mid, fdlsync.ReasonMissingFile)
	if len(rep.Pending) != 1 {
		t.Fatalf("pending after the second run: %+v", rep.Pending)
	}
	os.Rename(cat+".away", cat)
	rep = mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.OK() || len(rep.VersionsPublished) != 1 || rep.VersionsPublished[0] != mid || len(rep.Pending) != 0 {
		t.Fatalf("after the catalog came back: published %v, pending %+v, refused %+v", rep.VersionsPublished, rep.Pending, rep.Refused)
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
}

// A pending ancestor that upstream no longer has is dropped.
func TestPendingAncestorGoneUpstreamIsDropped(t *testing.T) {
	up, mirror, r := generated(t, generate.Options{Versions: 3})
	mid := r.Versions[1]
	os.Remove(filepath.Join(up, "versions", mid, repo.CatalogFile))
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); len(rep.Pending) != 1 {
		t.Fatalf("pending: %+v", rep.Pending)
	}
	os.RemoveAll(filepath.Join(up, "versions", mid))
	rep := mustRun(t, up, mirror, fdlsync.Options{})
	if !rep.OK() || len(rep.Pending) != 0 {
		t.Fatalf("after the ancestor left upstream: pending %+v, refused %+v", rep.Pending, rep.Refused)
	}
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); len(rep.Pending) != 0 || rep.CatalogsRead != 0 {
		t.Fatalf("a later run: pending %+v, %d catalogs read", rep.Pending, rep.CatalogsRead)
	}
}

// sync --repair finds data files of complete versions missing from the
// sink or of the wrong size and copies them back, and says which.
func TestRepairCopiesBackWhatTheMirrorLost(t *testing.T) {
	up, mirror, r := generated(t, generate.Options{Versions: 2, FilesPerVersion: 2})
	if rep := mustRun(t, up, mirror, fdlsync.Options{}); !rep.OK() {
		t.Fatalf("first run: %+v", rep.Refused)
	}
	gone, cut := r.DataFiles[0], r.DataFiles[1]
	os.Remove(filepath.Join(mirror, gone))
	os.Truncate(filepath.Join(mirror, cut), 10)
	if p := fdltest.Complete(t, mirror); len(p) == 0 {
		t.Fatal("verify before repair found nothing")
	}
	rep := mustRun(t, up, mirror, fdlsync.Options{Repair: true})
	if !rep.OK() {
		t.Fatalf("repair refused: %+v", rep.Refused)
	}
	got := strings.Join(rep.Repaired, " ")
	if len(rep.Repaired) != 2 || !strings.Contains(got, gone) || !strings.Contains(got, cut) {
		t.Fatalf("repaired %v, want %s and %s", rep.Repaired, gone, cut)
	}
	if p := fdltest.Complete(t, mirror); len(p) > 0 {
		t.Fatalf("verify after repair: %v", p)
	}
	fdltest.AssertMirrored(t, up, mirror, nil)
	if rep := mustRun(t, up, mirror, fdlsync.Options{Repair: true}); len(rep.Repaired) != 0 || rep.FilesCopied != 0 || len(rep.Unrepaired) != 0 {
		t.Fatalf("a second repair: repaired %v, unrepaired %v, copied %d", rep.Repaired, rep.Unrepaired, rep.FilesCopied)
	}
	// Lost on both sides: found, not copied back, listed and refused.
	os.Remove(filepath.Join(mirror, gone))
	os.Remove(filepath.Join(up, gone))
	rep = mustRun(t, up, mirror, fdlsync.Options{Repair: true})
	if len(rep.Repaired) != 0 || !slices.Equal(rep.Unrepaired, []string{gone}) {
		t.Fatalf("lost upstream too: repaired %v, unrepaired %v, want %s unrepaired", rep.Repaired, rep.Unrepaired, gone)
	}
	if len(rep.Refused) != 1 || rep.Refused[0].Reason != fdlsync.ReasonCopy || rep.Refused[0].File != gone {
		t.Fatalf("lost upstream too: refused %+v, want %s refused as %s", rep.Refused, gone, fdlsync.ReasonCopy)
	}
}
