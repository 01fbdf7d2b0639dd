package catalog

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Catalogs crafted as an attacker would: bytes of a generated catalog
// changed, and DuckDB's block checksums mended so that DuckDB reads the
// changed bytes as its own.

// DuckDB's file layout: a main header and two database headers of
// 4 KiB, then blocks of 256 KiB; each starts with the checksum of the
// rest of it.
const (
	duckHeaderSize = 4096
	duckBlockSize  = 256 << 10
	duckBlocksAt   = 3 * duckHeaderSize
)

// duckChecksum is DuckDB's checksum (src/common/checksum.cpp) of a
// buffer whose length is a multiple of 8, as every header and block is.
func duckChecksum(b []byte) uint64 {
	sum := uint64(5381)
	for i := 0; i+8 <= len(b); i += 8 {
		sum ^= binary.LittleEndian.Uint64(b[i:]) * 0xbf58476d1ce4e5b9
	}
	return sum
}

// mendChecksums sets the checksum of each database header and each block
// to its content's; a file too short for a header is left as it is.
func mendChecksums(b []byte) {
	for _, at := range []int{duckHeaderSize, 2 * duckHeaderSize} {
		if at+duckHeaderSize <= len(b) {
			binary.LittleEndian.PutUint64(b[at:], duckChecksum(b[at+8:at+duckHeaderSize]))
		}
	}
	for at := duckBlocksAt; at+duckBlockSize <= len(b); at += duckBlockSize {
		binary.LittleEndian.PutUint64(b[at:], duckChecksum(b[at+8:at+duckBlockSize]))
	}
}

// checksumsMatch says whether every header and block checksum of b
// holds: the mending above is DuckDB's own rule.
func checksumsMatch(b []byte) bool {
	c := bytes.Clone(b)
	mendChecksums(c)
	return bytes.Equal(b, c)
}

// mutate changes n bytes of a catalog's blocks, chosen by seed, and mends
// the checksums.
func mutate(b []byte, seed uint64, n int) []byte {
	c := bytes.Clone(b)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	blocks := (len(c) - duckBlocksAt) / duckBlockSize
	if blocks <= 0 {
		return c
	}
	for range n {
		at := duckBlocksAt + rng.IntN(blocks)*duckBlockSize + 8 + rng.IntN(duckBlockSize-8)
		c[at] = byte(rng.Uint32())
	}
	mendChecksums(c)
	return c
}

func TestDuckChecksumIsDuckDBs(t *testing.T) {
	b, err := os.ReadFile(generatedCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < duckBlocksAt+duckBlockSize || !checksumsMatch(b) {
		t.Fatalf("a catalog DuckDB wrote (%d bytes) does not have the checksums computed here", len(b))
	}
	b[duckBlocksAt+100] ^= 1
	if checksumsMatch(b) {
		t.Fatal("a changed block passes its checksum")
	}
}

// crashers are catalogs found by TestFindCrashingCatalogs that crash
// DuckDB in a reader, kept gzipped.
func crashers(t *testing.T) map[string][]byte {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("testdata", "crash", "*.duckdb.gz"))
	if len(files) == 0 {
		t.Fatal("no crashing catalogs in testdata/crash: FDL_FIND_CRASHERS=1 go test -run TestFindCrashingCatalogs finds some")
	}
	out := map[string][]byte{}
	for _, f := range files {
		out[filepath.Base(f)] = gunzipBytes(t, f)
	}
	return out
}

