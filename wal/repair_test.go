package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// repairPayloads are the records of the corruption tests: mixed sizes, the
// last one long enough that its length prefix takes two bytes.
func repairPayloads() [][]byte {
	var out [][]byte
	for i := 1; i <= 11; i++ {
		out = append(out, testPayload(i, 20+i*7))
	}
	return append(out, testPayload(12, 150))
}

// tailInfo describes the tail segment after simulateCrashBeforeRoll.
type tailInfo struct {
	name  string
	start uint64
	data  []byte
}

// simulateCrashBeforeRoll makes record n the last entry of the tail segment.
// When record n filled its segment, the log rolled to a new empty segment
// n+1 after writing it; a crash while record n was being written happens
// before that roll, so the empty successor is removed.
func simulateCrashBeforeRoll(t *testing.T, dir string, n uint64) tailInfo {
	t.Helper()
	segs := segmentFiles(t, dir)
	tail := segs[len(segs)-1]
	if tail.index == n+1 {
		p := filepath.Join(dir, tail.name)
		if st, err := os.Stat(p); err != nil || st.Size() != 0 {
			t.Fatalf("segment %s after the last record is not empty (%v)", tail.name, err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		tail = segs[len(segs)-2]
	}
	data, err := os.ReadFile(filepath.Join(dir, tail.name))
	if err != nil {
		t.Fatal(err)
	}
	return tailInfo{name: tail.name, start: tail.index, data: data}
}

func truncateFile(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.Truncate(path, int64(size)); err != nil {
		t.Fatal(err)
	}
}

// checkReport asserts the repair report and its evidence file.
func checkReport(t *testing.T, dir string, rep *RepairReport, seg string, offset int, cut []byte, kept int) {
	t.Helper()
	if rep == nil {
		t.Fatalf("no repair report, want a cut of %d bytes at %s:%d", len(cut), seg, offset)
	}
	if rep.Segment != seg || rep.Offset != int64(offset) || rep.CutBytes != int64(len(cut)) || rep.KeptEntries != kept {
		t.Fatalf("report %s; want segment %s offset %d cut %d kept %d", rep, seg, offset, len(cut), kept)
	}
	if rep.Reason == "" {
		t.Fatalf("report has no reason: %s", rep)
	}
	if len(rep.RemovedSegments) != 0 {
		t.Fatalf("open removed segments: %s", rep)
	}
	files := cutFiles(t, dir)
	if len(files) != 1 || files[0] != rep.Evidence {
		t.Fatalf("evidence files %v, report names %q", files, rep.Evidence)
	}
	ev, err := os.ReadFile(rep.Evidence)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ev, cut) {
		t.Fatalf("evidence holds %d bytes %x, want the %d cut bytes %x", len(ev), head(ev), len(cut), head(cut))
	}
	// The file ends at the cut, or holds zeros only after it (the open
	// log padded it again: doc.go, "Preallocation").
	data, err := os.ReadFile(filepath.Join(dir, seg))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < offset || !allZero(data[offset:]) {
		t.Fatalf("segment %s is %d bytes after the cut, want %d followed by zeros only", seg, len(data), offset)
	}
}

// checkRecovered asserts that the repaired log holds payloads[:durable] and
// that the next Append gets index durable+1, also after a reopen.
func checkRecovered(t *testing.T, dir string, opts Options, l *Log, payloads [][]byte, durable uint64) {
	t.Helper()
	if got := l.DurableIndex(); got != durable {
		t.Fatalf("DurableIndex = %d, want %d", got, durable)
	}
	for i := uint64(1); i <= durable; i++ {
		mustRead(t, l, i, payloads[i-1])
	}
	mustNotFound(t, l, durable+1)
	next := []byte(fmt.Sprintf("after recovery at %d", durable+1))
	mustAppend(t, l, next, durable+1)
	mustRead(t, l, durable+1, next)
	closeLog(t, l)
	l2, rep := openLog(t, dir, opts)
	if rep != nil {
		t.Fatalf("second open after recovery reported a repair: %s", rep)
	}
	if got := l2.DurableIndex(); got != durable+1 {
		t.Fatalf("DurableIndex after reopen = %d, want %d", got, durable+1)
	}
	mustRead(t, l2, durable+1, next)
}

// TestRepairTornTailEveryOffset cuts the tail segment at every byte inside
// the last record (etcd repair_test.go): the torn record is cut, reported
// and kept as evidence; everything before it survives.
func TestRepairTornTailEveryOffset(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		src := filepath.Join(t.TempDir(), "wal")
		payloads := repairPayloads()
		n := uint64(len(payloads))
		writeLog(t, src, opts, payloads)
		tail := simulateCrashBeforeRoll(t, src, n)
		recStart := len(tail.data) - entryLen(len(payloads[n-1]))
		if recStart < 0 {
			t.Fatalf("record %d is not the last entry of %s", n, tail.name)
		}
		kept := int(n - tail.start) // entries of the tail before record n
		for off := recStart; off < len(tail.data); off++ {
			t.Run(fmt.Sprintf("CutAt%d", off), func(t *testing.T) {
				t.Parallel()
				dir := copyDir(t, src)
				truncateFile(t, filepath.Join(dir, tail.name), off)
				l, rep := openLog(t, dir, opts)
				if off == recStart {
					// Cut exactly between records: a clean, shorter log.
					if rep != nil {
						t.Fatalf("cut at a record boundary reported a repair: %s", rep)
					}
				} else {
					checkReport(t, dir, rep, tail.name, recStart, tail.data[recStart:off], kept)
				}
				checkRecovered(t, dir, opts, l, payloads, n-1)
			})
		}
	})
}

