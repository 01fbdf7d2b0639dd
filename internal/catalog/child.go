package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// readerCommand is the hidden first argument that makes this binary a
// catalog reader (see reader.go) instead of whatever its main would run.
//
// The check is in this package's init, not in main: every binary that
// links the package (the reader binary, fdl-mirror, and each test binary
// of a package that reads catalogs) can then be started as a reader
// (program.go), with nothing for a main or a TestMain to remember. A
// package's init runs after those of the packages it imports and before
// any that import it, so the reader starts with DuckDB and SQLite
// registered and little else done; in fdl-mirror's binary that is still
// most of its packages' (gRPC, OpenTelemetry, the stores' SDKs), which
// is why the reader binary links this package and no other of the
// mirror's.
const readerCommand = "__fdl-mirror-catalog-reader"

func init() {
	if len(os.Args) >= 2 && os.Args[1] == readerCommand {
		os.Exit(ReaderMain(os.Args[1:]))
	}
}

// ReaderMain is the reader binary's main (cmd/fdl-mirror-catalog-
// reader), given os.Args[1:]: the reader argument and a reader's
// arguments. This package's init has called it already where the
// arguments are a reader's; a main gets here when the binary was
// started otherwise, by hand.
func ReaderMain(args []string) int {
	if len(args) == 0 || args[0] != readerCommand {
		fmt.Fprintf(os.Stderr, "%s: fdl-mirror starts this program to read one catalog; it has nothing to do by hand\n", ReaderProgram)
		return exitUsage
	}
	return readerMain(args[1:])
}

// readerRoot is the reader's only file: descriptor 3, the catalog or the
// pool's folder the mirror opened for it. DuckDB and SQLite open files by
// name: the reader reads this link for the file's, which Landlock lets it
// open because it is the descriptor's file.
const readerRoot = "/proc/self/fd/3"

// Exit codes of a reader, besides 0 (the mirror closed the pipe) and
// the Go runtime's 2 (a crash).
const (
	exitUsage    = 70 // bad arguments: a mirror of another build?
	exitSandbox  = 71 // an rlimit or no_new_privs could not be set
	exitProtocol = 72 // the mirror sent something this reader does not speak
)

// testBehaviour, set by this package's tests only, makes a reader
// misbehave on request (child_test.go): a production binary has none, and
// refuses a request that asks for one. An error it returns is the
// reader's refusal.
var testBehaviour func(kind string) error

// testMarker, set by this package's tests only, is shown the data path
// of each catalog as the reader reads it: a test's catalog names there
// the attack its reader makes (attack_test.go), as a catalog that took
// DuckDB over would make it. An error is the reader's refusal.
var testMarker func(dataPath string) error

// testLie, set by a test's attack only, makes the reader leave every
// file out of the catalogs it reads after: what a reader taken over by
// one catalog could do to the next it read.
var testLie bool

// testLieDiff, set by a test's attack only, makes the reader leave every
// new file out of the difference it answers: what a reader taken over by
// a catalog it opened for that difference could do.
var testLieDiff bool

// errTestAnswered is a test behaviour that wrote its own answer.
var errTestAnswered = errors.New("answered by the test behaviour")

// readerArgs are the reader's arguments: its limits and the layers to
// apply (all, unless the mirror says a layer is off).
type readerArgs struct {
	addressSpace uint64 // RLIMIT_AS, bytes
	cpuSeconds   uint64 // RLIMIT_CPU soft limit; SIGKILL one second later
	landlockABI  int    // the ruleset's ABI (maxLandlockABI); 0: no Landlock
	noSeccomp    bool
	keepFDs      bool // tests only: inherited descriptors left open
	keepCaps     bool // tests only: capabilities left as they are
	// The limits of its catalogs' DuckDB, which it starts before its
	// request comes, and how many catalogs it reads (0: unsaid).
	memoryLimit int64
	threads     int
	reads       int
	nproc       uint64 // RLIMIT_NPROC as the mirror counted it; 0: the reader counts
}

func (a readerArgs) argv() []string {
	v := []string{readerCommand, "v" + strconv.Itoa(protocolVersion),
		"as=" + strconv.FormatUint(a.addressSpace, 10), "cpu=" + strconv.FormatUint(a.cpuSeconds, 10)}
	v = append(v, "landlock="+strconv.Itoa(a.landlockABI))
	if a.keepFDs {
		v = append(v, "fds=keep")
	}
	if a.keepCaps {
		v = append(v, "caps=keep")
	}
	if a.noSeccomp {
		v = append(v, "seccomp=off")
	}
	if a.memoryLimit > 0 && a.threads > 0 {
		v = append(v, "mem="+strconv.FormatInt(a.memoryLimit, 10), "threads="+strconv.Itoa(a.threads))
	}
	if a.reads > 0 {
		v = append(v, "reads="+strconv.Itoa(a.reads))
	}
	if a.nproc > 0 {
		v = append(v, "nproc="+strconv.FormatUint(a.nproc, 10))
	}
	return v
}

