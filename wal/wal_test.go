package wal

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/queenmq/queen-go/internal/binenc"
	"github.com/queenmq/queen-go/internal/logbuf"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// tinySegment forces the log to roll a new segment every few records.
const tinySegment = 256

// testAllPermutations runs fn as parallel subtests across the option
// matrix {default segment size, tiny segments} x {NoSync false, true} x
// {preallocated segments, appended ones} (NATS
// testFileStoreAllPermutations).
func testAllPermutations(t *testing.T, fn func(t *testing.T, opts Options)) {
	t.Helper()
	for _, seg := range []struct {
		name string
		size int
	}{
		{"DefaultSegment", 0},
		{"TinySegment", tinySegment},
	} {
		for _, noSync := range []bool{false, true} {
			for _, noPrealloc := range []bool{false, true} {
				opts := Options{SegmentSize: seg.size, NoSync: noSync, NoPreallocate: noPrealloc, Logger: discardLogger()}
				t.Run(fmt.Sprintf("%s/NoSync=%t/NoPreallocate=%t", seg.name, noSync, noPrealloc), func(t *testing.T) {
					t.Parallel()
					fn(t, opts)
				})
			}
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

type testBundle struct {
	dir  string
	log  *Log
	opts Options
}

// setup opens a fresh log in a temp dir; it is closed at cleanup.
func setup(t *testing.T, opts Options) *testBundle {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "wal")
	l, rep := openLog(t, dir, opts)
	if rep != nil {
		t.Fatalf("new log reported a repair: %s", rep)
	}
	return &testBundle{dir: dir, log: l, opts: opts}
}

// openLog opens dir and closes the log at cleanup (Close is idempotent).
func openLog(t *testing.T, dir string, opts Options) (*Log, *RepairReport) {
	t.Helper()
	l, rep, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v (report: %s)", dir, err, rep)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, rep
}

func closeLog(t *testing.T, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// writeLog creates a log in dir holding payloads at indexes 1..n and closes it.
func writeLog(t *testing.T, dir string, opts Options, payloads [][]byte) {
	t.Helper()
	l, rep := openLog(t, dir, opts)
	if rep != nil {
		t.Fatalf("new log reported a repair: %s", rep)
	}
	for i, p := range payloads {
		mustAppend(t, l, p, uint64(i+1))
	}
	closeLog(t, l)
}

func mustAppend(t *testing.T, l *Log, p []byte, want uint64) {
	t.Helper()
	idx, err := l.Append(p, nil)
	if err != nil {
		t.Fatalf("Append (want index %d): %v", want, err)
	}
	if idx != want {
		t.Fatalf("Append: index %d, want %d", idx, want)
	}
}

func mustRead(t *testing.T, l *Log, idx uint64, want []byte) {
	t.Helper()
	got, err := l.Read(idx)
	if err != nil {
		t.Fatalf("Read(%d): %v", idx, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Read(%d) = %d bytes %q..., want %d bytes %q...", idx, len(got), head(got), len(want), head(want))
	}
}

func mustNotFound(t *testing.T, l *Log, idx uint64) {
	t.Helper()
	if p, err := l.Read(idx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read(%d) = %q, %v; want ErrNotFound", idx, head(p), err)
	}
}

func head(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// testPayload is a deterministic payload of size bytes that names i.
func testPayload(i, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte('a' + (i+j)%26)
	}
	copy(b, fmt.Sprintf("rec-%d|", i))
	return b
}

// waitOrTimeout waits for a signal on ch (River riversharedtest).
func waitOrTimeout[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a signal")
	}
	var zero T
	return zero
}

// segmentFiles lists dir's segment files in index order.
func segmentFiles(t *testing.T, dir string) []segFile {
	t.Helper()
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatalf("list segments: %v", err)
	}
	return segs
}

// entryLen is the on-disk size of one segment entry holding payload of n
// bytes: uvarint(len(record)) | version | crc | payload.
func entryLen(n int) int { return binenc.UvarintLen(uint64(n+headerSize)) + n + headerSize }

func roundTripSize(i int) int {
	switch i {
	case 7:
		return 0 // an empty payload is a valid record
	case 11:
		return 1000 // larger than a tiny segment
	}
	return (i * 37) % 300
}

func TestAppendReadRoundTrip(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		b := setup(t, opts)
		l := b.log
		if got := l.FirstIndex(); got != 1 {
			t.Fatalf("FirstIndex on a new log = %d, want 1", got)
		}
		if got := l.DurableIndex(); got != 0 {
			t.Fatalf("DurableIndex on a new log = %d, want 0", got)
		}
		mustNotFound(t, l, 0)
		mustNotFound(t, l, 1)

		const n = 60
		payloads := make([][]byte, n+1)
		for i := 1; i <= n; i++ {
			payloads[i] = testPayload(i, roundTripSize(i))
			mustAppend(t, l, payloads[i], uint64(i))
			if got := l.DurableIndex(); got != uint64(i) {
				t.Fatalf("DurableIndex after append %d = %d", i, got)
			}
			waitOrTimeout(t, l.Notify())
		}
		for i := 1; i <= n; i++ {
			mustRead(t, l, uint64(i), payloads[i])
		}
		mustNotFound(t, l, 0)
		mustNotFound(t, l, n+1)
		if got := l.FirstIndex(); got != 1 {
			t.Fatalf("FirstIndex = %d, want 1", got)
		}
		segs := segmentFiles(t, b.dir)
		if opts.SegmentSize == tinySegment && len(segs) < 10 {
			t.Fatalf("tiny segments: only %d segment files, want many rolls", len(segs))
		}
		if opts.SegmentSize == 0 && len(segs) != 1 {
			t.Fatalf("default segments: %d segment files, want 1", len(segs))
		}

		closeLog(t, l)
		if err := l.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := l.Append([]byte("x"), nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("Append after Close: %v, want ErrClosed", err)
		}
		if _, err := l.Read(1); !errors.Is(err, ErrClosed) {
			t.Fatalf("Read after Close: %v, want ErrClosed", err)
		}

		l2, rep := openLog(t, b.dir, opts)
		if rep != nil {
			t.Fatalf("reopen of a clean log reported a repair: %s", rep)
		}
		if l2.FirstIndex() != 1 || l2.DurableIndex() != n {
			t.Fatalf("after reopen FirstIndex=%d DurableIndex=%d, want 1, %d", l2.FirstIndex(), l2.DurableIndex(), n)
		}
		for i := 1; i <= n; i++ {
			mustRead(t, l2, uint64(i), payloads[i])
		}
		next := testPayload(n+1, 50)
		mustAppend(t, l2, next, n+1)
		mustRead(t, l2, n+1, next)
	})
}

