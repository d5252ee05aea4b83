package wal

import (
	"bytes"
	"errors"
	"github.com/queenmq/queen-go/internal/logbuf"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// preSeg is the segment size of the preallocation tests: a padded segment
// file is padSize(preSeg) = 8 KiB.
const preSeg = 4096

// waitPrepared waits until l's preparer has the next segment file ready
// for a roll (written in full, fsynced and handed over: the next roll
// takes it).
func waitPrepared(t *testing.T, l *Log) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(l.prep.ready) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no prepared segment in %s", l.dir)
		}
		time.Sleep(time.Millisecond)
	}
	if got := fileSize(t, filepath.Join(l.dir, preparedName)); got != padSize(l.opts.SegmentSize) {
		t.Fatalf("prepared segment is %d bytes, want %d", got, padSize(l.opts.SegmentSize))
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func verifyOK(t *testing.T, dir string) []SegmentReport {
	t.Helper()
	reps, ok, err := Verify(dir)
	if err != nil || !ok {
		t.Fatalf("Verify(%s): %v, ok %t: %+v", dir, err, ok, reps)
	}
	return reps
}

// TestPreallocAppendsOverwriteZeros: the tail is padded at open and group
// commits write over the zeros, so the file's size never changes (what
// lets fdatasync skip the journal); a copy of the directory taken while
// the log is open (what a crash leaves) opens without a repair, its zero
// tail is no damage, and the next record is written over the zeros.
func TestPreallocAppendsOverwriteZeros(t *testing.T) {
	t.Parallel()
	opts := Options{SegmentSize: preSeg, Logger: discardLogger()}
	b := setup(t, opts)
	seg := filepath.Join(b.dir, segName(1))
	if got := fileSize(t, seg); got != padSize(preSeg) {
		t.Fatalf("new tail is %d bytes, want padded to %d", got, padSize(preSeg))
	}
	var payloads [][]byte
	for i := 1; i <= 20; i++ {
		p := testPayload(i, 150)
		payloads = append(payloads, p)
		mustAppend(t, b.log, p, uint64(i))
		if got := fileSize(t, seg); got != padSize(preSeg) {
			t.Fatalf("after append %d the tail is %d bytes, want %d (unchanged)", i, got, padSize(preSeg))
		}
	}
	if got, want := b.log.Size(), int64(20*entryLen(150)); got != want {
		t.Fatalf("Size %d, want %d (records only, not the padding)", got, want)
	}
	crash := copyDir(t, b.dir)
	reps := verifyOK(t, crash)
	if len(reps) != 1 || reps[0].Records != 20 || reps[0].Padding != padSize(preSeg)-int64(20*entryLen(150)) {
		t.Fatalf("Verify of the crash image: %+v", reps)
	}
	var scanned int
	if err := Scan(crash, 1, func(index uint64, p []byte) error {
		if !bytes.Equal(p, payloads[index-1]) {
			t.Fatalf("Scan %d: %q", index, head(p))
		}
		scanned++
		return nil
	}); err != nil || scanned != 20 {
		t.Fatalf("Scan of the crash image: %d records, %v", scanned, err)
	}
	if _, err := ReadRecordAt(crash, 21); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadRecordAt(21) in the padding: %v, want ErrNotFound", err)
	}
	l, rep := openLog(t, crash, opts)
	if rep != nil {
		t.Fatalf("crash image with a zero tail reported a repair: %s", rep)
	}
	checkRecovered(t, crash, opts, l, payloads, 20)
}

