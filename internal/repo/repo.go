// Package repo is the FDL repository model: the layout's paths, fdl.json,
// refs, refs.json, HEAD and version records, with the rules that make a
// name or a value acceptable. It does no I/O of its own beyond reading a
// backend.Reader; everything here is a pure function of bytes, so that the
// sync engine and the verifier judge a repository by the same rules.
package repo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Well-known names, relative to a repository's root.
const (
	SettingsFile = "fdl.json"
	HeadFile     = "HEAD"
	RefsFile     = "refs.json"
	RefsDir      = "refs/"
	VersionsDir  = "versions/"

	RecordFile    = "version.json"
	SignatureFile = "version.json.sig"
	CatalogFile   = "ducklake.duckdb"
	CatalogsDir   = "catalogs/" // alternate catalogs: catalogs/<format>.duckdb
	// MetadataFile is the frozen catalog's name in fdl-cli 0.27 and later:
	// a version's catalog where it has no ducklake.duckdb.
	MetadataFile = "metadata.db"

	DefaultDataDir = "data/"

	// SupportedMajor is the spec major version this reader understands.
	SupportedMajor = 0
)

// KnownVersionFiles are the files of a version directory that a reader
// that cannot list (HTTP) tries by name, besides catalogs/<format>.duckdb.
var KnownVersionFiles = []string{RecordFile, SignatureFile, CatalogFile, "dataset.json", "files.json", ExpiredFile}

// ExpiredFile in a version's folder marks it past the host's retention
// period: prune follows it, and sync copies such a version only for a
// ref that points at it.
const ExpiredFile = "expired.json"

// Limits for objects that are read whole into memory.
const (
	MaxSmallFile = 1 << 20  // fdl.json, refs, HEAD, version.json(.sig)
	MaxRefsJSON  = 16 << 20 // refs.json of a store that cannot list (see RefsJSONLimit)
	// MaxRecordFile bounds a version.json. A record holds parents, a
	// sha256, a time and a message: 1 MiB is thousands of parents. Every
	// record the walk finds is held until its version is settled, so the
	// bound is what keeps a hostile upstream (60 records of 15 MB reached
	// 1 GB at 16 MiB) from growing the mirror's memory.
	MaxRecordFile = 1 << 20

	// MaxCatalogFormats bounds the catalog_formats entries read; the rest
	// are ignored.
	MaxCatalogFormats = 16
)

// isVersionIDByte and isRefSegmentByte are the characters of a version ID
// ([0-9a-z-]) and of a ref name's segment ([a-z0-9._-]). Byte tests, not
// regular expressions: a run with 20,000 refs checks every name and ID a
// few times over, and the expressions were a tenth of such a no-op's CPU.
func isVersionIDByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || c == '-'
}

func isRefSegmentByte(c byte) bool { return isVersionIDByte(c) || c == '.' || c == '_' }

// allOf says whether s is not empty and each of its bytes passes ok.
func allOf(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return s != ""
}

// VersionDir is the directory of a version, ending in "/".
func VersionDir(id string) string { return VersionsDir + id + "/" }

// VersionFile is the path of a file inside a version's directory.
func VersionFile(id, file string) string { return VersionsDir + id + "/" + file }

// CheckVersionID enforces the project rule: one path segment of [0-9a-z-].
func CheckVersionID(id string) error {
	if !allOf(id, isVersionIDByte) {
		return fmt.Errorf("version ID %q is not one path segment of [0-9a-z-]", id)
	}
	return nil
}

// RefKind is what a ref name says about how the ref may move.
type RefKind int

const (
	Branch  RefKind = iota // refs/heads/…: moves
	Tag                    // refs/tags/…: never moves once made
	Request                // refs/requests/…: host's, moves
)

func (k RefKind) String() string {
	return [...]string{"branch", "tag", "request"}[k]
}

