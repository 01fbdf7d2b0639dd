package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The misbehaviours a test binary's reader takes on request: what a
// catalog that took DuckDB over could make it do. Set as a package
// variable so that it is in place before child.go's init starts a reader.
var _ = func() bool { testBehaviour = misbehave; return true }()

// nowhere is a pointer to nothing, for "segfault".
var nowhere *int

// sink keeps what "allocate" allocates reachable.
var sink [][]byte

func misbehave(kind string) error {
	what, arg, _ := strings.Cut(kind, ":")
	switch what {
	case "segfault":
		*nowhere = 1
	case "abort":
		syscall.Kill(os.Getpid(), syscall.SIGABRT)
		time.Sleep(time.Minute)
	case "spin":
		for i := 0; i < 4; i++ {
			go func() {
				//lint:ignore SA5002 the reader spins on purpose, until its CPU limit stops it
				for {
				}
			}()
		}
		//lint:ignore SA5002 the reader spins on purpose, until its CPU limit stops it
		for {
		}
	case "sleep":
		time.Sleep(time.Hour)
	case "allocate":
		// Untouched: the address space grows, the test machine's memory
		// does not.
		for {
			sink = append(sink, make([]byte, 256<<20))
		}
	case "open":
		b, err := os.ReadFile(arg)
		if err != nil {
			return err
		}
		return fmt.Errorf("read %s: %q", arg, b[:min(len(b), 16)])
	case "connect":
		c, err := net.Dial("tcp", arg)
		if err != nil {
			return err
		}
		c.Close()
		return errors.New("connected")
	case "exec":
		return syscall.Exec("/bin/sh", []string{"sh", "-c", "echo pwned"}, nil)
	case "lie":
		lie(arg)
		return errTestAnswered
	case "extensions":
		loaded, err := loadedExtensions()
		if err != nil {
			return err
		}
		return fmt.Errorf("loaded: %s", strings.Join(loaded, ","))
	}
	return nil
}

// loadedExtensions opens a DuckDB as a reader does and lists the linked
// extensions it has loaded, each known by a function only it registers.
// (duckdb_extensions() would list the extension folder, which neither the
// locked configuration nor a reader's Landlock lets it open.)
func loadedExtensions() ([]string, error) {
	ctx := context.Background()
	in, err := startDuckDB(ctx, Limits{}.WithDefaults(), "SET allowed_paths=[]")
	if err != nil {
		return nil, err
	}
	defer in.close()
	rows, err := in.conn.QueryContext(ctx, `SELECT DISTINCT CASE function_name
		WHEN 'sql_auto_complete' THEN 'autocomplete'
		WHEN 'arg_min' THEN 'core_functions'
		WHEN 'icu_sort_key' THEN 'icu'
		WHEN 'json_valid' THEN 'json'
		WHEN 'parquet_metadata' THEN 'parquet' END AS extension
		FROM duckdb_functions()
		WHERE function_name IN ('sql_auto_complete', 'arg_min', 'icu_sort_key', 'json_valid', 'parquet_metadata')
		ORDER BY extension`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var loaded []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		loaded = append(loaded, name)
	}
	return loaded, rows.Err()
}

