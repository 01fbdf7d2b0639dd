package source_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/httpstore"
	"github.com/fdl-mirror/fdl-mirror/internal/backend/local"
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/fdltest"
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
	"github.com/fdl-mirror/fdl-mirror/internal/verify"
)

// The source's contract, against the real stores a hostile upstream sits
// behind: a folder (local, which lists) and an HTTP server on 127.0.0.1
// (which cannot list: refs.json, and files asked for by name). Every
// verdict names the version or ref and the rule, and a refused record
// yields no record to act on.

const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// record is a version record of id with parents that follows the rules.
func record(id string, parents ...string) string {
	ps := `"` + strings.Join(parents, `", "`) + `"`
	if len(parents) == 0 {
		ps = ""
	}
	return `{"id": "` + id + `", "parents": [` + ps + `], "sha256": "` + sum + `", "message": "m"}`
}

// hostileRepo writes a repository whose refs and versions break each rule
// the source judges, beside one good version v1 (ref main):
//   - v-big: a record larger than a record may be;
//   - v-replay: a record whose "id" is v1 (a replayed signed record);
//   - v-json: malformed JSON;
//   - v-parent: a parent that climbs out;
//   - refs/heads/gone: a ref to a version upstream does not have;
//   - refs/heads/evil: a ref whose content climbs out;
//   - refs/heads/Upper: a ref named outside the rules.
func hostileRepo(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "up")
	fdltest.WriteFile(t, filepath.Join(dir, repo.SettingsFile), `{"fdl": "0.1"}`)
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v1/version.json"), record("v1"))
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v-big/version.json"), record("v-big")+strings.Repeat(" ", repo.MaxRecordFile))
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v-replay/version.json"), record("v1"))
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v-json/version.json"), `{"id": "v-json", "parents": [`)
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v-parent/version.json"), record("v-parent", "../../etc"))
	refs := map[string]string{
		"refs/heads/main":  "v1",
		"refs/heads/gone":  "v9",
		"refs/heads/evil":  "../../../escaped",
		"refs/heads/Upper": "v1",
	}
	good := repo.Refs{}
	for name, id := range refs {
		fdltest.WriteFile(t, filepath.Join(dir, name), id+"\n")
		if _, err := repo.CheckRefName(name); err == nil && repo.CheckVersionID(id) == nil {
			good[name] = id
		}
	}
	// refs.json, for a store that cannot list, says what the ref files
	// say, bad ones too.
	raw := string(repo.RefsJSON(good))
	raw = strings.TrimSuffix(strings.TrimSpace(raw), "}") + `, "refs/heads/evil": "../../../escaped", "refs/heads/Upper": "v1"}`
	fdltest.WriteFile(t, filepath.Join(dir, repo.RefsFile), raw)
	return dir
}

// stores opens dir as each store the contract runs against.
func stores(t *testing.T, dir string) map[string]backend.Reader {
	l, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	srv := testserver.HTTP(t, dir)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpstore.Open(context.Background(), u, httpstore.Options{RetryMax: 1})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]backend.Reader{"local": l, "http": h}
}

func asRefusal(t *testing.T, err error, reason string, parts ...string) *source.RefusalError {
	t.Helper()
	var r *source.RefusalError
	if !errors.As(err, &r) {
		t.Fatalf("want a %s refusal, got %T %v", reason, err, err)
	}
	if r.Reason != reason {
		t.Errorf("refusal %q, want %q: %s", r.Reason, reason, r.Message)
	}
	for _, p := range parts {
		if !strings.Contains(r.File+" "+r.Message, p) {
			t.Errorf("refusal does not name %q: file %q, message %q", p, r.File, r.Message)
		}
	}
	return r
}