func TestNotifyCoalesces(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{NoSync: true, Logger: discardLogger()})
	select {
	case <-b.log.Notify():
		t.Fatal("Notify fired before any append")
	default:
	}
	for i := 1; i <= 5; i++ {
		mustAppend(t, b.log, testPayload(i, 10), uint64(i))
	}
	waitOrTimeout(t, b.log.Notify())
	select {
	case <-b.log.Notify():
		t.Fatal("Notify did not coalesce five appends into one signal")
	default:
	}
	mustAppend(t, b.log, testPayload(6, 10), 6)
	waitOrTimeout(t, b.log.Notify())
}

func TestGroupCommitConcurrentAppends(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		var syncs atomic.Int64
		opts.ObserveSync = func(time.Duration) { syncs.Add(1) }
		b := setup(t, opts)
		l := b.log

		const n = 200
		type result struct {
			assigned []uint64 // every index onAssign was called with
			index    uint64
			err      error
		}
		results := make([]result, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < n; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r := &results[g]
				r.index, r.err = l.Append(testPayload(g, 20+g%90), func(idx uint64) {
					r.assigned = append(r.assigned, idx)
					// The index must not be visible before the record is durable.
					if d := l.DurableIndex(); d >= idx {
						t.Errorf("onAssign(%d): DurableIndex already %d", idx, d)
					}
					if _, err := l.Read(idx); !errors.Is(err, ErrNotFound) {
						t.Errorf("onAssign(%d): Read = %v, want ErrNotFound", idx, err)
					}
				})
			}()
		}
		close(start)
		wg.Wait()

		seen := make(map[uint64]int, n)
		for g, r := range results {
			if r.err != nil {
				t.Fatalf("goroutine %d: Append: %v", g, r.err)
			}
			if len(r.assigned) != 1 || r.assigned[0] != r.index {
				t.Fatalf("goroutine %d: onAssign called with %v, Append returned %d", g, r.assigned, r.index)
			}
			if other, dup := seen[r.index]; dup {
				t.Fatalf("index %d returned to goroutines %d and %d", r.index, other, g)
			}
			seen[r.index] = g
		}
		for i := uint64(1); i <= n; i++ {
			g, ok := seen[i]
			if !ok {
				t.Fatalf("index %d was never assigned (indexes must be consecutive from 1)", i)
			}
			mustRead(t, l, i, testPayload(g, 20+g%90))
		}
		if got := l.DurableIndex(); got != n {
			t.Fatalf("DurableIndex = %d, want %d", got, n)
		}
		if !opts.NoSync {
			t.Logf("%d appends made durable with %d fsyncs", n, syncs.Load())
			if s := syncs.Load(); s == 0 || s > n {
				t.Fatalf("%d fsyncs for %d appends", s, n)
			}
		}
		closeLog(t, l)
		l2, rep := openLog(t, b.dir, opts)
		if rep != nil {
			t.Fatalf("reopen reported a repair: %s", rep)
		}
		for i := uint64(1); i <= n; i++ {
			g := seen[i]
			mustRead(t, l2, i, testPayload(g, 20+g%90))
		}
	})
}

func TestLargeRecords(t *testing.T) {
	// Not parallel: each case holds several copies of a 64 MiB record.
	const maxRecord = 64<<20 + 4096
	for _, seg := range []int{0, tinySegment} {
		t.Run(fmt.Sprintf("SegmentSize=%d", seg), func(t *testing.T) {
			opts := Options{SegmentSize: seg, MaxRecordBytes: maxRecord, Logger: discardLogger()}
			b := setup(t, opts)
			l := b.log
			small1 := testPayload(1, 100)
			big := testPayload(2, maxRecord) // exactly the limit: accepted
			small3 := testPayload(3, 100)
			mustAppend(t, l, small1, 1)
			mustAppend(t, l, big, 2)
			if _, err := l.Append(make([]byte, maxRecord+1), nil); !errors.Is(err, ErrRecordTooLarge) {
				t.Fatalf("Append of MaxRecordBytes+1: %v, want ErrRecordTooLarge", err)
			}
			if got := l.DurableIndex(); got != 2 {
				t.Fatalf("DurableIndex after a refused append = %d, want 2", got)
			}
			mustAppend(t, l, small3, 3)
			mustRead(t, l, 1, small1)
			mustRead(t, l, 2, big)
			mustRead(t, l, 3, small3)
			closeLog(t, l)

			l2, rep := openLog(t, b.dir, opts)
			if rep != nil {
				t.Fatalf("reopen reported a repair: %s", rep)
			}
			mustRead(t, l2, 2, big)
			mustRead(t, l2, 3, small3)
			mustAppend(t, l2, small1, 4)
		})
	}
	t.Run("DefaultLimit", func(t *testing.T) {
		b := setup(t, Options{NoSync: true, Logger: discardLogger()})
		if _, err := b.log.Append(make([]byte, DefaultMaxRecordBytes+1), nil); !errors.Is(err, ErrRecordTooLarge) {
			t.Fatalf("Append of DefaultMaxRecordBytes+1: %v, want ErrRecordTooLarge", err)
		}
	})
}