// CheckRefName enforces the project rule for ref names and returns the kind.
func CheckRefName(name string) (RefKind, error) {
	var kind RefKind
	var rest string
	switch {
	case strings.HasPrefix(name, "refs/heads/"):
		kind, rest = Branch, strings.TrimPrefix(name, "refs/heads/")
	case strings.HasPrefix(name, "refs/tags/"):
		kind, rest = Tag, strings.TrimPrefix(name, "refs/tags/")
	case strings.HasPrefix(name, "refs/requests/"):
		kind, rest = Request, strings.TrimPrefix(name, "refs/requests/")
	default:
		return 0, fmt.Errorf("ref %q is not under refs/heads/, refs/tags/ or refs/requests/", name)
	}
	if rest == "" {
		return 0, fmt.Errorf("ref %q has no name after its prefix", name)
	}
	for seg := range strings.SplitSeq(rest, "/") {
		switch {
		case seg == "":
			return 0, fmt.Errorf("ref %q has an empty segment", name)
		case seg == "." || seg == "..":
			return 0, fmt.Errorf("ref %q has a %q segment", name, seg)
		case !allOf(seg, isRefSegmentByte):
			return 0, fmt.Errorf("ref %q has a segment outside [a-z0-9._-]", name)
		}
	}
	return kind, nil
}

// ParseRefFile reads a ref file's content: one version ID and an optional
// trailing newline.
func ParseRefFile(name string, content []byte) (string, error) {
	id := string(content)
	id = strings.TrimSuffix(id, "\n")
	if err := CheckVersionID(id); err != nil {
		return "", fmt.Errorf("ref %s: %w", name, err)
	}
	return id, nil
}

// RefFileContent is what a mirror writes into a ref file.
func RefFileContent(id string) []byte { return []byte(id + "\n") }

// Refs maps full ref names to version IDs.
type Refs map[string]string

// Names returns the ref names, sorted.
func (r Refs) Names() []string {
	names := make([]string, 0, len(r))
	for n := range r {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// RefError is a ref that was refused, with the reason.
type RefError struct {
	Ref string
	Err error
}

func (e *RefError) Error() string { return e.Err.Error() }
func (e *RefError) Unwrap() error { return e.Err }

// ParseRefsJSON reads refs.json: an object from ref name to version ID,
// optionally nested under "refs". Malformed JSON is an error for the whole
// file; a bad name or ID refuses that ref only, and the rest are returned.
func ParseRefsJSON(content []byte) (Refs, []*RefError, error) {
	// Most are a flat object of strings, decoded in one pass (half the
	// time of the entry-by-entry way below, with 20,000 refs).
	var flat map[string]string
	if json.Unmarshal(content, &flat) == nil {
		if _, nested := flat["refs"]; !nested {
			return checkRefEntries(flat, nil)
		}
	}
	return parseRefsJSONByEntry(content)
}

// parseRefsJSONByEntry is ParseRefsJSON for any shape: the nested form,
// values that are not strings.
func parseRefsJSONByEntry(content []byte) (Refs, []*RefError, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(content, &top); err != nil {
		return nil, nil, fmt.Errorf("%s: malformed JSON: %w", RefsFile, err)
	}
	if nested, ok := top["refs"]; ok {
		var inner map[string]json.RawMessage
		if err := json.Unmarshal(nested, &inner); err == nil {
			top = inner
		}
	}
	entries := make(map[string]string, len(top))
	var bad []*RefError
	for name, raw := range top {
		var id string
		if err := json.Unmarshal(raw, &id); err != nil {
			bad = append(bad, &RefError{name, fmt.Errorf("%s: ref %q: value is not a string", RefsFile, name)})
			continue
		}
		entries[name] = id
	}
	return checkRefEntries(entries, bad)
}

// checkRefEntries keeps the entries of refs.json whose name and ID follow
// the rules and refuses the others, added to bad.
func checkRefEntries(entries map[string]string, bad []*RefError) (Refs, []*RefError, error) {
	refs := make(Refs, len(entries))
	for name, id := range entries {
		if _, err := CheckRefName(name); err != nil {
			bad = append(bad, &RefError{name, fmt.Errorf("%s: %w", RefsFile, err)})
			continue
		}
		if err := CheckVersionID(id); err != nil {
			bad = append(bad, &RefError{name, fmt.Errorf("%s: ref %s: %w", RefsFile, name, err)})
			continue
		}
		refs[name] = id
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].Ref < bad[j].Ref })
	return refs, bad, nil
}