func TestRecordsThatBreakTheRulesAreRefused(t *testing.T) {
	dir := hostileRepo(t)
	ctx := context.Background()
	for name, r := range stores(t, dir) {
		t.Run(name, func(t *testing.T) {
			src := source.New(r, nil, nil)
			for _, tc := range []struct {
				id, reason string
				parts      []string
			}{
				{"v-big", source.ReasonRecord, []string{"versions/v-big/version.json", "larger than"}},
				{"v-replay", source.ReasonReplay, []string{"versions/v-replay/version.json", `"id": "v1"`}},
				{"v-json", source.ReasonRecord, []string{"versions/v-json/version.json", "malformed JSON"}},
				{"v-parent", source.ReasonRecord, []string{"versions/v-parent/version.json", "parent"}},
				{"v9", source.ReasonMissingFile, []string{"versions/v9/version.json", "missing upstream"}},
			} {
				raw, rec, err := src.Versions().ReadRecord(ctx, tc.id, true)
				if rec != nil {
					t.Errorf("%s: a record to act on: %+v", tc.id, rec)
				}
				asRefusal(t, err, tc.reason, tc.parts...)
				if tc.reason == source.ReasonReplay && string(raw) != record("v1") {
					t.Errorf("%s: the refused bytes are not the ones read: %q", tc.id, raw)
				}

				// Versions().Read judges the same bytes the same way; a
				// record it cannot read at all is a ReadError.
				v, err := src.Versions().Read(ctx, tc.id)
				if v != nil {
					t.Errorf("%s: Versions().Read returned a version: %+v", tc.id, v)
				}
				var unread *source.ReadError
				switch tc.id {
				case "v-big":
					if !errors.As(err, &unread) || !errors.Is(err, backend.ErrTooLarge) || unread.File != "versions/v-big/version.json" {
						t.Errorf("%s: Versions().Read: %v, want a ReadError of a file too large", tc.id, err)
					}
				case "v9":
					if !errors.As(err, &unread) || !backend.IsNotExist(err) {
						t.Errorf("%s: Versions().Read: %v, want a ReadError of a file not there", tc.id, err)
					}
				default:
					asRefusal(t, err, tc.reason, tc.parts...)
				}
			}
			// An ancestor upstream lacks is left out, not refused.
			if raw, rec, err := src.Versions().ReadRecord(ctx, "v9", false); raw != nil || rec != nil || err != nil {
				t.Errorf("an absent ancestor: %q %v %v, want nothing and no error", raw, rec, err)
			}
			raw, rec, err := src.Versions().ReadRecord(ctx, "v1", true)
			if err != nil || rec == nil || rec.ID != "v1" || string(raw) != record("v1") || len(rec.Parents) != 0 {
				t.Fatalf("the good record: %v %+v", err, rec)
			}
		})
	}
}

// JudgeRecord judges bytes wherever they were read (the mirror's copy
// too): the same verdicts as a read upstream.
func TestJudgeRecordIsTheOneParse(t *testing.T) {
	if _, r := source.JudgeRecord("v2", []byte(record("v1"))); r == nil || r.Reason != source.ReasonReplay || r.Version != "v2" {
		t.Errorf("a replayed record: %+v", r)
	}
	if _, r := source.JudgeRecord("v2", []byte(`{"id": "v2", "sha256": "ABC"}`)); r == nil || r.Reason != source.ReasonRecord || !strings.Contains(r.Message, "64 lowercase hex") {
		t.Errorf("a bad sha256: %+v", r)
	}
	rec, r := source.JudgeRecord("v2", []byte(record("v2", "v1")))
	if r != nil || !slices.Equal(rec.Parents, []string{"v1"}) || rec.SHA256 != sum || rec.Message != "m" || rec.Author != "" {
		t.Errorf("a good record: %+v %+v", rec, r)
	}
	// Text for people (a notification's author and message) is taken
	// where it is a string; anything else is "", and the record stands.
	rec, r = source.JudgeRecord("v2", []byte(`{"id": "v2", "sha256": "`+sum+`", "author": "A \u001b[31m", "message": {"x": 1}}`))
	if r != nil || rec.Author != "A \x1b[31m" || rec.Message != "" {
		t.Errorf("a record with a string author and an object message: %+v %+v", rec, r)
	}
}