func parseReaderArgs(args []string) (readerArgs, error) {
	var a readerArgs
	if len(args) == 0 || args[0] != "v"+strconv.Itoa(protocolVersion) {
		return a, fmt.Errorf("reader protocol %q, this binary speaks v%d", args, protocolVersion)
	}
	for _, arg := range args[1:] {
		k, v, _ := strings.Cut(arg, "=")
		var err error
		switch k {
		case "as":
			a.addressSpace, err = strconv.ParseUint(v, 10, 64)
		case "cpu":
			a.cpuSeconds, err = strconv.ParseUint(v, 10, 64)
		case "landlock":
			if a.landlockABI, err = strconv.Atoi(v); err == nil && (a.landlockABI < 0 || a.landlockABI > maxLandlockABI) {
				err = errors.New("no such ABI")
			}
		case "fds":
			a.keepFDs = v == "keep"
		case "caps":
			a.keepCaps = v == "keep"
		case "seccomp":
			a.noSeccomp = v == "off"
		case "mem":
			a.memoryLimit, err = strconv.ParseInt(v, 10, 64)
		case "threads":
			a.threads, err = strconv.Atoi(v)
		case "reads":
			a.reads, err = strconv.Atoi(v)
		case "nproc":
			a.nproc, err = strconv.ParseUint(v, 10, 64)
		default:
			err = errors.New("unknown")
		}
		if err != nil {
			return a, fmt.Errorf("argument %q: %v", arg, err)
		}
	}
	if a.addressSpace == 0 || a.cpuSeconds == 0 {
		return a, errors.New("missing limits")
	}
	return a, nil
}

// readerMain is a reader's whole life: confined before it reads a byte of
// a catalog (rlimits, Landlock, seccomp), it says hello with the layers it
// got, then answers requests until the mirror closes its stdin.
func readerMain(args []string) int {
	a, err := parseReaderArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "catalog reader: %v\n", err)
		return exitUsage
	}
	// DuckDB resolves the name of descriptor 3 to the file's own, and
	// its allowed_paths must name that one.
	root, err := os.Readlink(readerRoot)
	if err != nil || !strings.HasPrefix(root, "/") {
		fmt.Fprintf(os.Stderr, "catalog reader: descriptor 3: %v\n", err)
		return exitUsage
	}
	layers, err := confine(a)
	if err != nil {
		fmt.Fprintf(os.Stderr, "catalog reader: %v\n", err)
		return exitSandbox
	}
	readerOnlyCoreFunctions()
	out := newFrameWriter(os.Stdout)
	out.begin(frameHello)
	out.u8(protocolVersion)
	out.u8(byte(layers.LandlockABI))
	if layers.Seccomp {
		out.u8(1)
	} else {
		out.u8(0)
	}
	if err := out.end(); err != nil || out.flush() != nil {
		return exitProtocol
	}
	in := newFrameReader(os.Stdin)
	pool := aheadPool(a, root)
	for {
		typ, err := in.next()
		if errors.Is(err, io.EOF) {
			return 0
		}
		if err != nil || typ != frameRequest && typ != frameDiff {
			fmt.Fprintf(os.Stderr, "catalog reader: reading a request: %v (frame %q)\n", err, typ)
			return exitProtocol
		}
		q, err := parseRequest(in, typ)
		if err != nil {
			fmt.Fprintf(os.Stderr, "catalog reader: %v\n", err)
			return exitProtocol
		}
		if q.test != "" {
			if testBehaviour == nil {
				fmt.Fprintf(os.Stderr, "catalog reader: test behaviour %q asked of a binary without them\n", q.test)
				return exitProtocol
			}
			if err := testBehaviour(q.test); errors.Is(err, errTestAnswered) {
				continue
			} else if err != nil {
				if err := answer(out, fmt.Errorf("catalog %s: test behaviour %s: %v", q.name, q.test, err)); err != nil {
					return exitProtocol
				}
				continue
			}
		}
		if q.diff {
			// The catalog and the parent's list, files of the folder.
			if err := answerDifference(out, root+"/"+q.file, root+"/"+q.list, q, pool); err != nil {
				fmt.Fprintf(os.Stderr, "catalog reader: answering: %v\n", err)
				return exitProtocol
			}
			continue
		}
		w := &frameSink{out: out}
		file := root
		if q.file != "" {
			file = root + "/" + q.file
		}
		if pool == nil {
			pool = &dbPool{dir: root, lim: q.lim.WithDefaults(), size: 1}
		}
		pool.relimit(q.lim)
		err = readRows(context.Background(), file, q.name, q.lim, pool, w)
		if err == nil {
			err = w.end()
		} else if !errors.As(err, new(errAnswer)) {
			// Before the meta frame or among the files: the mirror
			// takes a refusal at either.
			err = answer(out, err)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "catalog reader: answering: %v\n", err)
			return exitProtocol
		}
	}
}