// RefsJSONLimit is the size up to which refs.json is read where the
// refs it should hold are known (listed as ref files): twice what those
// refs render to, and never less than MaxRefsJSON. The mirror writes
// refs.json from the same refs, so what it writes it reads back, however
// many refs the repository has (300,004 refs render to 20 MB).
func RefsJSONLimit(refs Refs) int64 {
	return max(MaxRefsJSON, 2*int64(len(RefsJSON(refs))))
}

// RefsJSON renders refs as refs.json, keys sorted, ending in a newline.
func RefsJSON(refs Refs) []byte {
	var b bytes.Buffer
	b.Grow(len(refs) * 64)
	b.WriteString("{")
	for i, n := range refs.Names() {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  ")
		writeJSONString(&b, n)
		b.WriteString(": ")
		writeJSONString(&b, refs[n])
	}
	if len(refs) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// writeJSONString writes s as json.Marshal does: as it is between quotes
// where json.Marshal would escape none of it (any checked ref name or
// version ID), else through json.Marshal.
func writeJSONString(b *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			b.Write(q)
			return
		}
	}
	b.WriteByte('"')
	b.WriteString(s)
	b.WriteByte('"')
}

// ParseHead reads HEAD: "ref: refs/heads/<name>" and an optional newline.
func ParseHead(content []byte) (string, error) {
	s := strings.TrimSuffix(string(content), "\n")
	ref, ok := strings.CutPrefix(s, "ref: ")
	if !ok {
		return "", fmt.Errorf("%s: does not start with \"ref: \"", HeadFile)
	}
	if _, err := CheckRefName(ref); err != nil {
		return "", fmt.Errorf("%s: %w", HeadFile, err)
	}
	return ref, nil
}

// Settings is fdl.json as this project reads it. Raw keeps the bytes, which
// a mirror copies unchanged.
type Settings struct {
	FDL            string
	ID             string
	DataDir        string
	CatalogFormats []CatalogFormat
	Signers        []string
	Raw            []byte
}

// ParseSettings reads and checks fdl.json: a known major spec version and a
// data_dir that is a clean relative path ending in "/".
func ParseSettings(content []byte) (*Settings, error) {
	var doc struct {
		FDL            *json.RawMessage `json:"fdl"`
		ID             string           `json:"id"`
		DataDir        *string          `json:"data_dir"`
		CatalogFormats json.RawMessage  `json:"catalog_formats"`
		Signers        json.RawMessage  `json:"signers"`
	}
	if err := json.Unmarshal(content, &doc); err != nil {
		return nil, fmt.Errorf("%s: malformed JSON: %w", SettingsFile, err)
	}
	if doc.FDL == nil {
		return nil, fmt.Errorf("%s: missing required key \"fdl\"", SettingsFile)
	}
	var ver string
	if err := json.Unmarshal(*doc.FDL, &ver); err != nil {
		return nil, fmt.Errorf("%s: \"fdl\" is not a string", SettingsFile)
	}
	major, _, _ := strings.Cut(ver, ".")
	m, err := strconv.Atoi(major)
	if err != nil {
		return nil, fmt.Errorf("%s: spec version %q is not of the form MAJOR.MINOR", SettingsFile, ver)
	}
	if m != SupportedMajor {
		return nil, fmt.Errorf("%s: unknown major spec version %q (this mirror reads %d.x)", SettingsFile, ver, SupportedMajor)
	}
	s := &Settings{FDL: ver, ID: doc.ID, DataDir: DefaultDataDir, Raw: content}
	if doc.DataDir != nil {
		if err := CheckDataDir(*doc.DataDir); err != nil {
			return nil, fmt.Errorf("%s: %w", SettingsFile, err)
		}
		s.DataDir = *doc.DataDir
	}
	s.CatalogFormats = parseCatalogFormats(doc.CatalogFormats)
	s.Signers = parseSigners(doc.Signers)
	return s, nil
}