// TestReopenWithSmallerMaxRecordBytesKeepsRecords: the broker derives
// MaxRecordBytes from its body limit, so a restart with a lower limit must
// not cut valid, acknowledged records that were accepted under the old one.
func TestReopenWithSmallerMaxRecordBytesKeepsRecords(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "wal")
	payloads := [][]byte{testPayload(1, 100), testPayload(2, 3000), testPayload(3, 100)}
	writeLog(t, dir, Options{MaxRecordBytes: 4096, NoSync: true, Logger: discardLogger()}, payloads)

	l, rep := openLog(t, dir, Options{MaxRecordBytes: 1024, NoSync: true, Logger: discardLogger()})
	if rep != nil {
		t.Errorf("reopen with a smaller MaxRecordBytes cut valid records: %s", rep)
	}
	if got := l.DurableIndex(); got != 3 {
		t.Fatalf("DurableIndex = %d, want 3 (acknowledged records were lost)", got)
	}
	for i, p := range payloads {
		mustRead(t, l, uint64(i+1), p)
	}
}

func TestTruncateProjected(t *testing.T) {
	t.Parallel()
	for _, noSync := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoSync=%t", noSync), func(t *testing.T) {
			t.Parallel()
			opts := Options{SegmentSize: tinySegment, NoSync: noSync, Logger: discardLogger()}
			b := setup(t, opts)
			l := b.log
			const n = 60
			payloads := make([][]byte, n+1)
			for i := 1; i <= n; i++ {
				payloads[i] = testPayload(i, 100) // 106-byte entries: 3 per segment
				mustAppend(t, l, payloads[i], uint64(i))
			}
			before := segmentFiles(t, b.dir)
			if len(before) < 10 {
				t.Fatalf("only %d segments", len(before))
			}

			// A long retention keeps everything, even fully projected.
			removed, err := l.TruncateProjected(n, time.Hour)
			if err != nil || removed != 0 {
				t.Fatalf("TruncateProjected(retention 1h) = %d, %v; want 0, nil", removed, err)
			}
			if got := segmentFiles(t, b.dir); len(got) != len(before) || l.FirstIndex() != 1 {
				t.Fatalf("long retention removed files: %d -> %d, FirstIndex %d", len(before), len(got), l.FirstIndex())
			}

			// Checkpoint in the middle, retention 0: every segment whose
			// entries are all <= checkpoint goes, the one holding checkpoint+1 stays.
			const checkpoint = 31
			var wantFirst uint64
			wantRemoved := 0
			for _, s := range before {
				if s.index <= checkpoint+1 {
					wantFirst = s.index
				}
			}
			for _, s := range before {
				if s.index < wantFirst {
					wantRemoved++
				}
			}
			if wantRemoved == 0 {
				t.Fatalf("test setup: no segment below the checkpoint (segments %v)", before)
			}

			// Appends keep running while segments are removed.
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 30; i++ {
					if _, err := l.Append(testPayload(1000+i, 100), nil); err != nil {
						t.Errorf("concurrent Append: %v", err)
						return
					}
				}
			}()
			removed, err = l.TruncateProjected(checkpoint, 0)
			wg.Wait()
			if err != nil {
				t.Fatalf("TruncateProjected: %v", err)
			}
			if removed != wantRemoved {
				t.Fatalf("TruncateProjected removed %d segments, want %d", removed, wantRemoved)
			}
			if got := l.FirstIndex(); got != wantFirst {
				t.Fatalf("FirstIndex = %d, want %d", got, wantFirst)
			}
			for _, s := range segmentFiles(t, b.dir) {
				if s.index < wantFirst {
					t.Fatalf("segment %s below FirstIndex %d still on disk", s.name, wantFirst)
				}
			}
			for i := uint64(1); i < wantFirst; i++ {
				mustNotFound(t, l, i)
			}
			for i := wantFirst; i <= n; i++ {
				mustRead(t, l, i, payloads[i])
			}
			durable := l.DurableIndex()
			if durable != n+30 {
				t.Fatalf("DurableIndex = %d, want %d", durable, n+30)
			}

			// Everything projected, retention 0: the tail is never removed
			// and the log stays writable and readable.
			if _, err := l.TruncateProjected(durable, 0); err != nil {
				t.Fatalf("TruncateProjected(all): %v", err)
			}
			segs := segmentFiles(t, b.dir)
			tail := segs[len(segs)-1]
			first := l.FirstIndex()
			if first > tail.index || first <= wantFirst {
				t.Fatalf("after truncating all: FirstIndex %d, tail segment %s, previous FirstIndex %d", first, tail.name, wantFirst)
			}
			if segs[0].index != first {
				t.Fatalf("first segment file %s, FirstIndex %d", segs[0].name, first)
			}
			for i := uint64(1); i < first; i++ {
				mustNotFound(t, l, i)
			}
			for i := first; i <= n && i <= durable; i++ {
				mustRead(t, l, i, payloads[i])
			}
			mustRead(t, l, durable, testPayload(1000+29, 100))
			next := testPayload(2000, 100)
			mustAppend(t, l, next, durable+1)

			closeLog(t, l)
			l2, rep := openLog(t, b.dir, opts)
			if rep != nil {
				t.Fatalf("reopen after truncation reported a repair: %s", rep)
			}
			if l2.FirstIndex() != first || l2.DurableIndex() != durable+1 {
				t.Fatalf("after reopen FirstIndex=%d DurableIndex=%d, want %d, %d", l2.FirstIndex(), l2.DurableIndex(), first, durable+1)
			}
			mustNotFound(t, l2, first-1)
			mustRead(t, l2, durable+1, next)
		})
	}
}

