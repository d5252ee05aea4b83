package wal

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// RepairReport says what Open (or a reopen after a failed write) cut from
// the log. A nil report means nothing was cut.
type RepairReport struct {
	// Segment is the file name of the segment that was cut.
	Segment string
	// Offset is the byte offset in Segment where the cut was made.
	Offset int64
	// CutBytes is how many bytes were removed from Segment, not counting
	// zero bytes at their end (the zero padding of a preallocated
	// segment, or the zeros of a torn write: nothing tells them apart).
	CutBytes int64
	// KeptEntries is how many entries Segment still holds after the cut.
	KeptEntries int
	// Reason is why the cut was made (torn record, bad checksum, rollback
	// of a failed write).
	Reason string
	// Evidence is the path of the copy of the cut bytes ("" when it could
	// not be written, for example on a full disk).
	Evidence string
	// RemovedSegments are whole segment files removed because every entry
	// in them was after the durable index (rollback of a failed write only).
	RemovedSegments []string
}

func (r *RepairReport) String() string {
	if r == nil {
		return "no repair"
	}
	return fmt.Sprintf("cut %d bytes of segment %s at offset %d (%s), kept %d entries, evidence %q, removed segments %v",
		r.CutBytes, r.Segment, r.Offset, r.Reason, r.KeptEntries, r.Evidence, r.RemovedSegments)
}

type segFile struct {
	name  string
	index uint64
}

// listSegments returns the segment files of dir (20-digit names) in index
// order.
func listSegments(dir string) ([]segFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []segFile
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || len(n) != 20 {
			continue
		}
		idx, err := strconv.ParseUint(n, 10, 64)
		if err != nil || idx == 0 {
			continue
		}
		out = append(out, segFile{name: n, index: idx})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].index < out[j].index })
	return out, nil
}

// scanSegment walks the entries of a segment and returns the byte offset
// after the last entry that verifies, how many entries verified, and why
// the scan stopped early ("" when the whole file verified: every byte
// after good is zero padding, doc.go "Preallocation"). maxEntries >= 0
// stops after that many entries (used to roll back to a durable index).
// A record is judged by its length fitting the file and its checksum only,
// never by a size limit: a limit lowered between runs must not cut records
// that were acknowledged. A zero length prefix starts the padding when
// every byte from it to the end of the file is zero; followed by anything
// else it is damage (a torn write whose first page did not reach the
// disk).
func scanSegment(data []byte, maxEntries int) (good int64, n int, reason string) {
	pos := 0
	for pos < len(data) {
		if data[pos] == 0 {
			if allZero(data[pos:]) {
				return int64(pos), n, ""
			}
			return int64(pos), n, "zero length prefix before non-zero bytes"
		}
		if maxEntries >= 0 && n == maxEntries {
			return int64(pos), n, "rollback of entries after the durable index"
		}
		size, k := binary.Uvarint(data[pos:])
		if k <= 0 {
			return int64(pos), n, "torn length prefix"
		}
		if size > uint64(len(data)-pos-k) {
			return int64(pos), n, "torn record (length runs past end of file)"
		}
		rec := data[pos+k : pos+k+int(size)]
		if _, err := DecodeRecord(rec); err != nil {
			return int64(pos), n, "record fails verification: " + err.Error()
		}
		pos += k + int(size)
		n++
	}
	return int64(pos), n, ""
}

// repair prepares dir for openSegStore. It cuts the tail segment at its
// first record that does not verify and, when keep >= 0, also removes every
// entry with an index above keep (the rollback after a failed write). It
// returns what it cut, or nil when it cut nothing. A truncation an earlier
// build's tidwall left half done is finished first (finishTruncation), so
// that the segment scanned is the tail the log then appends to.
func repair(dir string, keep int64) (*RepairReport, error) {
	if err := finishTruncation(dir); err != nil {
		return nil, err
	}
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 {
		return nil, nil
	}
	var rep *RepairReport
	// Rollback: drop segments that start after keep+1; empty the one that
	// starts exactly at keep+1 (it keeps the index numbering alive).
	if keep >= 0 {
		for len(segs) > 1 && segs[len(segs)-1].index > uint64(keep)+1 {
			last := segs[len(segs)-1]
			if err := os.Remove(filepath.Join(dir, last.name)); err != nil {
				return rep, fmt.Errorf("remove segment %s: %w", last.name, err)
			}
			if rep == nil {
				rep = &RepairReport{Reason: "rollback of entries after the durable index"}
			}
			rep.RemovedSegments = append(rep.RemovedSegments, last.name)
			segs = segs[:len(segs)-1]
		}
	}
	tail := segs[len(segs)-1]
	path := filepath.Join(dir, tail.name)
	data, err := os.ReadFile(path)
	if err != nil {
		return rep, fmt.Errorf("read segment %s: %w", tail.name, err)
	}
	maxEntries := -1
	if keep >= 0 {
		if uint64(keep)+1 <= tail.index {
			maxEntries = 0
		} else {
			maxEntries = int(uint64(keep) + 1 - tail.index)
		}
	}
	good, n, reason := scanSegment(data, maxEntries)
	if reason == "" { // all records verify; what follows is zero padding
		return rep, syncDirIf(dir, rep != nil)
	}
	if rep == nil {
		rep = &RepairReport{}
	}
	// The cut bytes up to their last non-zero one; zeros after it carry
	// nothing (padding, or a write that never reached the disk).
	cut := data[good : int(good)+zeroTailStart(data[good:])]
	rep.Segment, rep.Offset, rep.CutBytes, rep.KeptEntries, rep.Reason = tail.name, good, int64(len(cut)), n, reason
	// Keep evidence first; a failure to do so (full disk) must not stop the
	// cut, or the log could never be written again.
	evDir := filepath.Join(dir, "cut")
	ev := filepath.Join(evDir, fmt.Sprintf("%s.%d.bin", tail.name, time.Now().UnixNano()))
	if err := writeEvidence(evDir, ev, cut); err == nil {
		rep.Evidence = ev
	} else {
		_ = os.Remove(ev)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return rep, fmt.Errorf("open segment %s for cut: %w", tail.name, err)
	}
	defer f.Close()
	if err := f.Truncate(good); err != nil {
		return rep, fmt.Errorf("cut segment %s: %w", tail.name, err)
	}
	if err := f.Sync(); err != nil {
		return rep, fmt.Errorf("sync segment %s: %w", tail.name, err)
	}
	return rep, syncDir(dir)
}

func writeEvidence(evDir, path string, b []byte) error {
	if err := os.MkdirAll(evDir, 0o750); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(evDir)
}

func syncDirIf(dir string, do bool) error {
	if !do {
		return nil
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so that created, renamed or removed names in
// it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
