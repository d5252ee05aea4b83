package wal

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestTailBufferFilledInPlace: records are appended into the tail
// segment's buffer without reallocating it (the cost the segment store
// exists to avoid), and each sealed segment's buffer is a new one, so
// slices Read returned earlier keep their bytes.
func TestTailBufferFilledInPlace(t *testing.T) {
	t.Parallel()
	const seg = 64 << 10
	b := setup(t, Options{SegmentSize: seg, NoSync: true, Logger: discardLogger()})
	p := bytes.Repeat([]byte("x"), 1000)
	mustAppend(t, b.log, p, 1)
	first, err := b.log.Read(1)
	if err != nil {
		t.Fatal(err)
	}
	tail := func() *segment {
		b.log.st.mu.Lock()
		defer b.log.st.mu.Unlock()
		return b.log.st.segs[len(b.log.st.segs)-1]
	}
	t0 := tail()
	base := &t0.buf[:1][0]
	for i := uint64(2); tail() == t0; i++ {
		mustAppend(t, b.log, p, i)
		if tail() == t0 && &t0.buf[:1][0] != base {
			t.Fatalf("tail buffer reallocated after record %d (%d bytes)", i, len(t0.buf))
		}
	}
	if !bytes.Equal(first, p) {
		t.Fatal("a payload read before the roll changed")
	}
}

// TestOpenFinishesTidwallTruncateBack: a "<index>.END" file (tidwall's
// TruncateBack cut short by a crash) becomes the last segment on open and
// the segments after it go.
func TestOpenFinishesTidwallTruncateBack(t *testing.T) {
	t.Parallel()
	opts, dir, payloads, segs := writeSegmentedLog(t)
	if len(segs) < 4 {
		t.Fatalf("want at least 4 segments, have %d", len(segs))
	}
	end := segs[1]
	data := readSegment(t, dir, end)
	writeSegmentCopy(t, dir, end, ".END", data)
	l, _ := openLog(t, dir, opts)
	if got := segmentFiles(t, dir); len(got) != 2 {
		t.Fatalf("segments after open: %v, want the first two", got)
	}
	last := segs[2].index - 1
	if l.DurableIndex() != last {
		t.Fatalf("DurableIndex %d, want %d", l.DurableIndex(), last)
	}
	for i := uint64(1); i <= last; i++ {
		got, err := l.Read(i)
		if err != nil || !bytes.Equal(got, payloads[i-1]) {
			t.Fatalf("Read(%d): %v", i, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, end.name+".END")); !os.IsNotExist(err) {
		t.Fatalf("the .END file is still there: %v", err)
	}
}

// TestOpenRepairsTailLeftByTidwallTruncateBack: the ".END" file that an
// interrupted TruncateBack leaves becomes the tail, so it is the segment
// the repair on open scans: a last record in it that fails its checksum
// is cut (with evidence and a report), not left in the tail for new
// records to follow; the segment the truncation was removing is not
// reported.
func TestOpenRepairsTailLeftByTidwallTruncateBack(t *testing.T) {
	t.Parallel()
	opts, dir, payloads, segs := writeSegmentedLog(t)
	if len(segs) < 4 {
		t.Fatalf("want at least 4 segments, have %d", len(segs))
	}
	end := segs[1]
	data := readSegment(t, dir, end)
	data[len(data)-1] ^= 0x01 // the last record's payload: its checksum fails
	writeSegmentCopy(t, dir, end, ".END", data)
	l, rep := openLog(t, dir, opts)
	last := segs[2].index - 2 // the END segment's last record was cut
	if rep == nil || rep.Segment != end.name || rep.KeptEntries != int(last-end.index+1) || rep.Evidence == "" {
		t.Fatalf("repair report %s, want a cut of the last record of %s with evidence", rep, end.name)
	}
	if l.DurableIndex() != last {
		t.Fatalf("DurableIndex %d, want %d", l.DurableIndex(), last)
	}
	for i := uint64(1); i <= last; i++ {
		got, err := l.Read(i)
		if err != nil || !bytes.Equal(got, payloads[i-1]) {
			t.Fatalf("Read(%d): %v", i, err)
		}
	}
	next := testPayload(99, 100)
	mustAppend(t, l, next, last+1)
	mustRead(t, l, last+1, next)
}

// writeSegmentedLog creates a log in a fresh temp dir holding 30 payloads
// of 100 bytes (testPayload; index i holds payloads[i-1]) in tinySegment
// segments, and closes it. It returns the options it was written with, the
// dir, the payloads and the segment files in index order.
func writeSegmentedLog(t *testing.T) (opts Options, dir string, payloads [][]byte, segs []segFile) {
	t.Helper()
	opts = Options{SegmentSize: tinySegment, NoSync: true, Logger: discardLogger()}
	dir = filepath.Join(t.TempDir(), "wal")
	for i := 1; i <= 30; i++ {
		payloads = append(payloads, testPayload(i, 100))
	}
	writeLog(t, dir, opts, payloads)
	return opts, dir, payloads, segmentFiles(t, dir)
}

// readSegment returns the bytes of segment file seg in dir.
func readSegment(t *testing.T, dir string, seg segFile) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, seg.name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeSegmentCopy writes data to seg's file name plus suffix (".END",
// ".START": the files tidwall/wal leaves mid-truncation) in dir.
func writeSegmentCopy(t *testing.T, dir string, seg segFile, suffix string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, seg.name+suffix), data, 0o640); err != nil {
		t.Fatal(err)
	}
}
