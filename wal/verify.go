package wal

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// SegmentReport describes one segment file as Verify found it.
type SegmentReport struct {
	// Name is the file name; FirstIndex the index of its first record.
	Name       string
	FirstIndex uint64
	// Records is how many records verify; Bytes the file size.
	Records int
	Bytes   int64
	// Problem is "" for a clean segment, else where and why it stops
	// verifying (the records after that point cannot be read).
	Problem string
}

// Verify reads every segment in dir (read-only; nothing is repaired) and
// checks every record's length prefix, envelope version and checksum.
// It returns one report per segment in index order; ok is false when any
// segment has a problem or the indexes of consecutive segments do not line
// up.
func Verify(dir string) (reports []SegmentReport, ok bool, err error) {
	segs, err := listSegments(dir)
	if err != nil {
		return nil, false, err
	}
	ok = true
	for i, s := range segs {
		data, err := os.ReadFile(filepath.Join(dir, s.name))
		if err != nil {
			return reports, false, err
		}
		good, n, reason := scanSegment(data, -1)
		r := SegmentReport{Name: s.name, FirstIndex: s.index, Records: n, Bytes: int64(len(data))}
		if reason != "" {
			r.Problem = fmt.Sprintf("at byte %d after %d records: %s", good, n, reason)
			ok = false
		}
		if i+1 < len(segs) && s.index+uint64(n) != segs[i+1].index && r.Problem == "" {
			r.Problem = fmt.Sprintf("holds records %d..%d but the next segment starts at %d",
				s.index, s.index+uint64(n)-1, segs[i+1].index)
			ok = false
		}
		reports = append(reports, r)
	}
	return reports, ok, nil
}

// ReadRecordAt returns the payload of the record at index in dir, reading
// the segment files directly (read-only; the log need not be open, and may
// be open in a running broker). Only records that verify are returned:
// ErrNotFound when no segment holds index, ErrCorruptRecord (wrapped) when
// the segment stops verifying before it.
func ReadRecordAt(dir string, index uint64) ([]byte, error) {
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].index > index }) - 1
	if i < 0 {
		return nil, ErrNotFound
	}
	data, err := os.ReadFile(filepath.Join(dir, segs[i].name))
	if err != nil {
		return nil, err
	}
	pos, at := 0, segs[i].index
	for pos < len(data) {
		size, k := binary.Uvarint(data[pos:])
		if k <= 0 || size > uint64(len(data)-pos-k) {
			return nil, fmt.Errorf("%w: segment %s is torn before record %d", ErrCorruptRecord, segs[i].name, index)
		}
		p, err := DecodeRecord(data[pos+k : pos+k+int(size)])
		if err != nil {
			return nil, fmt.Errorf("segment %s, record %d (reading %d): %w", segs[i].name, at, index, err)
		}
		if at == index {
			return p, nil
		}
		pos += k + int(size)
		at++
	}
	return nil, ErrNotFound
}