// lie answers a request with frames no catalog could give: what a reader
// that a catalog took over could send.
func lie(kind string) {
	out := newFrameWriter(os.Stdout)
	meta := func(n uint64) {
		out.begin(frameMeta)
		out.str("0.3")
		out.str("/data/")
		out.u64(n)
		out.end()
	}
	file := func(path string, size int64) {
		out.begin(frameFile)
		out.str(path)
		out.u64(uint64(size))
		out.u64(math.MaxUint64) // footer -1
		out.u8(0)
		out.end()
	}
	end := func(n, total uint64) {
		out.begin(frameEnd)
		out.u64(n)
		out.u64(total)
		out.end()
	}
	switch kind {
	case "dotdot":
		meta(1)
		file("../../etc/passwd", 10)
		end(1, 10)
	case "order":
		meta(2)
		file("b.parquet", 10)
		file("a.parquet", 11)
		end(2, 21)
	case "twice":
		meta(3)
		file("a.parquet", 10)
		file("b.parquet", 5)
		file("a.parquet", 11)
		end(3, 26)
	case "long":
		meta(1)
		file(strings.Repeat("x", MaxPathBytes+1), 10)
		end(1, 10)
	case "count":
		meta(2)
		file("a.parquet", 10)
		end(1, 10)
	case "total":
		meta(1)
		file("a.parquet", 10)
		end(1, 11)
	case "size":
		meta(1)
		file("a.parquet", -5)
		end(1, 0)
	case "diff-count", "diff-same", "diff-short", "diff-list", "diff-kept", "diff-removed":
		// A difference whose counts do not add up (given a list of 8):
		// the child's files less those in the list are not the files
		// announced, more files in both than the child has, fewer files
		// than announced, a list of 9, entries of the list neither in
		// the child nor removed, a removed entry that does not come.
		// Counts: child, list, same, folded, removed, files.
		counts := map[string][6]uint64{"diff-count": {10, 8, 8, 0, 0, 1}, "diff-same": {10, 8, 11, 0, 0, 1}, "diff-short": {10, 8, 8, 0, 0, 2},
			"diff-list": {10, 9, 8, 0, 0, 2}, "diff-kept": {10, 8, 7, 0, 0, 3}, "diff-removed": {10, 8, 8, 0, 1, 2}}[kind]
		out.begin(frameDiffMeta)
		out.str("0.3")
		out.str("/data/")
		for _, n := range counts {
			out.u64(n)
		}
		out.end()
		file("a.parquet", 10)
		if kind != "diff-short" {
			file("b.parquet", 10)
			end(counts[5], 20)
		} else {
			end(1, 10)
		}
	case "limit":
		out.begin(frameRefusal)
		out.u8(refusalLimit)
		out.str("catalog_anything")
		out.str("no")
		out.end()
	case "huge-frame":
		os.Stdout.Write([]byte{0x7f, 0xff, 0xff, 0xff, frameMeta})
	case "garbage":
		os.Stdout.Write([]byte("pwned\n"))
	}
	out.flush()
}

// withKnobs changes how readers start for one test.
func withKnobs(t *testing.T, k readerKnobs) {
	t.Helper()
	old := knobs
	knobs = k
	t.Cleanup(func() { knobs = old })
}

// misbehavingRead asks a reader of a good catalog to misbehave first, as
// a catalog that took it over would, and returns what Read returns.
func misbehavingRead(t *testing.T, p, behaviour string, lim Limits) (*Catalog, error) {
	t.Helper()
	lim = lim.WithDefaults()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	proc, err := startReader(context.Background(), f, lim, 1)
	if err != nil {
		t.Fatal(err)
	}
	sorter := newFileSorter(t.TempDir(), catalogName, math.MaxInt64)
	defer sorter.close()
	c, err := proc.readCatalog(context.Background(), request{name: catalogName, lim: lim, test: behaviour}, sorter)
	if err != nil {
		return nil, err
	}
	proc.close()
	sorted, err := sorter.finish(*c)
	if err != nil {
		return nil, err
	}
	defer sorted.Close()
	return sorted.Catalog()
}

// requireBothLayers fails a test that is to show a layer at work on a
// machine that does not give it: this one's kernel has both.
func requireBothLayers(t *testing.T) {
	t.Helper()
	if l := ProbeSandbox(); len(l.Missing()) > 0 {
		t.Fatalf("this kernel gives a reader no %v; the sandbox tests need Landlock and seccomp", l.Missing())
	}
}