// TestPreallocRecordAtPaddedEnd writes a record that ends one byte before
// the padded end, exactly at it, and one byte past it (the file grows):
// each reads back, the segment rolled from is cut to its records, and a
// reopen finds the same log.
func TestPreallocRecordAtPaddedEnd(t *testing.T) {
	t.Parallel()
	for _, off := range []int{-1, 0, 1} {
		t.Run(map[int]string{-1: "Before", 0: "Exactly", 1: "Past"}[off], func(t *testing.T) {
			t.Parallel()
			opts := Options{SegmentSize: preSeg, Logger: discardLogger()}
			b := setup(t, opts)
			first := testPayload(1, 100)
			mustAppend(t, b.log, first, 1)
			// The second entry (a 2-byte length prefix) ends at padSize+off.
			n := int(padSize(preSeg)) + off - entryLen(100) - 2 - headerSize
			second := testPayload(2, n)
			if entryLen(100)+entryLen(n) != int(padSize(preSeg))+off {
				t.Fatalf("test arithmetic: entries end at %d", entryLen(100)+entryLen(n))
			}
			mustAppend(t, b.log, second, 2)
			third := testPayload(3, 10)
			mustAppend(t, b.log, third, 3) // in segment 3 (the record above rolled)
			if got, want := fileSize(t, filepath.Join(b.dir, segName(1))), int64(entryLen(100)+entryLen(n)); got != want {
				t.Fatalf("sealed segment is %d bytes, want %d (its records, no padding)", got, want)
			}
			reps := verifyOK(t, copyDir(t, b.dir))
			if len(reps) != 2 || reps[0].Records != 2 || reps[0].Padding != 0 || reps[1].Records != 1 {
				t.Fatalf("Verify: %+v", reps)
			}
			for i, p := range [][]byte{first, second, third} {
				mustRead(t, b.log, uint64(i+1), p)
			}
			closeLog(t, b.log)
			l, rep := openLog(t, b.dir, opts)
			if rep != nil {
				t.Fatalf("reopen reported a repair: %s", rep)
			}
			for i, p := range [][]byte{first, second, third} {
				mustRead(t, l, uint64(i+1), p)
			}
		})
	}
}

// TestPreallocCraftedTails opens padded tail segments written by hand:
// the last record ending exactly at the end of the file or one byte
// before it (clean), a torn last record whose end never reached the disk
// (zeros), and one whose start never did (a zero length prefix before
// non-zero bytes). A torn record is cut and kept as evidence up to its
// last non-zero byte.
func TestPreallocCraftedTails(t *testing.T) {
	t.Parallel()
	recs := [][]byte{testPayload(1, 40), testPayload(2, 60), testPayload(3, 300)}
	whole := segmentBytes(recs...)
	lastStart := len(whole) - entryLen(300)
	for _, tc := range []struct {
		name string
		file []byte
		// cut is where the repair cuts (-1: none) and evidence what it keeps.
		cut      int
		evidence []byte
		kept     uint64
	}{
		{"EndsAtEOF", whole, -1, nil, 3},
		{"OneZeroByte", append(append([]byte(nil), whole...), 0), -1, nil, 3},
		{"EndZeroed", append(append([]byte(nil), whole[:len(whole)-100]...), make([]byte, 100+500)...), lastStart,
			whole[lastStart : len(whole)-100], 2},
		{"StartZeroed", append(append(append(append([]byte(nil), whole[:lastStart]...), make([]byte, 50)...), whole[lastStart+50:]...), make([]byte, 500)...),
			lastStart, append(make([]byte, 50), whole[lastStart+50:]...), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, noPrealloc := range []bool{false, true} {
				dir := filepath.Join(t.TempDir(), "wal")
				if err := os.MkdirAll(dir, 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, segName(1)), tc.file, 0o640); err != nil {
					t.Fatal(err)
				}
				opts := Options{NoPreallocate: noPrealloc, Logger: discardLogger()}
				var scanned uint64
				if err := Scan(dir, 1, func(uint64, []byte) error { scanned++; return nil }); err != nil {
					t.Fatalf("Scan: %v", err)
				}
				if scanned != tc.kept {
					t.Fatalf("Scan read %d records, want %d", scanned, tc.kept)
				}
				l, rep := openLog(t, dir, opts)
				if tc.cut < 0 {
					if rep != nil {
						t.Fatalf("clean padded tail reported a repair: %s", rep)
					}
				} else {
					checkReport(t, dir, rep, segName(1), tc.cut, tc.evidence, int(tc.kept))
				}
				checkRecovered(t, dir, opts, l, recs, tc.kept)
			}
		})
	}
}