// TestTruncateProjectedRetention: only segments whose file is older than the
// retention period go, oldest first.
func TestTruncateProjectedRetention(t *testing.T) {
	t.Parallel()
	opts := Options{SegmentSize: tinySegment, NoSync: true, Logger: discardLogger()}
	b := setup(t, opts)
	const n = 45
	for i := 1; i <= n; i++ {
		mustAppend(t, b.log, testPayload(i, 100), uint64(i))
	}
	segs := segmentFiles(t, b.dir)
	old := time.Now().Add(-2 * time.Hour)
	const oldSegs = 4
	for _, s := range segs[:oldSegs] {
		if err := os.Chtimes(filepath.Join(b.dir, s.name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := b.log.TruncateProjected(n, time.Hour)
	if err != nil {
		t.Fatalf("TruncateProjected: %v", err)
	}
	if removed != oldSegs {
		t.Fatalf("removed %d segments, want the %d older than the retention", removed, oldSegs)
	}
	if got := b.log.FirstIndex(); got != segs[oldSegs].index {
		t.Fatalf("FirstIndex = %d, want %d", got, segs[oldSegs].index)
	}
	mustNotFound(t, b.log, segs[oldSegs].index-1)
	mustRead(t, b.log, segs[oldSegs].index, testPayload(int(segs[oldSegs].index), 100))
}

// TestTruncateProjectedRetentionCountsDataAge: segments whose data is
// older than the retention go on the next call, also after a truncation
// (tidwall's TruncateFront, which earlier builds used, rewrote the first
// kept segment, a .START copy renamed over it, and so reset its mtime).
func TestTruncateProjectedRetentionCountsDataAge(t *testing.T) {
	t.Parallel()
	opts := Options{SegmentSize: tinySegment, NoSync: true, Logger: discardLogger()}
	b := setup(t, opts)
	const n = 45
	for i := 1; i <= n; i++ {
		mustAppend(t, b.log, testPayload(i, 100), uint64(i))
	}
	segs := segmentFiles(t, b.dir)
	old := time.Now().Add(-2 * time.Hour)
	for _, s := range segs {
		if err := os.Chtimes(filepath.Join(b.dir, s.name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := b.log.TruncateProjected(10, time.Hour); err != nil || removed == 0 {
		t.Fatalf("first TruncateProjected = %d, %v", removed, err)
	}
	first := b.log.FirstIndex()
	removed, err := b.log.TruncateProjected(n, time.Hour)
	if err != nil {
		t.Fatalf("second TruncateProjected: %v", err)
	}
	if removed == 0 {
		t.Fatalf("second TruncateProjected removed nothing: segment %d, written 2h ago, counts as new "+
			"because the first truncation rewrote it (FirstIndex still %d)", first, b.log.FirstIndex())
	}
}

// TestFailStopDiskFull fills a small tmpfs under the log: Appends of the
// failed batch fail, none of their records is ever readable, and once space
// is freed the log goes on at the next index.
func TestFailStopDiskFull(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		mnt := mountTmpfs(t, "64k")
		var logs logbuf.Buffer
		opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		dir := filepath.Join(mnt, "wal")
		l, rep := openLog(t, dir, opts)
		if rep != nil {
			t.Fatalf("new log reported a repair: %s", rep)
		}
		// 106-byte entries leave slack in the tail file's page, so the
		// failing 8 KiB appends below are partly written before ENOSPC.
		const good = 4
		for i := 1; i <= good; i++ {
			mustAppend(t, l, testPayload(i, 100), uint64(i))
		}

		filler := filepath.Join(mnt, "filler")
		fillDisk(t, filler)

		failedMarker := []byte("FAILED-BATCH-RECORD")
		failed := func(g int) []byte {
			p := bytes.Repeat([]byte{'F'}, 8<<10)
			copy(p, failedMarker)
			copy(p[100:], fmt.Sprintf("goroutine-%d", g))
			return p
		}
		for round := 0; round < 2; round++ {
			const k = 8
			errs := make([]error, k)
			var assigned atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < k; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[g] = l.Append(failed(g), func(idx uint64) {
						assigned.Add(1)
						if idx <= good {
							t.Errorf("failed batch assigned durable index %d", idx)
						}
					})
				}()
			}
			wg.Wait()
			for g, err := range errs {
				if err == nil {
					t.Fatalf("round %d: Append %d on a full disk succeeded", round, g)
				}
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("round %d: Append %d: %v, want ENOSPC", round, g, err)
				}
			}
			if assigned.Load() != k {
				t.Fatalf("onAssign called %d times, want %d", assigned.Load(), k)
			}
			if got := l.DurableIndex(); got != good {
				t.Fatalf("DurableIndex after failed writes = %d, want %d", got, good)
			}
			mustNotFound(t, l, good+1)
			for i := uint64(1); i <= good; i++ {
				mustRead(t, l, i, testPayload(int(i), 100))
			}
			assertNoSegmentHolds(t, dir, failedMarker)
		}
		// The partly written batch was cut back to the durable index.
		if out := logs.String(); !strings.Contains(out, "write failed") || !strings.Contains(out, "rollback of entries after the durable index") {
			t.Errorf("failed write and rollback were not logged; log:\n%s", out)
		}

		// Free the space: the same handle appends again at the next index.
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		next := testPayload(good+1, 8<<10)
		mustAppend(t, l, next, good+1)
		mustRead(t, l, good+1, next)
		closeLog(t, l)

		l2, _ := openLog(t, dir, opts)
		if got := l2.DurableIndex(); got != good+1 {
			t.Fatalf("DurableIndex after reopen = %d, want %d", got, good+1)
		}
		for i := uint64(1); i <= good; i++ {
			mustRead(t, l2, i, testPayload(int(i), 100))
		}
		mustRead(t, l2, good+1, next)
		mustNotFound(t, l2, good+2)
		assertNoSegmentHolds(t, dir, failedMarker)
		mustAppend(t, l2, testPayload(good+2, 10), good+2)
	})
}

// TestConcurrentReadsDuringAppends: concurrent Read calls are safe and
// return each index's record, also while the writer rolls segments.
func TestConcurrentReadsDuringAppends(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		b := setup(t, opts)
		l := b.log
		const n = 300
		stop := make(chan struct{})
		var readers sync.WaitGroup
		for r := 0; r < 8; r++ {
			readers.Add(1)
			go func() {
				defer readers.Done()
				for k := uint64(r); ; k += 7 {
					select {
					case <-stop:
						return
					default:
					}
					d := l.DurableIndex()
					if d == 0 {
						continue
					}
					idx := 1 + k%d
					p, err := l.Read(idx)
					if err != nil {
						t.Errorf("Read(%d) with DurableIndex %d: %v", idx, d, err)
						return
					}
					if want := testPayload(int(idx), 40+int(idx)%60); !bytes.Equal(p, want) {
						t.Errorf("Read(%d) = %q, want %q", idx, head(p), head(want))
						return
					}
				}
			}()
		}
		var writers sync.WaitGroup
		var next sync.Mutex // one appender at a time, so payload i lands at index i
		for w := 0; w < 4; w++ {
			writers.Add(1)
			go func() {
				defer writers.Done()
				for {
					next.Lock()
					i := int(l.DurableIndex()) + 1
					if i > n {
						next.Unlock()
						return
					}
					_, err := l.Append(testPayload(i, 40+i%60), nil)
					next.Unlock()
					if err != nil {
						t.Errorf("Append %d: %v", i, err)
						return
					}
				}
			}()
		}
		writers.Wait()
		close(stop)
		readers.Wait()
		if got := l.DurableIndex(); got != n {
			t.Fatalf("DurableIndex = %d, want %d", got, n)
		}
	})
}

