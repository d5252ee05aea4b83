package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestScan reads every record from an index on, across segments, stops
// early on ErrStopScan, treats a torn tail of the newest segment as the
// end (the writer is there), and stops with ErrCorruptRecord, naming the
// index, at a damaged record of a sealed segment.
func TestScan(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	var payloads [][]byte
	for i := range 60 {
		payloads = append(payloads, []byte(fmt.Sprintf("record-%03d-%0200d", i+1, 0)))
	}
	opts := Options{SegmentSize: 2048, Logger: discardLogger()}
	writeLog(t, dir, opts, payloads)
	segs, err := listSegments(dir)
	if err != nil || len(segs) < 3 {
		t.Fatalf("%d segments, %v: want several", len(segs), err)
	}
	scan := func(from uint64, stopAfter int) ([]uint64, error) {
		var got []uint64
		err := Scan(dir, from, func(i uint64, p []byte) error {
			if want := payloads[i-1]; string(p) != string(want) {
				return fmt.Errorf("record %d = %q", i, p)
			}
			got = append(got, i)
			if len(got) == stopAfter {
				return ErrStopScan
			}
			return nil
		})
		return got, err
	}
	if got, err := scan(0, 0); err != nil || len(got) != 60 || got[0] != 1 || got[59] != 60 {
		t.Fatalf("all: %v %v", got, err)
	}
	if got, err := scan(segs[1].index+1, 0); err != nil || len(got) != int(61-segs[1].index-1) || got[0] != segs[1].index+1 {
		t.Fatalf("from %d: %v %v", segs[1].index+1, got, err)
	}
	if got, err := scan(5, 3); err != nil || fmt.Sprint(got) != "[5 6 7]" {
		t.Fatalf("stop after 3: %v %v", got, err)
	}
	// A record being written: a length prefix and part of the record at
	// the end of the newest segment.
	last := filepath.Join(dir, segs[len(segs)-1].name)
	b, _ := os.ReadFile(last)
	if err := os.WriteFile(last, append(b, 100, 1, 2, 3), 0o640); err != nil {
		t.Fatal(err)
	}
	if got, err := scan(0, 0); err != nil || len(got) != 60 {
		t.Fatalf("torn tail: %d records, %v; want 60 and no error", len(got), err)
	}
	// A flipped byte in a sealed segment.
	first := filepath.Join(dir, segs[0].name)
	b, _ = os.ReadFile(first)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(first, b, 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := scan(0, 0)
	if !errors.Is(err, ErrCorruptRecord) || len(got) == 0 || got[len(got)-1] >= segs[1].index-1 {
		t.Fatalf("corrupt sealed segment: %v, %v", got, err)
	}
	t.Logf("stopped after %v: %v", got[len(got)-1], err)
}