func TestRefsThatBreakTheRulesAreRefusedAndTheRestRead(t *testing.T) {
	dir := hostileRepo(t)
	ctx := context.Background()
	for name, r := range stores(t, dir) {
		t.Run(name, func(t *testing.T) {
			src := source.New(r, nil, nil)
			for _, got := range []source.Refs{src.ReadRefs(ctx, nil), src.ReadRefsWithoutHead(ctx)} {
				if got.Unread || got.Err != nil {
					t.Fatalf("refs unread: %v", got.Err)
				}
				want := repo.Refs{"refs/heads/main": "v1", "refs/heads/gone": "v9"}
				if !maps(got.Refs, want) {
					t.Errorf("refs %v, want %v", got.Refs, want)
				}
				var refused []string
				for _, x := range got.Refused {
					if x.Reason != source.ReasonBadRef || x.Ref == "" || !strings.Contains(x.Message, x.Ref) && !strings.Contains(x.Message, "version ID") {
						t.Errorf("a refusal of a ref: %+v", x)
					}
					refused = append(refused, x.Ref)
				}
				slices.Sort(refused)
				if want := []string{"refs/heads/Upper", "refs/heads/evil"}; !slices.Equal(refused, want) {
					t.Errorf("refused %q, want %q", refused, want)
				}
			}
			// A ref to a version upstream lacks is read (a ref is judged
			// by its name and content); the version it names is refused
			// when it is read.
			_, _, err := src.Versions().ReadRecord(ctx, "v9", true)
			asRefusal(t, err, source.ReasonMissingFile, "versions/v9/version.json")
		})
	}
}

// CheckRefTargets finds a ref that names a version upstream lacks, naming
// the ref and the version, and only that one: a version whose record is
// there passes, whatever its bytes (a refusal of a record is not an
// absence), where the store lists (by its listing) and where it cannot
// (by reading each record).
func TestRefTargetsUpstreamLacksAreFound(t *testing.T) {
	dir := hostileRepo(t)
	ctx := context.Background()
	for name, r := range stores(t, dir) {
		t.Run(name, func(t *testing.T) {
			src := source.New(r, nil, nil)
			if err := src.Versions().List(ctx); err != nil {
				t.Fatal(err)
			}
			held := repo.Refs{"refs/heads/main": "v1", "refs/heads/json": "v-json", "refs/heads/replay": "v-replay"}
			if err := src.CheckRefTargets(ctx, held); err != nil {
				t.Fatalf("refs to versions upstream holds: %v", err)
			}
			got := src.ReadRefsWithoutHead(ctx)
			err := src.CheckRefTargets(ctx, got.Refs)
			if err == nil || !strings.Contains(err.Error(), "ref refs/heads/gone points at version v9, which upstream does not have") {
				t.Fatalf("refs with one naming a version upstream lacks: %v", err)
			}
			if strings.Contains(err.Error(), "refs/heads/main") {
				t.Errorf("refs/heads/main, whose version is upstream, was named: %v", err)
			}
		})
	}
}

func maps(a, b repo.Refs) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A symbolic link upstream leads nowhere outside it: a ref file that is a
// link is not listed, and a record that is a link to a file outside is
// not read.
func TestSymbolicLinksDoNotLeadOutOfTheUpstream(t *testing.T) {
	dir := hostileRepo(t)
	outside := filepath.Join(t.TempDir(), "outside")
	fdltest.WriteFile(t, filepath.Join(outside, "ref"), "v1\n")
	fdltest.WriteFile(t, filepath.Join(outside, "version.json"), record("v-link"))
	if err := os.Symlink(filepath.Join(outside, "ref"), filepath.Join(dir, "refs/heads/link")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "versions/v-link"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "version.json"), filepath.Join(dir, "versions/v-link/version.json")); err != nil {
		t.Fatal(err)
	}
	l, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	src := source.New(l, nil, nil)
	got := src.ReadRefs(ctx, nil)
	if _, ok := got.Refs["refs/heads/link"]; ok {
		t.Errorf("a ref file linked outside the upstream was read: %v", got.Refs)
	}
	if _, rec, err := src.Versions().ReadRecord(ctx, "v-link", true); rec != nil || err == nil {
		t.Errorf("a record linked outside the upstream was read: %+v, %v", rec, err)
	}
	if v, err := src.Versions().Read(ctx, "v-link"); v != nil || err == nil {
		t.Errorf("Versions().Read read a record linked outside the upstream: %+v, %v", v, err)
	}
}

