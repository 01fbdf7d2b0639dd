package catalog

import (
	"context"
	"strings"
	"testing"
)

// Each thing a row is compared on, changed in the child's row (or in
// what its path is resolved with), makes it another file than the list's:
// the difference stays the set difference of the two catalogs read whole
// (both ways: the list's entry comes out as removed), and the changed row
// comes out. (Written for the pairing by position of two catalogs, which
// went with the parent's catalog: kept for the cases.)
func TestDiffPairsOnlyRowsThatResolveAsTheParents(t *testing.T) {
	cats := chain(t, "0.3")
	parent, child := cats[2], cats[3]
	w := wholeReads{}
	const old = "data_file_id = 2" // a row of the first version, kept by both
	// A second table, seven/, with a file at the first snapshot; and the
	// table's path moved to moved/ at snapshot 9, with a file there: so
	// that a row given another table or snapshot meets, in both catalogs,
	// a table and snapshot that resolve alike, but not as its partner's.
	seven := []string{
		"INSERT INTO ducklake_table SELECT * REPLACE (7 AS table_id, 'seven/' AS path, 'seven' AS table_name) FROM ducklake_table",
		"INSERT INTO ducklake_data_file SELECT * REPLACE (99 AS data_file_id, 7 AS table_id) FROM ducklake_data_file WHERE data_file_id = 3",
	}
	moved := []string{
		"UPDATE ducklake_table SET end_snapshot = 9",
		"INSERT INTO ducklake_table SELECT * REPLACE (9 AS begin_snapshot, NULL AS end_snapshot, 'moved/' AS path) FROM ducklake_table",
		"INSERT INTO ducklake_data_file SELECT * REPLACE (98 AS data_file_id, 9 AS begin_snapshot) FROM ducklake_data_file WHERE data_file_id = 3",
	}
	absolute := []string{"UPDATE ducklake_data_file SET path = '/var/lib/publisher/data/main/events/' || path, path_is_relative = false WHERE " + old}
	for _, tc := range []struct {
		name  string
		both  []string // made to the parent and the child
		stmts []string // then to the child
		more  int      // files beyond the unchanged child's difference
	}{
		{"its path", nil, []string{"UPDATE ducklake_data_file SET path = 'renamed.parquet' WHERE " + old}, 1},
		{"its size", nil, []string{"UPDATE ducklake_data_file SET file_size_bytes = file_size_bytes + 1 WHERE " + old}, 1},
		{"its footer size", nil, []string{"UPDATE ducklake_data_file SET footer_size = NULL WHERE " + old}, 1},
		{"its format", nil, []string{"UPDATE ducklake_data_file SET file_format = 'puffin' WHERE " + old}, 1},
		{"its table", seven, []string{"UPDATE ducklake_data_file SET table_id = 7 WHERE " + old}, 1},
		{"its snapshot", moved, []string{"UPDATE ducklake_data_file SET begin_snapshot = 9 WHERE " + old}, 1},
		{"the table's path from a snapshot on", nil, []string{
			"UPDATE ducklake_table SET end_snapshot = 3",
			"INSERT INTO ducklake_table SELECT * REPLACE (3 AS begin_snapshot, NULL AS end_snapshot, 'moved/' AS path) FROM ducklake_table"}, 5},
		{"the schema's path", nil, []string{"UPDATE ducklake_schema SET path = 'other/'"}, 14},
		{"relative to absolute, the same file", nil, absolute, 0},
		{"absolute to relative, the same path", absolute, []string{
			"UPDATE ducklake_data_file SET path = substr(path, length('/var/lib/publisher/data/main/events/') + 1), path_is_relative = true WHERE " + old}, 0},
		{"the data path, rows relative", nil, []string{"UPDATE ducklake_metadata SET value = '/srv/elsewhere/' WHERE key = 'data_path'"}, 0},
		{"a row taken out before it", nil, []string{"DELETE FROM ducklake_data_file WHERE data_file_id = 0"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := parent, child
			if tc.both != nil {
				p, c = changed(t, parent, tc.both...), changed(t, child, tc.both...)
			}
			b := w.checkDiff(t, c, p)
			d := w.checkDiff(t, changed(t, c, tc.stmts...), p)
			if len(d.Files) != len(b.Files)+tc.more {
				t.Errorf("%d files in the difference, want %d: %v", len(d.Files), len(b.Files)+tc.more, d.Files)
			}
		})
	}
}

// A row stored as a parent stored it is still refused where read refuses
// it: nothing of a parent is trusted to have passed. Each case is a child
// so made, against the list of its unchanged parent.
func TestDiffRefusesAPairedRowReadRefuses(t *testing.T) {
	cats := chain(t, "0.3")
	parent := cats[2]
	const old = "data_file_id = 2"
	for _, tc := range []struct {
		name  string
		stmts []string
		says  string
	}{
		{"a table path of 2000 bytes", []string{"UPDATE ducklake_table SET path = repeat('t', 2000) || '/'"}, "longer than 1024 bytes"},
		{"a table path of 1000 bytes", []string{"UPDATE ducklake_table SET path = repeat('t', 1000) || '/'"}, "longer than 1024 bytes"},
		{"an empty path", []string{"UPDATE ducklake_data_file SET path = '' WHERE " + old}, "without a path"},
		{"an absolute path outside the data path", []string{"UPDATE ducklake_data_file SET path = '/etc/passwd', path_is_relative = false WHERE " + old}, "outside the catalog's data path"},
		{"an absolute path of 2000 bytes", []string{"UPDATE ducklake_data_file SET path = '/var/lib/publisher/data/' || repeat('a', 2000), path_is_relative = false WHERE " + old}, "longer than 1024 bytes"},
		{"a schema path outside the data path", []string{"UPDATE ducklake_schema SET path = '/etc/', path_is_relative = false"}, "outside the catalog's data path"},
		// The parent's absolute row made relative in the child, its path
		// as stored: joined to its base, an empty segment.
		{"an absolute path made relative", []string{"UPDATE ducklake_data_file SET path = '/var/lib/publisher/data/main/events/' || path, path_is_relative = false WHERE " + old,
			"UPDATE ducklake_data_file SET path_is_relative = true WHERE " + old}, "not a clean relative path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hostile := changed(t, parent, tc.stmts...)
			if _, err := Read(context.Background(), hostile, catalogName, Limits{}); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Read: %v; want a refusal saying %q", err, tc.says)
			}
			d, err := Diff(context.Background(), hostile, catalogName, (wholeReads{}).list(t, parent), Limits{}, nil)
			if d != nil || err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), catalogName) {
				t.Fatalf("Diff: %v, %v; want a refusal of %s saying %q", d, err, catalogName, tc.says)
			}
		})
	}
}