// TestRepairZeroFilledTail: a tail extended with zeros (the zero padding
// of a preallocated segment left by a crash, or a file size that reached
// the disk before its data) holds no records: Open cuts nothing, reports
// nothing, and the next record is written over the zeros at the next
// index.
func TestRepairZeroFilledTail(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		dir := filepath.Join(t.TempDir(), "wal")
		payloads := repairPayloads()
		n := uint64(len(payloads))
		writeLog(t, dir, opts, payloads)
		segs := segmentFiles(t, dir)
		tail := segs[len(segs)-1]
		path := filepath.Join(dir, tail.name)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		zeros := make([]byte, 4096)
		if err := os.WriteFile(path, append(append([]byte(nil), data...), zeros...), 0o640); err != nil {
			t.Fatal(err)
		}
		l, rep := openLog(t, dir, opts)
		if rep != nil {
			t.Fatalf("a zero tail reported a repair: %s", rep)
		}
		if files := cutFiles(t, dir); len(files) != 0 {
			t.Fatalf("evidence files %v for a zero tail", files)
		}
		checkRecovered(t, dir, opts, l, payloads, n)
	})
}

// TestRepairFlippedBitInLastRecord flips one bit in each byte of the last
// record: the checksum (or the length prefix) catches it and the log is
// cut at that record.
func TestRepairFlippedBitInLastRecord(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		src := filepath.Join(t.TempDir(), "wal")
		payloads := repairPayloads()
		n := uint64(len(payloads))
		writeLog(t, src, opts, payloads)
		tail := simulateCrashBeforeRoll(t, src, n)
		recStart := len(tail.data) - entryLen(len(payloads[n-1]))
		for off := recStart; off < len(tail.data); off++ {
			bit := byte(1) << (off % 8)
			t.Run(fmt.Sprintf("Byte%dBit%d", off, off%8), func(t *testing.T) {
				t.Parallel()
				dir := copyDir(t, src)
				bad := append([]byte(nil), tail.data...)
				bad[off] ^= bit
				if err := os.WriteFile(filepath.Join(dir, tail.name), bad, 0o640); err != nil {
					t.Fatal(err)
				}
				l, rep := openLog(t, dir, opts)
				checkReport(t, dir, rep, tail.name, recStart, bad[recStart:], int(n-tail.start))
				checkRecovered(t, dir, opts, l, payloads, n-1)
			})
		}
	})
}