// TestCloseDuringAppends: every Append racing with Close either returns
// ErrClosed or an index whose record survives the reopen.
func TestCloseDuringAppends(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		b := setup(t, opts)
		const appenders = 8
		var mu sync.Mutex
		done := make(map[uint64][]byte) // index -> payload of a successful Append
		var wg sync.WaitGroup
		for g := 0; g < appenders; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					p := testPayload(g*100000+k, 30)
					idx, err := b.log.Append(p, nil)
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						t.Errorf("Append: %v", err)
						return
					}
					mu.Lock()
					if _, dup := done[idx]; dup {
						t.Errorf("index %d returned twice", idx)
					}
					done[idx] = p
					mu.Unlock()
				}
			}()
		}
		for b.log.DurableIndex() < 50 {
			waitOrTimeout(t, b.log.Notify())
		}
		closeLog(t, b.log)
		wg.Wait()

		l, rep := openLog(t, b.dir, opts)
		if rep != nil {
			t.Fatalf("reopen after Close reported a repair: %s", rep)
		}
		if got := l.DurableIndex(); got != uint64(len(done)) {
			t.Fatalf("DurableIndex after reopen = %d, %d appends succeeded", got, len(done))
		}
		for idx, p := range done {
			mustRead(t, l, idx, p)
		}
	})
}

// mountTmpfs mounts a tmpfs of the given size on a fresh directory and
// unmounts it at cleanup; it skips the test where mounting is not allowed.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s)", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// fillDisk writes to path until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill disk: %v", err)
			}
			return
		}
	}
}

// assertNoSegmentHolds fails when any segment file of dir contains marker.
func assertNoSegmentHolds(t *testing.T, dir string, marker []byte) {
	t.Helper()
	for _, s := range segmentFiles(t, dir) {
		data, err := os.ReadFile(filepath.Join(dir, s.name))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, marker) {
			t.Fatalf("segment %s still holds bytes of a failed batch", s.name)
		}
	}
}