// CheckDataDir: a clean relative path ending in "/", not reaching into the
// places the layout reserves.
func CheckDataDir(d string) error {
	trimmed := strings.TrimSuffix(d, "/")
	if !strings.HasSuffix(d, "/") || trimmed == "" || strings.HasPrefix(d, "/") ||
		strings.Contains(d, "\\") || path.Clean(trimmed) != trimmed || trimmed == "." ||
		trimmed == ".." || strings.HasPrefix(trimmed, "../") {
		return fmt.Errorf("data_dir %q is not a clean relative path ending in \"/\" inside the root", d)
	}
	for _, seg := range strings.Split(trimmed, "/") {
		if seg == ".." || seg == "." {
			return fmt.Errorf("data_dir %q is not a clean relative path ending in \"/\" inside the root", d)
		}
	}
	for _, reserved := range []string{RefsDir, VersionsDir, ".fdl-mirror/"} {
		if strings.HasPrefix(d, reserved) {
			return fmt.Errorf("data_dir %q lies inside %s, which the layout reserves", d, reserved)
		}
	}
	return nil
}

// MainCatalog names a version's catalog among its files (name → size):
// ducklake.duckdb, or metadata.db where there is none, as fdl-cli 0.27
// and later write it; ducklake.duckdb when neither is there.
func MainCatalog(files map[string]int64) string {
	if _, ok := files[CatalogFile]; !ok {
		if _, ok := files[MetadataFile]; ok {
			return MetadataFile
		}
	}
	return CatalogFile
}