// Each misbehaviour of a reader is stopped by the layer meant for it, and
// its catalog refused with a ReaderError that says which.
func TestEachLayerStopsItsMisbehaviour(t *testing.T) {
	requireBothLayers(t)
	p := generatedCatalog(t)
	for _, tc := range []struct {
		behaviour string
		knobs     readerKnobs
		lim       Limits
		cause     string
		says      string
	}{
		{"segfault", readerKnobs{}, Limits{}, CauseSignal, "SIGSEGV"},
		{"abort", readerKnobs{}, Limits{}, CauseSignal, "SIGABRT"},
		{"spin", readerKnobs{cpuSeconds: 1, grace: time.Minute}, Limits{Timeout: time.Minute}, CauseCPU, "RLIMIT_CPU 1 s"},
		{"sleep", readerKnobs{grace: 100 * time.Millisecond}, Limits{Timeout: time.Second}, CauseTimeout, KeyTimeout},
		{"allocate", readerKnobs{}, Limits{}, CauseMemory, "RLIMIT_AS"},
		{"exec", readerKnobs{}, Limits{}, CauseSeccomp, "SIGSYS"},
	} {
		t.Run(tc.behaviour, func(t *testing.T) {
			withKnobs(t, tc.knobs)
			c, err := misbehavingRead(t, p, tc.behaviour, tc.lim)
			var re *ReaderError
			if c != nil || !errors.As(err, &re) {
				t.Fatalf("read as %v, %v; want a ReaderError", c, err)
			}
			if re.Cause != tc.cause || !strings.Contains(err.Error(), tc.says) || re.Catalog != catalogName {
				t.Errorf("refused with cause %q: %v; want cause %q saying %q", re.Cause, err, tc.cause, tc.says)
			}
		})
	}
}

// A reader's DuckDB loads core_functions alone of the extensions linked
// into the library (extensions_linux.go), where a DuckDB of the mirror's
// own process loads them all.
func TestAReadersDuckDBLoadsOnlyCoreFunctions(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("elsewhere a reader loads every extension")
	}
	_, err := misbehavingRead(t, generatedCatalog(t), "extensions", Limits{})
	if err == nil || !strings.HasSuffix(err.Error(), "test behaviour extensions: loaded: core_functions") {
		t.Fatalf("a reader's extensions: %v; want core_functions alone", err)
	}
	here, err := loadedExtensions()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"autocomplete", "core_functions", "icu", "json", "parquet"}; !slices.Equal(here, want) {
		t.Fatalf("this process's DuckDB loaded %v; want every extension linked in, %v", here, want)
	}
}

// A reader opens no file but its catalog: Landlock refuses /etc/passwd.
// Without Landlock the same reader reads it, which shows it is Landlock
// that stopped it.
func TestLandlockKeepsAReaderFromOtherFiles(t *testing.T) {
	requireBothLayers(t)
	p := generatedCatalog(t)
	c, err := misbehavingRead(t, p, "open:/etc/passwd", Limits{})
	if c != nil || err == nil || !strings.Contains(err.Error(), "permission denied") || strings.Contains(err.Error(), "root:") {
		t.Fatalf("a confined reader opening /etc/passwd: %v, %v; want it refused with permission denied", c, err)
	}
	withKnobs(t, readerKnobs{noLandlock: true})
	_, err = misbehavingRead(t, p, "open:/etc/passwd", Limits{})
	if err == nil || !strings.Contains(err.Error(), "root:") {
		t.Fatalf("without Landlock the reader should have read /etc/passwd: %v", err)
	}
}

// A reader makes no connection: seccomp kills it at socket(); without
// seccomp Landlock refuses the connect; without either it connects,
// which shows the listener would have seen it.
func TestAReaderConnectsNowhere(t *testing.T) {
	requireBothLayers(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	p := generatedCatalog(t)
	connect := "connect:" + ln.Addr().String()
	for _, tc := range []struct {
		name    string
		knobs   readerKnobs
		cause   string // of the ReaderError; "" for a refusal
		says    string
		connect bool
	}{
		{"both layers", readerKnobs{}, CauseSeccomp, "SIGSYS", false},
		{"Landlock alone", readerKnobs{noSeccomp: true}, "", "permission denied", false},
		{"neither", readerKnobs{noSeccomp: true, noLandlock: true}, "", "connected", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withKnobs(t, tc.knobs)
			_, err := misbehavingRead(t, p, connect, Limits{})
			var re *ReaderError
			if err == nil || !strings.Contains(err.Error(), tc.says) || (tc.cause != "") != errors.As(err, &re) || re != nil && re.Cause != tc.cause {
				t.Fatalf("%v; want cause %q saying %q", err, tc.cause, tc.says)
			}
			select {
			case <-accepted:
				if !tc.connect {
					t.Errorf("the listener saw a connection")
				}
			case <-time.After(200 * time.Millisecond):
				if tc.connect {
					t.Errorf("the unconfined reader's connection never came")
				}
			}
		})
	}
}