// copyDir copies the flat log directory src (segments and cut/) to a fresh
// temp dir.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "wal")
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o750)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
	return dst
}

// cutFiles lists the evidence files under dir/cut.
func cutFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "cut"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, filepath.Join(dir, "cut", e.Name()))
	}
	sort.Strings(out)
	return out
}

// TestReadRecordAt reads records straight from segment files (as `queen
// wal status` does beside a running broker): every index across several
// segments, ErrNotFound outside them, and ErrCorruptRecord for a record
// whose bytes were flipped.
func TestReadRecordAt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	var payloads [][]byte
	for i := 0; i < 300; i++ {
		payloads = append(payloads, []byte(fmt.Sprintf("record %d %s", i+1, bytes.Repeat([]byte{'x'}, i%50))))
	}
	writeLog(t, dir, Options{SegmentSize: 1024}, payloads)
	segs, err := listSegments(dir)
	if err != nil || len(segs) < 3 {
		t.Fatalf("want several segments, have %d (%v)", len(segs), err)
	}
	for i, want := range payloads {
		got, err := ReadRecordAt(dir, uint64(i+1))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("record %d: %q, %v; want %q", i+1, got, err, want)
		}
	}
	for _, idx := range []uint64{0, 301, 1 << 40} {
		if _, err := ReadRecordAt(dir, idx); !errors.Is(err, ErrNotFound) {
			t.Errorf("index %d: %v, want ErrNotFound", idx, err)
		}
	}
	// Flip a payload byte of the second segment's first record.
	p := filepath.Join(dir, segs[1].name)
	data, _ := os.ReadFile(p)
	data[len(data)/8+6] ^= 0xff
	if err := os.WriteFile(p, data, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRecordAt(dir, segs[2].index-1); !errors.Is(err, ErrCorruptRecord) {
		t.Errorf("last record of a damaged segment: %v, want ErrCorruptRecord", err)
	}
}

// TestMaxBytes: with a byte cap, appends fill the log up to the cap and the
// next one fails with ErrFull, writing nothing (the index is not used).
// Size matches the files on disk throughout. Truncating projected segments
// frees room and appends succeed again; a reopen counts the same size.
func TestMaxBytes(t *testing.T) {
	const limit = 64 << 10
	opts := Options{SegmentSize: 8 << 10, MaxBytes: limit}
	b := setup(t, opts)
	// onDisk is the segment files' bytes up to their last record (what
	// MaxBytes counts: zero padding is not data); the files, padding and
	// the prepared next segment included, stay within two padded segments
	// of it.
	onDisk := func() int64 {
		reps, ok, err := Verify(b.dir)
		if err != nil || !ok {
			t.Fatalf("Verify: %v, ok %t: %+v", err, ok, reps)
		}
		var n, files int64
		for _, r := range reps {
			n += r.Bytes - r.Padding
			files += r.Bytes
		}
		if st, err := os.Stat(filepath.Join(b.dir, preparedName)); err == nil {
			files += st.Size()
		}
		if files > n+2*padSize(opts.SegmentSize) {
			t.Fatalf("segment files take %d bytes for %d bytes of records", files, n)
		}
		return n
	}
	payload := bytes.Repeat([]byte{'p'}, 1000)
	var n uint64
	for {
		idx, err := b.log.Append(payload, nil)
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if idx != n {
			t.Fatalf("index %d, want %d", idx, n)
		}
		if n > 1000 {
			t.Fatal("no ErrFull below the cap")
		}
	}
	if got := b.log.Size(); got != onDisk() || got > limit || got+recordBytes(len(payload)) <= limit {
		t.Fatalf("Size %d, on disk %d, cap %d: want on-disk size within one record of the cap", got, onDisk(), limit)
	}
	if b.log.DurableIndex() != n {
		t.Fatalf("a refused append moved the durable index to %d (want %d)", b.log.DurableIndex(), n)
	}
	if _, err := b.log.Append(payload, nil); !errors.Is(err, ErrFull) {
		t.Fatalf("append at the cap: %v, want ErrFull", err)
	}
	removed, err := b.log.TruncateProjected(n, 0)
	if err != nil || removed == 0 {
		t.Fatalf("TruncateProjected: %d, %v", removed, err)
	}
	if got := b.log.Size(); got != onDisk() {
		t.Fatalf("after truncation Size %d, on disk %d", got, onDisk())
	}
	mustAppend(t, b.log, payload, n+1)
	select {
	case <-b.log.Full():
	default:
		t.Fatal("a refused append did not signal Full")
	}
	size := b.log.Size()
	closeLog(t, b.log)
	l, _ := openLog(t, b.dir, opts)
	if l.Size() != size || l.Size() != onDisk() {
		t.Fatalf("reopened Size %d, before %d, on disk %d", l.Size(), size, onDisk())
	}
}