// Signatures are judged by the operator's keys, never the repository's:
// a good one passes, a damaged one, another key's, and a missing one
// where signatures are required are refused, naming the signature file.
func TestSignaturesAreJudgedByTheTrustedKeys(t *testing.T) {
	trusted := fdltest.NewSSHKey(t, "ed25519", "publisher@example.org")
	other := fdltest.NewSSHKey(t, "ed25519", "intruder@example.org")
	signers, err := verify.LoadAllowedSigners(fdltest.AllowedSigners(t, "", trusted))
	if err != nil {
		t.Fatal(err)
	}
	dir := hostileRepo(t)
	sign := func(id string, k fdltest.SSHKey, damage bool) {
		raw := []byte(record(id))
		fdltest.WriteFile(t, filepath.Join(dir, "versions", id, "version.json"), string(raw))
		sig, err := k.Signer(t, "fdl")(raw)
		if err != nil {
			t.Fatal(err)
		}
		if damage {
			// A byte of the signature itself, inside its armour.
			lines := strings.Split(string(sig), "\n")
			b := []byte(lines[3])
			b[10] ^= 0x01
			if b[10] == '\n' || b[10] == '=' {
				b[10] = 'A'
			}
			lines[3] = string(b)
			sig = []byte(strings.Join(lines, "\n"))
		}
		fdltest.WriteFile(t, filepath.Join(dir, "versions", id, repo.SignatureFile), string(sig))
	}
	sign("v-good", trusted, false)
	sign("v-damaged", trusted, true)
	sign("v-other", other, false)
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v-none/version.json"), record("v-none"))

	ctx := context.Background()
	for name, r := range stores(t, dir) {
		t.Run(name, func(t *testing.T) {
			for _, require := range []bool{false, true} {
				trust := (&verify.Policy{Signers: signers, Require: require}).AsTrust()
				src := source.New(r, trust, nil)
				for _, tc := range []struct {
					id   string
					pass bool
				}{{"v-good", true}, {"v-damaged", false}, {"v-other", false}, {"v-none", !require}} {
					v, err := src.Versions().Read(ctx, tc.id)
					if err != nil || v == nil || v.Record.ID != tc.id {
						t.Fatalf("%s: %v %+v", tc.id, err, v)
					}
					if v.Passes() != tc.pass {
						t.Errorf("%s (required %v): passes %v, want %v: %+v", tc.id, require, v.Passes(), tc.pass, v.Verdict)
					}
					if !tc.pass {
						asRefusal(t, v.Verdict, source.ReasonSignature, "versions/"+tc.id+"/version.json.sig")
					}
					// The run's path (ReadRecord, then ReadSignature with
					// the folder's files) gives the same verdict.
					raw, _, err := src.Versions().ReadRecord(ctx, tc.id, true)
					if err != nil {
						t.Fatal(err)
					}
					files := map[string]int64{}
					if tc.id != "v-none" {
						files[repo.SignatureFile] = -1
					}
					sig, err := src.Versions().ReadSignature(ctx, tc.id, files, raw)
					if (err == nil) != tc.pass {
						t.Errorf("%s (required %v): ReadSignature: %v, want pass %v", tc.id, require, err, tc.pass)
					}
					if tc.pass && tc.id == "v-good" && string(sig) != string(v.Signature) {
						t.Errorf("%s: ReadSignature and Read read different signatures", tc.id)
					}
				}
			}
		})
	}
	// Without a Trust, nothing is judged and no signature is read.
	if r := source.JudgeSignature(nil, "v-damaged", []byte(record("v-damaged")), []byte("garbage")); r != nil {
		t.Errorf("no Trust refused a version: %+v", r)
	}
}