// TestPreparedSegmentUnusedAtCrash: a crash leaves the prepared next
// segment (whole, or half written with stray bytes): it is no segment, so
// Open reports nothing, removes it, writes a new one, and the log goes on
// at the next index; Close removes the unused one.
func TestPreparedSegmentUnusedAtCrash(t *testing.T) {
	t.Parallel()
	opts := Options{SegmentSize: preSeg, Logger: discardLogger()}
	b := setup(t, opts)
	var payloads [][]byte
	for i := 1; i <= 5; i++ {
		payloads = append(payloads, testPayload(i, 100))
		mustAppend(t, b.log, payloads[i-1], uint64(i))
	}
	waitPrepared(t, b.log)
	whole := copyDir(t, b.dir)
	half := copyDir(t, b.dir)
	if err := os.WriteFile(filepath.Join(half, preparedName), []byte("stray bytes of a half-written file"), 0o640); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"whole": whole, "half": half} {
		l, rep := openLog(t, dir, opts)
		if rep != nil {
			t.Fatalf("%s: prepared segment reported a repair: %s", name, rep)
		}
		if got := segNames(t, dir); len(got) != 1 {
			t.Fatalf("%s: segments %v, want only segment 1", name, got)
		}
		waitPrepared(t, l)
		data, err := os.ReadFile(filepath.Join(dir, preparedName))
		if err != nil || !allZero(data) {
			t.Fatalf("%s: the new prepared segment is not all zeros (%v)", name, err)
		}
		// Fill segment 1 and roll into the prepared file.
		for i := 6; len(payloads) < 60; i++ {
			payloads = append(payloads, testPayload(i, 100))
		}
		for i := 6; i <= 60; i++ {
			mustAppend(t, l, payloads[i-1], uint64(i))
		}
		for i := uint64(1); i <= 60; i++ {
			mustRead(t, l, i, payloads[i-1])
		}
		closeLog(t, l)
		if _, err := os.Stat(filepath.Join(dir, preparedName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: Close left the prepared segment (%v)", name, err)
		}
		verifyOK(t, dir)
		payloads = payloads[:5]
	}
}

// TestRollTakesPreparedSegment: a roll renames the prepared file to the new
// segment, which is then padded from its first record on; the segment
// rolled from is cut to its records while the log runs.
func TestRollTakesPreparedSegment(t *testing.T) {
	t.Parallel()
	opts := Options{SegmentSize: preSeg, Logger: discardLogger()}
	b := setup(t, opts)
	waitPrepared(t, b.log)
	big := testPayload(1, preSeg) // fills segment 1: the roll follows it
	mustAppend(t, b.log, big, 1)
	mustAppend(t, b.log, testPayload(2, 10), 2)
	if got := segNames(t, b.dir); len(got) != 2 || got[1] != segName(2) {
		t.Fatalf("segments %v, want 1 and 2", got)
	}
	if got := fileSize(t, filepath.Join(b.dir, segName(2))); got != padSize(preSeg) {
		t.Fatalf("new tail is %d bytes, want the prepared %d", got, padSize(preSeg))
	}
	if got, want := fileSize(t, filepath.Join(b.dir, segName(1))), int64(entryLen(preSeg)); got != want {
		t.Fatalf("sealed segment is %d bytes, want %d", got, want)
	}
	waitPrepared(t, b.log) // the next one is written
	mustRead(t, b.log, 1, big)
	mustRead(t, b.log, 2, testPayload(2, 10))
}