// TestSealedSegmentDamageKeepsRecordsBefore flips one byte in the middle of
// a sealed segment, for record sizes that put it in a length prefix or in
// a payload. The segment's framing then breaks at the damage, but every record
// before the damage still reads back as written, every record from it to
// the segment's end is ErrCorruptRecord, and later segments read normally
// (the cursor the projector uses included).
func TestSealedSegmentDamageKeepsRecordsBefore(t *testing.T) {
	for _, size := range []int{500, 520, 540, 560, 580} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "wal")
			payloads := [][]byte{[]byte("small")}
			for i := 0; i < 30; i++ {
				payloads = append(payloads, bytes.Repeat([]byte{byte('a' + i%26)}, size))
			}
			writeLog(t, dir, Options{SegmentSize: 4096}, payloads)
			segs, _ := listSegments(dir)
			if len(segs) < 3 {
				t.Fatalf("%d segments", len(segs))
			}
			p := filepath.Join(dir, segs[1].name)
			data, _ := os.ReadFile(p)
			data[len(data)/2] ^= 0xff
			if err := os.WriteFile(p, data, 0o640); err != nil {
				t.Fatal(err)
			}
			_, good, _ := scanSegment(data, -1)
			bad := segs[1].index + uint64(good) // first damaged index
			l, _ := openLog(t, dir, Options{SegmentSize: 4096})
			for i := uint64(1); i <= uint64(len(payloads)); i++ {
				got, err := l.Read(i)
				switch {
				case i >= bad && i < segs[2].index:
					if !errors.Is(err, ErrCorruptRecord) {
						t.Fatalf("damaged record %d: %v, want ErrCorruptRecord", i, err)
					}
				case err != nil || !bytes.Equal(got, payloads[i-1]):
					t.Fatalf("record %d (damage at %d): %.20q, %v", i, bad, got, err)
				}
			}
			// As the projector does: read up to the damage again and again,
			// then past the damaged segment. Every record must be the one
			// written at its index (a damaged segment loaded by a reader that
			// trusts its framing could claim the indexes of the next one).
			c := l.NewCursor(2)
			for round := 0; round < 3; round++ {
				c.Seek(2)
				if b, err := c.Next(1000, 1<<20); !errors.Is(err, ErrCorruptRecord) || uint64(len(b)) != bad-2 {
					t.Fatalf("cursor up to the damage: %d records, %v", len(b), err)
				}
			}
			c.Seek(segs[2].index)
			b, err := c.Next(1000, 1<<20)
			if err != nil || uint64(len(b)) != uint64(len(payloads))-segs[2].index+1 {
				t.Fatalf("cursor past the damaged segment: %d records, %v", len(b), err)
			}
			for _, e := range b {
				if !bytes.Equal(e.Payload, payloads[e.Index-1]) {
					t.Fatalf("record %d after the damaged segment reads %.12q, want %.12q", e.Index, e.Payload, payloads[e.Index-1])
				}
			}
		})
	}
}

// TestMaxBytesBelowFourSegments: a cap that could never be relieved by
// truncation (the tail and the newest sealed segment always stay) is
// refused at Open.
func TestMaxBytesBelowFourSegments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	if _, _, err := Open(dir, Options{SegmentSize: 8 << 10, MaxBytes: 3 * 8 << 10}); err == nil {
		t.Fatal("Open accepted a cap of 3 segments")
	}
	l, _ := openLog(t, dir, Options{SegmentSize: 8 << 10, MaxBytes: 4 * 8 << 10})
	closeLog(t, l)
}

// TestFailedWritesLogRateLimited: on a full disk every append fails; the
// log gets the first failure (and its rollback) once, not a line or two per
// failed append (issue: a full or read-only WAL wrote 2,475 lines in 27 s).
func TestFailedWritesLogRateLimited(t *testing.T) {
	t.Parallel()
	mnt := mountTmpfs(t, "64k")
	var logs logbuf.Buffer
	opts := Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	l, _ := openLog(t, filepath.Join(mnt, "wal"), opts)
	mustAppend(t, l, testPayload(1, 100), 1)
	fillDisk(t, filepath.Join(mnt, "filler"))
	const failures = 200
	for i := 0; i < failures; i++ {
		if _, err := l.Append(bytes.Repeat([]byte{'F'}, 8<<10), nil); err == nil {
			t.Fatalf("append %d on a full disk succeeded", i)
		}
	}
	out := logs.String()
	n := strings.Count(out, "\n")
	if !strings.Contains(out, "write failed") {
		t.Fatalf("the first failed write was not logged; log:\n%s", out)
	}
	// One line per distinct message (write failed, repaired log, reopen
	// failure, and the padding of the tail and of the prepared segment,
	// which a full disk fails too), each written once within the interval.
	if n > 5 {
		t.Fatalf("%d failed appends wrote %d log lines, want at most 5 (one per message); log:\n%s", failures, n, out)
	}
}

// TestAppendEnveloped: a record built behind HeaderSize free bytes is
// stored as Append stores its payload (same bytes on disk, readable after a
// reopen, which verifies the tail's checksums: a wrong one would be a
// repair), and the caller's buffer is only read; a buffer without room
// for the header, or over MaxRecordBytes, is refused and writes nothing.
func TestAppendEnveloped(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		opts.MaxRecordBytes = 1000
		b := setup(t, opts)
		for i := 1; i <= 20; i++ {
			rec := append(bytes.Repeat([]byte{0xee}, HeaderSize), testPayload(i, 50+i*7)...)
			idx, err := b.log.AppendEnveloped(rec, nil)
			if err != nil || idx != uint64(i) {
				t.Fatalf("AppendEnveloped %d: index %d, %v", i, idx, err)
			}
			if !bytes.Equal(rec[:HeaderSize], bytes.Repeat([]byte{0xee}, HeaderSize)) {
				t.Fatalf("record %d: the caller's buffer was written (%x): the envelope is sealed in the WAL's copy", i, rec[:HeaderSize])
			}
		}
		if _, err := b.log.AppendEnveloped(make([]byte, HeaderSize-1), nil); err == nil {
			t.Fatal("AppendEnveloped of a buffer shorter than the header: no error")
		}
		if _, err := b.log.AppendEnveloped(make([]byte, HeaderSize+1001), nil); !errors.Is(err, ErrRecordTooLarge) {
			t.Fatalf("AppendEnveloped over MaxRecordBytes: %v, want ErrRecordTooLarge", err)
		}
		mustAppend(t, b.log, testPayload(21, 10), 21) // the refusals wrote nothing
		closeLog(t, b.log)
		l, rep := openLog(t, b.dir, opts)
		if rep != nil {
			t.Fatalf("reopen reported a repair: %s", rep)
		}
		for i := 1; i <= 20; i++ {
			mustRead(t, l, uint64(i), testPayload(i, 50+i*7))
		}
		mustRead(t, l, 21, testPayload(21, 10))
	})
}

