package generate

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Field IDs DuckLake gives the columns of a positional delete file (the
// reserved IDs of Iceberg's file_path and pos).
const (
	deleteFilePathFieldID = 2147483546
	deletePosFieldID      = 2147483545
)

// largeRowBytes is about what one row of a large file takes in Parquet: an
// 8-byte id, a 256-character name with its 4-byte length, an 8-byte value.
const largeRowBytes = 276

// parquetWriter writes data and delete files with DuckDB for one catalog's
// table, and (FastParquet) reuses the bytes of a few real files for the rest.
type parquetWriter struct {
	e         *engine
	seed      int64
	fast      bool
	templates map[int64][]*template // rows per file -> reusable files
}

// template is a real Parquet file whose bytes are reused under other names.
type template struct {
	bytes  []byte
	footer int64
	stats  []fileStat
}

// fastTemplates is how many distinct files FastParquet writes per row count
// before it starts reusing them.
const fastTemplates = 4

// writeDataFile writes a data file of rows rows for the catalog's table at
// path (a local file path) and returns what the catalog records of it.
// rowIDStart is the row ID of the first row: generated values follow it,
// so files of one table hold different rows.
func (w *parquetWriter) writeDataFile(ctx context.Context, c *catalog, path string, rowIDStart, rows int64) (*dataFile, error) {
	if w.fast {
		ts := w.templates[rows]
		if len(ts) >= fastTemplates {
			t := ts[int(rowIDStart/max(rows, 1))%len(ts)]
			if err := writeFileBytes(path, t.bytes); err != nil {
				return nil, err
			}
			return &dataFile{name: filepath.Base(path), records: rows, size: int64(len(t.bytes)), footer: t.footer, stats: t.stats}, nil
		}
	}
	var cols, ids []string
	for _, col := range c.columns {
		cols = append(cols, col.valueExpr(w.seed)+" AS "+sqlIdent(col.name))
		ids = append(ids, fmt.Sprintf("%s: %d", sqlString(col.name), col.id))
	}
	q := fmt.Sprintf("COPY (SELECT %s FROM range(%d, %d) t(rid)) TO %s (FORMAT parquet, FIELD_IDS {%s})",
		strings.Join(cols, ", "), rowIDStart, rowIDStart+rows, sqlString(path), strings.Join(ids, ", "))
	f, err := w.copyTo(ctx, c, q, path, rows)
	if err != nil {
		return nil, err
	}
	if w.fast {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("data file %s: %w", path, err)
		}
		if w.templates == nil {
			w.templates = map[int64][]*template{}
		}
		w.templates[rows] = append(w.templates[rows], &template{bytes: b, footer: f.footer, stats: f.stats})
	}
	return f, nil
}

// writeLargeFile writes a data file of about size bytes for the
// generator's own table (id, name, value): uncompressed, with a
// 256-character name per row that no encoding can shrink, so the size
// follows the row count.
func (w *parquetWriter) writeLargeFile(ctx context.Context, c *catalog, path string, rowIDStart, size int64) (*dataFile, error) {
	rows := max(size/largeRowBytes, 1)
	q := fmt.Sprintf(`COPY (SELECT rid::BIGINT AS "id", repeat(md5((rid + %[1]d)::VARCHAR), 8) AS "name",
		((hash(rid + %[1]d) %% 100000) / 100.0)::DOUBLE AS "value" FROM range(%[2]d, %[3]d) t(rid))
		TO %[4]s (FORMAT parquet, COMPRESSION uncompressed, FIELD_IDS {'id': 1, 'name': 2, 'value': 3})`,
		w.seed, rowIDStart, rowIDStart+rows, sqlString(path))
	return w.copyTo(ctx, c, q, path, rows)
}

// writeDeleteFile writes a positional delete file deleting every tenth row
// of a data file of records rows, naming the data file as DuckLake does
// (the catalog's data path and the file's path under it).
func (w *parquetWriter) writeDeleteFile(ctx context.Context, c *catalog, path string, target liveFile) (*dataFile, error) {
	const step = 10
	dataFilePath := c.dataPath + c.tableDir + target.name
	q := fmt.Sprintf("COPY (SELECT %s::VARCHAR AS file_path, pos::BIGINT AS pos FROM range(0, %d, %d) t(pos)) TO %s (FORMAT parquet, FIELD_IDS {'file_path': %d, 'pos': %d})",
		sqlString(dataFilePath), target.records, step, sqlString(path), deleteFilePathFieldID, deletePosFieldID)
	if err := w.e.exec(ctx, q); err != nil {
		return nil, fmt.Errorf("delete file %s: %w", path, err)
	}
	size, footer, err := parquetSizes(path)
	if err != nil {
		return nil, err
	}
	return &dataFile{name: filepath.Base(path), size: size, footer: footer, deleteCount: (target.records + step - 1) / step}, nil
}

// copyTo runs a COPY … TO path and reads back the file's size, footer
// length and per-column statistics from its Parquet metadata.
func (w *parquetWriter) copyTo(ctx context.Context, c *catalog, q, path string, rows int64) (*dataFile, error) {
	if err := w.e.exec(ctx, q); err != nil {
		return nil, fmt.Errorf("data file %s: %w", path, err)
	}
	size, footer, err := parquetSizes(path)
	if err != nil {
		return nil, err
	}
	f := &dataFile{name: filepath.Base(path), records: rows, size: size, footer: footer}
	for _, col := range c.columns {
		st := fileStat{columnID: col.id, isFloat: col.duckType == "FLOAT" || col.duckType == "DOUBLE"}
		err := w.e.conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT sum(total_compressed_size)::BIGINT, sum(num_values)::BIGINT,
			sum(stats_null_count)::BIGINT, min(TRY_CAST(stats_min_value AS %[1]s))::VARCHAR, max(TRY_CAST(stats_max_value AS %[1]s))::VARCHAR
			FROM parquet_metadata(?) WHERE path_in_schema = ?`, col.duckType), path, col.name).
			Scan(&st.sizeBytes, &st.valueCount, &st.nullCount, &st.min, &st.max)
		if err != nil {
			return nil, fmt.Errorf("data file %s: statistics of column %s: %w", path, col.name, err)
		}
		f.stats = append(f.stats, st)
	}
	return f, nil
}

// parquetSizes returns a Parquet file's size and its footer length: the
// little-endian uint32 before the trailing "PAR1".
func parquetSizes(path string) (size, footer int64, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("parquet file %s: %w", path, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("parquet file %s: %w", path, err)
	}
	if fi.Size() < 12 {
		return 0, 0, fmt.Errorf("parquet file %s: %d bytes is too short for Parquet", path, fi.Size())
	}
	var tail [8]byte
	if _, err := fh.ReadAt(tail[:], fi.Size()-8); err != nil {
		return 0, 0, fmt.Errorf("parquet file %s: read footer: %w", path, err)
	}
	if string(tail[4:]) != "PAR1" {
		return 0, 0, fmt.Errorf("parquet file %s: does not end in PAR1", path)
	}
	return fi.Size(), int64(binary.LittleEndian.Uint32(tail[:4])), nil
}

// ParquetFooterSize returns the footer length a DuckLake catalog records
// for a Parquet file: the little-endian uint32 before the trailing "PAR1".
func ParquetFooterSize(path string) (int64, error) {
	_, footer, err := parquetSizes(path)
	return footer, err
}

func writeFileBytes(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}