// What a reader says is checked again: a reader taken over by its catalog
// that lies about the files (a path leaving the data folder, out of
// order, twice, too long; counts or totals that do not add up; a negative
// size; a limit that does not exist; a frame too large; bytes that are no
// frame) has its catalog refused as a protocol failure, and nothing of
// what it said is returned.
func TestTheMirrorChecksWhatAReaderSays(t *testing.T) {
	p := generatedCatalog(t)
	for _, tc := range []struct{ lie, says string }{
		{"dotdot", "not a clean relative path"},
		{"long", "more than 1024"},
		{"count", "announced"},
		{"total", "bytes came"},
		{"size", "of size -5"},
		{"limit", "catalog_anything"},
		{"huge-frame", "length 2147483647"},
		{"garbage", "length"},
	} {
		t.Run(tc.lie, func(t *testing.T) {
			c, err := misbehavingRead(t, p, "lie:"+tc.lie, Limits{})
			var re *ReaderError
			if c != nil || !errors.As(err, &re) || re.Cause != CauseProtocol || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("read as %v, %v; want a protocol failure saying %q", c, err, tc.says)
			}
		})
	}
}

// A reader without a layer still runs (rlimits, empty environment, a
// process apart), says which layer it lacks, and is refused where both are
// required.
func TestRequireSandboxRefusesAReaderWithoutALayer(t *testing.T) {
	requireBothLayers(t)
	p := generatedCatalog(t)
	if _, err := Read(context.Background(), p, catalogName, Limits{RequireSandbox: true}); err != nil {
		t.Fatalf("with both layers: %v", err)
	}
	if l, ok := ObservedLayers(); !ok || !l.Landlock() || !l.Seccomp {
		t.Fatalf("the reader reported layers %+v", l)
	}
	for _, k := range []readerKnobs{{noLandlock: true}, {noSeccomp: true}} {
		withKnobs(t, k)
		want := "landlock"
		if k.noSeccomp {
			want = "seccomp"
		}
		if c, err := Read(context.Background(), p, catalogName, Limits{}); err != nil || len(c.Files) == 0 {
			t.Fatalf("without %s, not required: %v", want, err)
		}
		if l, _ := ObservedLayers(); len(l.Missing()) != 1 || l.Missing()[0] != want {
			t.Errorf("without %s the reader reported %+v", want, l)
		}
		c, err := Read(context.Background(), p, catalogName, Limits{RequireSandbox: true})
		var re *ReaderError
		if c != nil || !errors.As(err, &re) || re.Cause != CauseNoSandbox || !strings.Contains(err.Error(), want) || re.Catalog != catalogName {
			t.Errorf("without %s, required: %v, %v", want, c, err)
		}
	}
}

// A reader's environment is empty: no credential of the mirror's reaches
// it.
func TestAReaderHasAnEmptyEnvironment(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak")
	p := generatedCatalog(t)
	_, err := misbehavingRead(t, p, "open:/proc/self/environ", Limits{})
	// Landlock keeps it from its own environ file, too; without it the
	if err == nil || strings.Contains(err.Error(), "do-not-leak") {
		t.Fatalf("%v", err)
	}
	// file holds readerEnv alone: GOMAXPROCS in a plain build, and in a
	// race build (the tests) the race runtime's option too.
	environ := strings.Join(readerEnv, "\x00") + "\x00"
	want := fmt.Sprintf("read /proc/self/environ: %q", environ[:min(len(environ), 16)])
	withKnobs(t, readerKnobs{noLandlock: true})
	_, err = misbehavingRead(t, p, "open:/proc/self/environ", Limits{})
	if err == nil || strings.Contains(err.Error(), "do-not-leak") || !strings.Contains(err.Error(), want) {
		t.Fatalf("the reader's environment: %v", err)
	}
}
