package wal

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// TestFsyncErrorAfterRollFailsBatchAndReopens: the fsync of the new tail
// fails in a batch that rolled the segment. The Append fails, its index is
// never readable, the failed handle is never synced again, and the
// verification a reader cached for the segment rolled from (which then
// held the failed record) does not survive the rollback: after the
// segment fills again with other records, all of them read.
func TestFsyncErrorAfterRollFailsBatchAndReopens(t *testing.T) {
	t.Parallel()
	errInjected := errors.New("injected fsync error")
	var (
		mu       sync.Mutex
		armed    bool
		l        *Log
		failedFd *os.File
		hookErr  error
	)
	const segA = "00000000000000000005"
	opts := Options{SegmentSize: 1000, Logger: discardLogger()}
	opts.fsyncHook = func(f *os.File) error {
		mu.Lock()
		defer mu.Unlock()
		if failedFd != nil && f == failedFd {
			hookErr = errors.New("the handle whose fsync failed was synced again")
		}
		if !armed || filepath.Base(f.Name()) == segA {
			return f.Sync()
		}
		armed = false
		failedFd = f
		// A reader between the roll and the failed fsync: record 1 loads
		// segment 1 (segment 5 leaves memory), record 5 then verifies
		// segment 5 from its file, which holds the failing record 6.
		if _, err := l.Read(1); err != nil {
			hookErr = err
		}
		if _, err := l.Read(5); err != nil {
			hookErr = err
		}
		return errInjected
	}
	dir := filepath.Join(t.TempDir(), "wal")
	l, _ = openLog(t, dir, opts)
	// Segment 1 holds records 1..4 (307 bytes each), segment 5 record 5.
	for i := 1; i <= 5; i++ {
		mustAppend(t, l, testPayload(i, 300), uint64(i))
	}
	if got := segNames(t, dir); len(got) != 2 || got[1] != segA {
		t.Fatalf("segments %v, want 2 ending with %s", got, segA)
	}
	mu.Lock()
	armed = true
	mu.Unlock()
	// Record 6 takes segment 5 past its size: roll to segment 7, whose
	// fsync fails.
	if _, err := l.Append(testPayload(6, 800), nil); !errors.Is(err, errInjected) {
		t.Fatalf("Append with a failing fsync: %v, want the injected error", err)
	}
	if got := l.DurableIndex(); got != 5 {
		t.Fatalf("DurableIndex after the failed fsync = %d, want 5", got)
	}
	mustNotFound(t, l, 6)
	// Small records fill segment 5 again: 6..18, then 19 in segment 19.
	for i := 6; i <= 19; i++ {
		mustAppend(t, l, testPayload(i, 50), uint64(i))
	}
	if got := segNames(t, dir); len(got) != 3 || got[2] != segName(19) {
		t.Fatalf("segments %v, want 1, 5, 19", got)
	}
	mustRead(t, l, 1, testPayload(1, 300)) // segment 1 in memory again
	for i := 5; i <= 19; i++ {
		want := testPayload(i, 50)
		if i == 5 {
			want = testPayload(i, 300)
		}
		mustRead(t, l, uint64(i), want)
	}
	closeLog(t, l)
	mu.Lock()
	defer mu.Unlock()
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if failedFd == nil {
		t.Fatal("the fsync of the new tail was never attempted")
	}
}

func segNames(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, s := range segmentFiles(t, dir) {
		out = append(out, s.name)
	}
	return out
}

// TestRollSyncsOldSegmentNewSegmentAndDirectory: an Append whose batch
// rolls the segment returns only after the segment rolled from, the new
// segment and the directory (the new file's name) are fsynced, in that
// order; when the directory's fsync fails the Append fails, its index is
// never readable, and the next Append takes that index.
func TestRollSyncsOldSegmentNewSegmentAndDirectory(t *testing.T) {
	t.Parallel()
	errInjected := errors.New("injected directory fsync error")
	var (
		mu      sync.Mutex
		synced  []string
		failDir bool
	)
	dir := filepath.Join(t.TempDir(), "wal")
	opts := Options{SegmentSize: 1000, Logger: discardLogger()}
	opts.fsyncHook = func(f *os.File) error {
		mu.Lock()
		defer mu.Unlock()
		synced = append(synced, filepath.Base(f.Name()))
		if failDir && f.Name() == dir {
			failDir = false
			return errInjected
		}
		return f.Sync()
	}
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		s := synced
		synced = nil
		return s
	}
	l, _ := openLog(t, dir, opts)
	for i := 1; i <= 3; i++ {
		mustAppend(t, l, testPayload(i, 300), uint64(i))
	}
	take()
	// Record 4 takes segment 1 past 1000 bytes: roll to segment 5.
	mustAppend(t, l, testPayload(4, 300), 4)
	want := []string{segName(1), segName(5), "wal"}
	if got := take(); !slices.Equal(got, want) {
		t.Fatalf("fsyncs of the rolling append: %v, want %v", got, want)
	}
	for i := 5; i <= 7; i++ {
		mustAppend(t, l, testPayload(i, 300), uint64(i))
	}
	if got, want := take(), []string{segName(5), segName(5), segName(5)}; !slices.Equal(got, want) {
		t.Fatalf("fsyncs of three appends without a roll: %v, want %v", got, want)
	}
	mu.Lock()
	failDir = true
	mu.Unlock()
	if _, err := l.Append(testPayload(8, 300), nil); !errors.Is(err, errInjected) {
		t.Fatalf("Append whose directory fsync fails: %v, want the injected error", err)
	}
	if got := l.DurableIndex(); got != 7 {
		t.Fatalf("DurableIndex after the failed directory fsync = %d, want 7", got)
	}
	mustNotFound(t, l, 8)
	next := testPayload(80, 300)
	mustAppend(t, l, next, 8)
	mustRead(t, l, 8, next)
	closeLog(t, l)
	l2, _ := openLog(t, dir, Options{SegmentSize: 1000, Logger: discardLogger()})
	for i := 1; i <= 7; i++ {
		mustRead(t, l2, uint64(i), testPayload(i, 300))
	}
	mustRead(t, l2, 8, next)
	mustNotFound(t, l2, 9)
}