// TestRepairCorruptRecordInsideTail: corruption before the last record cuts
// there; the later, intact records are in the evidence file only.
func TestRepairCorruptRecordInsideTail(t *testing.T) {
	t.Parallel()
	opts := Options{NoSync: true, Logger: discardLogger()}
	dir := filepath.Join(t.TempDir(), "wal")
	payloads := repairPayloads()
	writeLog(t, dir, opts, payloads)
	tail := simulateCrashBeforeRoll(t, dir, uint64(len(payloads)))
	// Record 9 starts after the entries of records 1..8.
	recStart := 0
	for _, p := range payloads[:8] {
		recStart += entryLen(len(p))
	}
	bad := append([]byte(nil), tail.data...)
	bad[recStart+entryLen(len(payloads[8]))-1] ^= 0x40 // last payload byte of record 9
	if err := os.WriteFile(filepath.Join(dir, tail.name), bad, 0o640); err != nil {
		t.Fatal(err)
	}
	l, rep := openLog(t, dir, opts)
	checkReport(t, dir, rep, tail.name, recStart, bad[recStart:], 8)
	checkRecovered(t, dir, opts, l, payloads, 8)
}

func TestRepairCleanLogNoReport(t *testing.T) {
	t.Parallel()
	testAllPermutations(t, func(t *testing.T, opts Options) {
		dir := filepath.Join(t.TempDir(), "wal")
		payloads := repairPayloads()
		writeLog(t, dir, opts, payloads)
		l, rep := openLog(t, dir, opts)
		if rep != nil {
			t.Fatalf("clean log reported a repair: %s", rep)
		}
		if files := cutFiles(t, dir); len(files) != 0 {
			t.Fatalf("clean log left evidence files %v", files)
		}
		checkRecovered(t, dir, opts, l, payloads, uint64(len(payloads)))
	})
	t.Run("EmptyDirectory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		l, rep := openLog(t, dir, Options{Logger: discardLogger()})
		if rep != nil || l.DurableIndex() != 0 || l.FirstIndex() != 1 {
			t.Fatalf("empty dir: report %s, DurableIndex %d, FirstIndex %d", rep, l.DurableIndex(), l.FirstIndex())
		}
	})
}

// TestRepairHalfFinishedTruncateFront leaves the files of a TruncateProjected
// of an earlier build interrupted inside tidwall's TruncateFront (a .START
// copy of the new first segment, some old segments deleted or not): Open
// finishes the truncation.
func TestRepairHalfFinishedTruncateFront(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		deleteUpTo int // old segments [0, deleteUpTo] already deleted; -1 none
	}{
		{"StartWrittenNothingDeleted", -1},
		{"StartWrittenSomeDeleted", 0},
		{"StartWrittenAllDeletedNotRenamed", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts, dir, payloads, segs := writeSegmentedLog(t)
			keep := segs[2] // TruncateFront(keep.index) was running
			writeSegmentCopy(t, dir, keep, ".START", readSegment(t, dir, keep))
			for i := 0; i <= tc.deleteUpTo; i++ {
				if err := os.Remove(filepath.Join(dir, segs[i].name)); err != nil {
					t.Fatal(err)
				}
			}
			l, rep := openLog(t, dir, opts)
			if rep != nil {
				t.Fatalf("unexpected repair: %s", rep)
			}
			if l.FirstIndex() != keep.index || l.DurableIndex() != 30 {
				t.Fatalf("FirstIndex %d DurableIndex %d, want %d, 30", l.FirstIndex(), l.DurableIndex(), keep.index)
			}
			mustNotFound(t, l, keep.index-1)
			for i := keep.index; i <= 30; i++ {
				mustRead(t, l, i, payloads[i-1])
			}
			if _, err := os.Stat(filepath.Join(dir, keep.name+".START")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf(".START file left behind: %v", err)
			}
		})
	}
}