// AlternateCatalogs names a version's other catalogs among its files,
// sorted: every catalogs/<format>.duckdb, and metadata.db beside a
// ducklake.duckdb. Readers may attach any of them, so each is read and
// its data files are needed like the main catalog's.
func AlternateCatalogs(files map[string]int64) []string {
	main := MainCatalog(files)
	var out []string
	for f := range files {
		if f != main && (f == MetadataFile || strings.HasPrefix(f, CatalogsDir) && strings.HasSuffix(f, ".duckdb")) {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// CatalogFormat is one entry of catalog_formats: the name of the file it
// gives in a version's catalogs/ folder, and where the entry is the spec's
// form ({"ducklake": "1.0"}), the DuckLake version it names.
type CatalogFormat struct {
	Name     string // catalogs/<Name>.duckdb
	DuckLake string // "1.0"; "" for the other forms
}

// CatalogFiles names the alternate catalogs catalog_formats gives, relative
// to a version's folder, for a reader that cannot list to try: for the
// spec's form both catalogs/ducklake-<version>.duckdb and, since the spec
// page on versions that would say is not available to us,
// catalogs/<version>.duckdb. Sorted, without duplicates.
func (s *Settings) CatalogFiles() []string {
	seen := map[string]bool{}
	var out []string
	add := func(stem string) {
		if n := CatalogsDir + stem + ".duckdb"; backendSafeSegment(stem) && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, f := range s.CatalogFormats {
		add(f.Name)
		if f.DuckLake != "" {
			add(f.DuckLake)
		}
	}
	sort.Strings(out)
	return out
}

// catalog_formats may be the spec's list of objects keyed by "ducklake"
// ([{"ducklake": "1.1"}, {"ducklake": "1.0", "until": "2027-03-31"}]), a
// list of names, a list of objects with "format" (or "name"), or an object
// keyed by format; tolerate all of them. Entries whose name could not be
// one file name are dropped.
func parseCatalogFormats(raw json.RawMessage) []CatalogFormat {
	if len(raw) == 0 {
		return nil
	}
	var out []CatalogFormat
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		for _, item := range list {
			var s string
			if json.Unmarshal(item, &s) == nil {
				out = append(out, CatalogFormat{Name: s})
				continue
			}
			var obj struct {
				DuckLake *string `json:"ducklake"`
				Format   string  `json:"format"`
				Name     string  `json:"name"`
			}
			if json.Unmarshal(item, &obj) == nil {
				switch {
				case obj.DuckLake != nil:
					if *obj.DuckLake != "" {
						out = append(out, CatalogFormat{Name: "ducklake-" + *obj.DuckLake, DuckLake: *obj.DuckLake})
					}
				case obj.Format != "":
					out = append(out, CatalogFormat{Name: obj.Format})
				case obj.Name != "":
					out = append(out, CatalogFormat{Name: obj.Name})
				}
			}
		}
	} else {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) == nil {
			for k := range obj {
				out = append(out, CatalogFormat{Name: k})
			}
		}
	}
	clean := out[:0]
	for _, f := range out {
		if backendSafeSegment(f.Name) && (f.DuckLake == "" || backendSafeSegment(f.DuckLake)) {
			clean = append(clean, f)
		}
	}
	// A reader that cannot list asks for each name, in each version: a
	// list of thousands would be as many requests per version.
	if len(clean) > MaxCatalogFormats {
		clean = clean[:MaxCatalogFormats]
	}
	sort.Slice(clean, func(i, j int) bool { return clean[i].Name < clean[j].Name })
	return clean
}

func backendSafeSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\\\x00")
}

// signers may be one string of lines or a list of lines.
func parseSigners(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return nonEmptyLines(one)
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		var out []string
		for _, l := range list {
			out = append(out, nonEmptyLines(l)...)
		}
		return out
	}
	return nil
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// Record is version.json as this project reads it. Raw keeps the exact
// bytes: a mirror copies them and a signature covers them.
type Record struct {
	ID      string
	Parents []string
	SHA256  string
	// Author and Message are the record's "author" and "message" where
	// they are JSON strings, else "": text for people (notifications),
	// unbounded and unchecked; the record does not fail for them.
	Author, Message string
	Raw             []byte
}

var sha256Re = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ErrReplay is wrapped by ParseRecord's error for a record whose "id" is
// not its folder's name: a signed record copied under another version ID.
var ErrReplay = errors.New("a record of another version (replayed under this ID)")

// ParseRecord reads a version record and checks the fields this project
// relies on: parents are version IDs, sha256 is lowercase hex.
func ParseRecord(id string, content []byte) (*Record, error) {
	var doc struct {
		ID      *string         `json:"id"`
		Parents []string        `json:"parents"`
		SHA256  *string         `json:"sha256"`
		Author  json.RawMessage `json:"author"`
		Message json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(content, &doc); err != nil {
		return nil, fmt.Errorf("version %s: %s: malformed JSON: %w", id, RecordFile, err)
	}
	if doc.ID != nil && *doc.ID != id {
		return nil, fmt.Errorf("version %s: %s says \"id\": %q: %w", id, RecordFile, *doc.ID, ErrReplay)
	}
	for _, p := range doc.Parents {
		if err := CheckVersionID(p); err != nil {
			return nil, fmt.Errorf("version %s: %s: parent: %w", id, RecordFile, err)
		}
	}
	if doc.SHA256 == nil {
		return nil, fmt.Errorf("version %s: %s: no \"sha256\" of %s", id, RecordFile, CatalogFile)
	}
	if !sha256Re.MatchString(*doc.SHA256) {
		return nil, fmt.Errorf("version %s: %s: \"sha256\" %q is not 64 lowercase hex digits", id, RecordFile, *doc.SHA256)
	}
	return &Record{ID: id, Parents: doc.Parents, SHA256: *doc.SHA256, Author: jsonString(doc.Author), Message: jsonString(doc.Message), Raw: content}, nil
}

// jsonString is raw where it is a JSON string, else "".
func jsonString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