func gunzipBytes(t testing.TB, file string) []byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Each kept crasher crashes its reader, and only its reader: the catalog
// is refused with a ReaderError naming the signal, and this process goes
// on to read a good catalog with the same pool.
func TestACatalogThatCrashesDuckDBCostsOneRefusal(t *testing.T) {
	good := generatedCatalog(t)
	pool := newTestPool(t, Limits{})
	for name, b := range crashers(t) {
		if !checksumsMatch(b) {
			t.Errorf("%s: its checksums do not hold; DuckDB would refuse it before it crashed", name)
		}
		p := filepath.Join(t.TempDir(), "ducklake.duckdb")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, read := range []func() (*Catalog, error){
			func() (*Catalog, error) { return Read(context.Background(), p, catalogName, Limits{}) },
			func() (*Catalog, error) {
				return pool.Read(context.Background(), copyInto(t, p, pool.Dir()), catalogName)
			},
		} {
			c, err := read()
			var re *ReaderError
			if c != nil || !errors.As(err, &re) || re.Cause != CauseSignal || re.Catalog != catalogName {
				t.Errorf("%s: read as %v, %v; want a ReaderError of a crash", name, c, err)
			}
		}
		if c, err := pool.Read(context.Background(), copyInto(t, good, pool.Dir()), catalogName); err != nil || len(c.Files) == 0 {
			t.Fatalf("after %s crashed a reader, a good catalog: %v", name, err)
		}
	}
}

// TestFindCrashingCatalogs looks for catalogs that crash DuckDB, as the
// attacker of issue 25 did (7 in 400), and keeps them in testdata/crash.
// It runs only when asked: FDL_FIND_CRASHERS=<tries>.
func TestFindCrashingCatalogs(t *testing.T) {
	tries := 0
	fmt.Sscan(os.Getenv("FDL_FIND_CRASHERS"), &tries)
	if tries == 0 {
		t.Skip("FDL_FIND_CRASHERS=<tries> to look for catalogs that crash DuckDB")
	}
	b, err := os.ReadFile(generatedCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	found := 0
	for seed := range uint64(tries) {
		m := mutate(b, seed, 8)
		p := filepath.Join(dir, "c.duckdb")
		if err := os.WriteFile(p, m, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Read(context.Background(), p, catalogName, Limits{})
		var re *ReaderError
		if !errors.As(err, &re) {
			continue
		}
		t.Logf("seed %d: %v", seed, err)
		if re.Cause != CauseSignal || found >= 3 {
			continue
		}
		found++
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(m)
		zw.Close()
		os.MkdirAll(filepath.Join("testdata", "crash"), 0o755)
		name := filepath.Join("testdata", "crash", fmt.Sprintf("seed-%d.duckdb.gz", seed))
		if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("kept %s (%d bytes): %s", name, buf.Len(), strings.SplitN(err.Error(), "\n", 2)[0])
	}
}

// FuzzReadMutatedCatalog reads a generated catalog with bytes changed and
// DuckDB's block checksums mended, as an attacker would make it, through
// the confined reader: whatever the bytes do to DuckDB, Read returns a
// catalog whose every file passes the mirror's checks, or an error naming
// the catalog, short; this process never crashes.
//
//	go test -run '^$' -fuzz FuzzReadMutatedCatalog -fuzztime 5m ./internal/catalog/
func FuzzReadMutatedCatalog(f *testing.F) {
	for _, seed := range []uint64{0, 1, 70, 451} {
		f.Add(seed, uint8(8))
	}
	var base []byte
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		if base == nil {
			b, err := os.ReadFile(generatedCatalog(t))
			if err != nil {
				t.Fatal(err)
			}
			base = b
		}
		p := filepath.Join(t.TempDir(), "ducklake.duckdb")
		if err := os.WriteFile(p, mutate(base, seed, int(n%32)+1), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Read(context.Background(), p, catalogName, Limits{Timeout: 20 * time.Second})
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, catalogName) || strings.Contains(msg, p) || len(msg) > 2*maxMessage {
				t.Fatalf("a refusal that does not name the catalog, names the local copy or is %d bytes long: %.300s", len(msg), msg)
			}
			return
		}
		prev := ""
		for _, file := range c.Files {
			if err := checkFile(file, prev, 0); err != nil {
				t.Fatalf("a catalog read with a file the mirror refuses: %v", err)
			}
			prev = file.Path
		}
	})
}