// readRecover calls l.Read and turns a panic into an error, so that a
// panicking Read fails one test instead of the whole binary.
func readRecover(l *Log, idx uint64) (p []byte, panicked any, err error) {
	defer func() { panicked = recover() }()
	p, err = l.Read(idx)
	return p, nil, err
}

// sealedCorruptionLog writes records whose sizes make one single-bit flip in
// the first length prefix merge entries 1 and 2 (32 | 64 = 96), all in a
// sealed segment: segment 1 holds records 1..5, the tail starts at 6.
func sealedCorruptionLog(t *testing.T) (string, Options, [][]byte) {
	t.Helper()
	opts := Options{SegmentSize: tinySegment, NoSync: true, Logger: discardLogger()}
	dir := filepath.Join(t.TempDir(), "wal")
	payloads := [][]byte{
		testPayload(1, 27),  // entry 1+32 = 33 bytes, prefix 0x20
		testPayload(2, 58),  // entry 1+63 = 64 bytes
		testPayload(3, 27),  // 33
		testPayload(4, 27),  // 33
		testPayload(5, 100), // 106: 269 >= 256, the log rolls after it
		testPayload(6, 10),
	}
	writeLog(t, dir, opts, payloads)
	segs := segmentFiles(t, dir)
	if len(segs) != 2 || segs[1].index != 6 {
		t.Fatalf("test setup: segments %v, want 1 and 6", segs)
	}
	return dir, opts, payloads
}

// TestSealedSegmentMissingRecordReadReturnsError: a sealed segment that lost
// its last record (a whole entry) must make Read fail with
// ErrCorruptRecord, not panic.
func TestSealedSegmentMissingRecordReadReturnsError(t *testing.T) {
	t.Parallel()
	dir, opts, payloads := sealedCorruptionLog(t)
	seg1 := filepath.Join(dir, segName(1))
	st, err := os.Stat(seg1)
	if err != nil {
		t.Fatal(err)
	}
	truncateFile(t, seg1, int(st.Size())-entryLen(len(payloads[4])))
	l, _ := openLog(t, dir, opts)
	for i := uint64(1); i <= 4; i++ {
		mustRead(t, l, i, payloads[i-1])
	}
	p, panicked, err := readRecover(l, 5)
	if panicked != nil {
		t.Fatalf("Read(5) of a sealed segment missing its last record panicked: %v", panicked)
	}
	if !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("Read(5) = %q, %v; want ErrCorruptRecord", head(p), err)
	}
}

// TestSealedSegmentFlippedLengthBitNeverReturnsWrongRecord: one flipped bit
// in a sealed segment's length prefix (0x20 -> 0x60) makes the segment's
// framing see records 1+2 as one entry. Read must then fail for the damaged indexes; it
// must never hand out another index's record, and never panic.
func TestSealedSegmentFlippedLengthBitNeverReturnsWrongRecord(t *testing.T) {
	t.Parallel()
	dir, opts, payloads := sealedCorruptionLog(t)
	seg1 := filepath.Join(dir, segName(1))
	data, err := os.ReadFile(seg1)
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != 0x20 {
		t.Fatalf("test setup: first length prefix %#x, want 0x20", data[0])
	}
	data[0] ^= 0x40
	if err := os.WriteFile(seg1, data, 0o640); err != nil {
		t.Fatal(err)
	}
	l, _ := openLog(t, dir, opts)
	for i := uint64(1); i <= 6; i++ {
		p, panicked, err := readRecover(l, i)
		switch {
		case panicked != nil:
			t.Errorf("Read(%d) panicked: %v", i, panicked)
		case err == nil && !bytes.Equal(p, payloads[i-1]):
			t.Errorf("Read(%d) returned the record %q..., not its own %q...", i, head(p), head(payloads[i-1]))
		case err != nil && !errors.Is(err, ErrCorruptRecord):
			t.Errorf("Read(%d): %v, want ErrCorruptRecord", i, err)
		}
	}
}
