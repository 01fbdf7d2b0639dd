package sync

import (
	"context"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/fdl-mirror/fdl-mirror/internal/sink"
	"github.com/fdl-mirror/fdl-mirror/internal/source"
)

// transfer takes the source's streams to the sink's writes: one file's
// copy and its retries (copy.go), a catalog's data files a batch at a
// time with their look-ups, read-ahead and barriers, and the one copy of
// a data file across the versions of a run (databatch.go). Its knobs are
// here: how many copies at once (Concurrency), the batch (dataBatch), the
// bounds of stats and listings (maxStatChecks, sourcePassFiles, listPart),
// read-ahead (readAheadFile, readAheadBatch), retries (CopyAttempts).
// What it copies is decided before: it judges only sizes, as it goes.
type transfer struct {
	src  *source.Source
	sink *sink.Sink
	log  *zap.Logger

	concurrency int           // files copied at once, and goroutines per batch step
	copySlots   chan struct{} // file copies across all versions
	spool       source.Spool  // where a stream that must be read twice waits
	dryRun      bool          // copy nothing: plan each file
	plan        func(string)  // told of each file a dry run would copy

	mu    sync.Mutex
	calls dataCalls // one copy per data file across versions (databatch.go)
}

func newTransfer(src *source.Source, dst *sink.Sink, opts Options, plan func(string)) *transfer {
	return &transfer{
		src: src, sink: dst, log: opts.Logger,
		concurrency: opts.Concurrency, copySlots: make(chan struct{}, opts.Concurrency),
		spool:  source.Spool{Dir: opts.TempDir, MaxSize: opts.CatalogLimits.MaxSize},
		dryRun: opts.DryRun, plan: plan,
	}
}

// each calls fn for 0 to n-1 from at most Concurrency goroutines, each
// taking the next k when done with its last: a catalog may list millions
// of files, and a goroutine per file (a stack each, grown again for each,
// and a semaphore's channel between them) was a fifth of the CPU of a
// dry run of 10,000,000 rows.
func (t *transfer) each(n int, fn func(k int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(t.concurrency, n) {
		wg.Go(func() {
			for k := int(next.Add(1)) - 1; k < n; k = int(next.Add(1)) - 1 {
				fn(k)
			}
		})
	}
	wg.Wait()
}

// ensureDataFile copies one data file unless the sink has it.
func (t *transfer) ensureDataFile(ctx context.Context, name string, size int64, byStat bool) error {
	need, err := t.needsCopy(ctx, name, size, byStat, sinkFile{})
	if err != nil || !need {
		return err
	}
	if err := t.sink.Durability().RecordUnsynced(ctx, []string{name}, []int64{size}); err != nil {
		return err
	}
	err = t.copyFile(t.sink.Durability().WithoutSync(ctx), name, size)
	t.sink.Durability().WroteUnsynced(name)
	return err
}

// needsCopy says whether the sink lacks a data file (or holds one an
// interrupted run wrote with no barrier behind it), and refuses one of
// another size than recorded: data files are immutable. byStat: the
// caller checks few files (see sink.DataFile). found is the sink's
// answer where it was asked already in path order (lookUp).
func (t *transfer) needsCopy(ctx context.Context, name string, size int64, byStat bool, found sinkFile) (bool, error) {
	if t.sink.Durability().IsDistrusted(name) {
		return true, nil
	}
	have, known, err := found.size, found.ok, found.err
	if !found.asked {
		have, known, err = t.sink.DataFile(ctx, t.src.Settings().DataDir, name, !byStat)
	}
	if err != nil {
		return false, err
	}
	if known {
		if size >= 0 && have != size {
			return false, refuse(ReasonSizeMismatch, "", name, "data file %s exists in the sink with %d bytes, the catalog records %d; immutable, left alone", name, have, size)
		}
		return false, nil
	}
	return true, nil
}