// Where the store cannot list, a version's catalog is found as readers
// find it: ducklake.duckdb, else metadata.db, never both asked for.
func TestMainCatalogIsFoundAsReadersFindIt(t *testing.T) {
	dir := hostileRepo(t)
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v1/ducklake.duckdb"), "duck")
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v1/metadata.db"), "meta-ignored")
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v2/version.json"), record("v2"))
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v2/metadata.db"), "metadata")
	srv := testserver.HTTP(t, dir)
	u, _ := url.Parse(srv.URL)
	h, err := httpstore.Open(context.Background(), u, httpstore.Options{RetryMax: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src := source.New(h, nil, nil)
	if _, err := src.ReadSettings(ctx); err != nil {
		t.Fatal(err)
	}
	files, err := src.Versions().Files(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files[repo.MetadataFile]; ok || files[repo.CatalogFile] != 4 {
		t.Errorf("v1 has both: files %v, want ducklake.duckdb alone", files)
	}
	if n := srv.RequestsFor("/versions/v1/metadata.db"); n != 0 {
		t.Errorf("metadata.db beside ducklake.duckdb was asked for %d times", n)
	}
	if files, err = src.Versions().Files(ctx, "v2"); err != nil || files[repo.MetadataFile] != 8 || repo.MainCatalog(files) != repo.MetadataFile {
		t.Errorf("v2 has metadata.db alone: files %v, %v", files, err)
	}
	tmp := t.TempDir()
	for id, want := range map[string]string{"v1": "duck", "v2": "metadata"} {
		file, fetched, err := src.Catalogs().FetchMainTo(ctx, id, tmp, 0)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		got, _ := os.ReadFile(fetched.Path)
		if string(got) != want || (file == repo.MetadataFile) != (id == "v2") {
			t.Errorf("%s: fetched %s holding %q, want %q", id, file, got, want)
		}
		fetched.Remove()
	}
	// Neither: the main catalog's absence, named.
	file, _, err := src.Catalogs().FetchMainTo(ctx, "v-json", tmp, 0)
	if file != repo.CatalogFile || !backend.IsNotExist(err) {
		t.Errorf("a version with no catalog: %s, %v", file, err)
	}
	// A catalog past the size a catalog may have is refused as it comes,
	// and nothing of it is left on disk.
	fdltest.WriteFile(t, filepath.Join(dir, "versions/v3/ducklake.duckdb"), strings.Repeat("x", 4096))
	_, err = src.Catalogs().FetchTo(ctx, "v3", repo.CatalogFile, tmp, 1024)
	var le *catalog.LimitError
	if !errors.As(err, &le) {
		t.Errorf("an oversized catalog: %v, want a LimitError", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left on disk: %v", left)
	}
}

// HEAD and refs.json are judged as ref files are: a HEAD naming a ref
// against the rules is refused (ReadRefsWithoutHead does not read it),
// and a refs.json past the size refs may have, on a store that cannot
// list, leaves the refs unread, saying why, with none taken from it.
func TestHeadAndRefsJSONThatBreakTheRulesAreRefused(t *testing.T) {
	dir := hostileRepo(t)
	fdltest.WriteFile(t, filepath.Join(dir, repo.HeadFile), "ref: refs/heads/../../x\n")
	ctx := context.Background()
	for name, r := range stores(t, dir) {
		src := source.New(r, nil, nil)
		got := src.ReadRefs(ctx, nil)
		var head *source.RefusalError
		for _, x := range got.Refused {
			if x.Ref == repo.HeadFile {
				head = x
			}
		}
		if got.Head != "" || head == nil || head.Reason != source.ReasonBadRef || !strings.Contains(head.Message, "refs/heads/../../x") {
			t.Errorf("%s: a HEAD against the rules: head %q, refusal %+v", name, got.Head, head)
		}
		for _, x := range src.ReadRefsWithoutHead(ctx).Refused {
			if x.Ref == repo.HeadFile {
				t.Errorf("%s: ReadRefsWithoutHead judged HEAD: %+v", name, x)
			}
		}
	}

	fdltest.WriteFile(t, filepath.Join(dir, repo.RefsFile), `{"refs/heads/main": "v1"`+strings.Repeat(" ", repo.MaxRefsJSON)+`}`)
	h := stores(t, dir)["http"]
	got := source.New(h, nil, nil).ReadRefs(ctx, nil)
	if !got.Unread || !errors.Is(got.Err, backend.ErrTooLarge) || len(got.Refs) != 0 {
		t.Fatalf("an oversized refs.json: unread %v, err %v, refs %v", got.Unread, got.Err, got.Refs)
	}
	if len(got.Refused) == 0 || got.Refused[0].File != repo.RefsFile || got.Refused[0].Reason != source.ReasonBadRef {
		t.Errorf("an oversized refs.json: refusals %+v", got.Refused)
	}
}