// aheadPool is the DuckDB of a reader whose limits its arguments say,
// started now, before its request comes: the reader is confined already,
// and has read no byte of a catalog. A reader of a folder (Pool) may open
// the files in it; a reader of one catalog, that file (and its WAL name,
// which DuckDB probes). nil where the arguments say no limits.
func aheadPool(a readerArgs, root string) *dbPool {
	if a.memoryLimit <= 0 || a.threads <= 0 {
		return nil
	}
	p := &dbPool{dir: root, lim: Limits{MemoryLimit: a.memoryLimit, Threads: a.threads}.WithDefaults(), size: 1, oneShot: a.reads == 1}
	if fi, err := os.Stat(root); err == nil && !fi.IsDir() {
		p.allow = "SET allowed_paths=[" + sqlString(root) + ", " + sqlString(root+".wal") + "]"
	}
	p.startAhead()
	return p
}

// parseRequest reads a request frame; a file name that is not a plain
// name in the root folder is refused (the mirror names its own fetches).
func parseRequest(in *frameReader, typ byte) (request, error) {
	var q request
	if v := in.u8(); v != protocolVersion {
		return q, fmt.Errorf("request of protocol %d, this reader speaks %d", v, protocolVersion)
	}
	q.name = in.str()
	q.file = in.str()
	if q.diff = typ == frameDiff; q.diff {
		q.list = in.str()
		q.parentRows = int64(in.u64())
	}
	q.lim.MaxFiles = int64(in.u64())
	q.lim.Timeout = time.Duration(in.u64()) * time.Millisecond
	q.lim.MemoryLimit = int64(in.u64())
	q.lim.Threads = int(in.u32())
	q.test = in.str()
	if err := in.done(); err != nil {
		return q, err
	}
	for _, f := range []string{q.file, q.list} {
		if f != "" && (strings.ContainsAny(f, "/\x00") || f == "." || f == "..") {
			return q, fmt.Errorf("request names %q, not a file of the folder", f)
		}
	}
	if q.diff && (q.file == "" || q.list == "" || q.file == q.list) {
		return q, fmt.Errorf("a difference of catalog %q and list %q: two files of the folder are due", q.file, q.list)
	}
	if q.parentRows < 0 {
		return q, fmt.Errorf("a difference against a list of %d entries", q.parentRows)
	}
	return q, nil
}

// answer writes the refusal of a catalog.
func answer(out *frameWriter, err error) error {
	out.begin(frameRefusal)
	var le *LimitError
	var lr listRefusal
	if errors.As(err, &le) {
		out.u8(refusalLimit)
		out.str(le.Key)
		out.str(truncate(le.Detail, maxMessage))
	} else if errors.As(err, &lr) {
		out.u8(refusalList)
		out.str("")
		out.str(truncate(lr.Error(), maxMessage))
	} else {
		out.u8(refusalPlain)
		out.str("")
		out.str(truncate(err.Error(), maxMessage))
	}
	if err := out.end(); err != nil {
		return err
	}
	return out.flush()
}

// frameSink writes a catalog's answer as it is read: the meta frame with
// the count of file rows, a file frame per row, the end frame.
type frameSink struct {
	out   *frameWriter
	n     uint64
	total uint64
	lie   bool // tests only (testLie)
}

func (w *frameSink) meta(c *Catalog, rows int64) error {
	if testMarker != nil {
		if testLie {
			w.lie, rows = true, 0
		}
		if err := testMarker(c.DataPath); err != nil {
			return err
		}
	}
	w.out.begin(frameMeta)
	w.out.str(truncate(c.DuckLakeVersion, 256))
	w.out.str(c.DataPath) // bounded by the read (maxDataPath)
	w.out.u64(uint64(rows))
	return w.out.end()
}

func (w *frameSink) file(f File) error {
	if w.lie {
		return nil
	}
	if err := writeFile(w.out, f); err != nil {
		return err
	}
	w.n++
	if f.Size > 0 {
		w.total += uint64(f.Size)
	}
	return nil
}

func (w *frameSink) end() error {
	w.out.begin(frameEnd)
	w.out.u64(w.n)
	w.out.u64(w.total)
	if err := w.out.end(); err != nil {
		return err
	}
	return w.out.flush()
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}