// TestPreallocReadsAppendedLayout: a directory written by appending (the
// layout of builds before preallocation, NoPreallocate) opens with
// preallocation without a repair and goes on at the next index, and the
// other way round; after a clean Close both writers leave byte-identical
// segment files for the same records.
func TestPreallocReadsAppendedLayout(t *testing.T) {
	t.Parallel()
	payloads := func(from, to int) [][]byte {
		var out [][]byte
		for i := from; i <= to; i++ {
			out = append(out, testPayload(i, 37*i%500+1))
		}
		return out
	}
	files := func(dir string) map[string][]byte {
		out := map[string][]byte{}
		for _, n := range segNames(t, dir) {
			data, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			out[n] = data
		}
		if _, err := os.Stat(filepath.Join(dir, preparedName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("closed log %s holds a prepared segment (%v)", dir, err)
		}
		return out
	}
	write := func(dir string, noPrealloc bool, from int, ps [][]byte) {
		l, rep := openLog(t, dir, Options{SegmentSize: preSeg, NoPreallocate: noPrealloc, Logger: discardLogger()})
		if rep != nil {
			t.Fatalf("open reported a repair: %s", rep)
		}
		for i, p := range ps {
			mustAppend(t, l, p, uint64(from+i))
		}
		for i, p := range payloads(1, from+len(ps)-1) {
			mustRead(t, l, uint64(i+1), p)
		}
		closeLog(t, l)
	}
	appended := filepath.Join(t.TempDir(), "appended")
	write(appended, true, 1, payloads(1, 60))
	write(appended, true, 61, payloads(61, 120))
	for _, order := range [][2]bool{{true, false}, {false, true}, {false, false}} {
		dir := filepath.Join(t.TempDir(), "mixed")
		write(dir, order[0], 1, payloads(1, 60))
		write(dir, order[1], 61, payloads(61, 120))
		got, want := files(dir), files(appended)
		if len(got) != len(want) {
			t.Fatalf("NoPreallocate %v: segments %d, want %d", order, len(got), len(want))
		}
		for n, w := range want {
			if !bytes.Equal(got[n], w) {
				t.Fatalf("NoPreallocate %v: segment %s differs from the appended layout (%d bytes, want %d)", order, n, len(got[n]), len(w))
			}
		}
	}
}

// TestPreallocatedTailOnFullDisk: the padding reserves the tail's blocks,
// so appends that fit in it succeed on a full disk; once past it (the
// preparer cannot write a next segment either), they fail with ENOSPC as
// an appending log's do, and nothing failed is readable.
func TestPreallocatedTailOnFullDisk(t *testing.T) {
	t.Parallel()
	mnt := mountTmpfs(t, "256k")
	opts := Options{SegmentSize: 16 << 10, Logger: discardLogger()}
	dir := filepath.Join(mnt, "wal")
	l, _ := openLog(t, dir, opts)
	waitPrepared(t, l)
	fillDisk(t, filepath.Join(mnt, "filler"))
	// Segment 1 and the prepared segment 2 are reserved: 30 KiB of
	// records fit, in two segments.
	var n uint64
	for ; n < 30; n++ {
		mustAppend(t, l, testPayload(int(n+1), 1000), n+1)
	}
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = l.Append(testPayload(int(n+1), 1000), nil)
		if err == nil {
			n++
		}
	}
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("appends past the reserved segments: %v, want ENOSPC", err)
	}
	if got := l.DurableIndex(); got != n {
		t.Fatalf("DurableIndex %d, want %d", got, n)
	}
	for i := uint64(1); i <= n; i++ {
		mustRead(t, l, i, testPayload(int(i), 1000))
	}
	mustNotFound(t, l, n+1)
}

// TestPreallocSkippedOnLowSpace: with less free space than twice the
// padding (a 64 KiB file system, 4 MiB segments), neither the tail nor a
// next segment is padded, so the zeros never fill the disk under the
// appends: they go on by appending, and the refusal is logged.
func TestPreallocSkippedOnLowSpace(t *testing.T) {
	t.Parallel()
	mnt := mountTmpfs(t, "64k")
	var logs logbuf.Buffer
	dir := filepath.Join(mnt, "wal")
	l, _ := openLog(t, dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := 1; i <= 20; i++ {
		mustAppend(t, l, testPayload(i, 1000), uint64(i))
	}
	if got, want := fileSize(t, filepath.Join(dir, segName(1))), int64(20*entryLen(1000)); got != want {
		t.Fatalf("tail is %d bytes, want %d (its records: not padded)", got, want)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(logs.String(), errLowSpace.Error()) < 2 { // the tail and the prepared segment
		if time.Now().After(deadline) {
			t.Fatalf("low space not logged twice; log:\n%s", logs.String())
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, preparedName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a prepared segment was written on a file system without room (%v)", err)
	}
}