// TestAppendGathered: a record handed over in pieces (the first starting
// with HeaderSize free bytes) is stored as the pieces' concatenation,
// sealed (the reopen verifies the checksums; the pieces are only read),
// readable before and after a reopen, the synchronous and the
// asynchronous way alike, across segment rolls; a first piece shorter than
// the header, an empty vec, or a record over MaxRecordBytes is refused and
// writes nothing.
func TestAppendGathered(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		opts.MaxRecordBytes = 4000
		if opts.SegmentSize == 0 {
			opts.SegmentSize = 2048 // rolls every few records (the tiny permutation after each)
		}
		b := setup(t, opts)
		// pieces splits payload into pieces of 0 to 37 bytes behind the
		// header, some of them empty.
		pieces := func(i int, payload []byte) [][]byte {
			vec := [][]byte{append(make([]byte, HeaderSize), payload[:min(3, len(payload))]...)}
			rest := payload[min(3, len(payload)):]
			for k := 0; len(rest) > 0; k++ {
				n := min(len(rest), (i*7+k*13)%38)
				vec = append(vec, rest[:n])
				rest = rest[n:]
			}
			return vec
		}
		const n = 40
		for i := 1; i <= n; i++ {
			payload := testPayload(i, 20+i*31)
			vec := pieces(i, payload)
			if i%2 == 1 {
				idx, err := b.log.AppendGathered(vec, nil)
				if err != nil || idx != uint64(i) {
					t.Fatalf("AppendGathered %d: index %d, %v", i, idx, err)
				}
			} else {
				done := make(chan error, 1)
				var got uint64
				if err := b.log.AppendGatheredAsync(vec, nil, func(idx uint64, err error) { got = idx; done <- err }); err != nil {
					t.Fatalf("AppendGatheredAsync %d: %v", i, err)
				}
				if err := <-done; err != nil || got != uint64(i) {
					t.Fatalf("AppendGatheredAsync %d: index %d, %v", i, got, err)
				}
			}
			if h := vec[0][:HeaderSize]; !bytes.Equal(h, make([]byte, HeaderSize)) {
				t.Fatalf("record %d: the caller's first piece was written (%x): the envelope is sealed in the WAL's copy", i, h)
			}
			mustRead(t, b.log, uint64(i), payload)
		}
		for _, bad := range [][][]byte{nil, {make([]byte, HeaderSize-1), make([]byte, 10)}} {
			if _, err := b.log.AppendGathered(bad, nil); err == nil || errors.Is(err, ErrRecordTooLarge) {
				t.Fatalf("AppendGathered of %d pieces without the header's room: %v, want an error", len(bad), err)
			}
			if err := b.log.AppendGatheredAsync(bad, nil, func(uint64, error) { t.Error("onDone called for a refused record") }); err == nil || errors.Is(err, ErrRecordTooLarge) {
				t.Fatalf("AppendGatheredAsync of %d pieces without the header's room: %v, want an error", len(bad), err)
			}
		}
		big := [][]byte{make([]byte, HeaderSize+2000), make([]byte, 2001)}
		if _, err := b.log.AppendGathered(big, nil); !errors.Is(err, ErrRecordTooLarge) {
			t.Fatalf("AppendGathered over MaxRecordBytes: %v, want ErrRecordTooLarge", err)
		}
		if err := b.log.AppendGatheredAsync(big, nil, func(uint64, error) { t.Error("onDone called for a refused record") }); !errors.Is(err, ErrRecordTooLarge) {
			t.Fatalf("AppendGatheredAsync over MaxRecordBytes: %v, want ErrRecordTooLarge", err)
		}
		mustAppend(t, b.log, testPayload(n+1, 10), n+1)               // the refusals wrote nothing
		largest := pieces(n+2, testPayload(n+2, opts.MaxRecordBytes)) // exactly the limit
		if idx, err := b.log.AppendGathered(largest, nil); err != nil || idx != n+2 {
			t.Fatalf("AppendGathered of MaxRecordBytes: index %d, %v", idx, err)
		}
		closeLog(t, b.log)
		l, rep := openLog(t, b.dir, opts)
		if rep != nil {
			t.Fatalf("reopen reported a repair: %s", rep)
		}
		for i := 1; i <= n; i++ {
			mustRead(t, l, uint64(i), testPayload(i, 20+i*31))
		}
		mustRead(t, l, n+1, testPayload(n+1, 10))
		mustRead(t, l, n+2, testPayload(n+2, opts.MaxRecordBytes))
	})
}
