package wal

import (
	"encoding/binary"
	"errors"
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
	// Records is how many records verify; Bytes the file size, of which
	// Padding is zero bytes after the last record (a preallocated tail,
	// doc.go "Preallocation"; 0 for a sealed segment).
	Records int
	Bytes   int64
	Padding int64
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
		if reason == "" {
			r.Padding = int64(len(data)) - good
		} else {
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
		if data[pos] == 0 && allZero(data[pos:]) {
			break // zero padding: the segment's records end here
		}
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

// ErrStopScan, returned by a Scan callback, ends the scan early; Scan then
// returns nil.
var ErrStopScan = errors.New("wal: stop scan")

// Scan calls fn with the index and payload of every record in dir whose
// index is at least from, in index order, reading the segment files
// directly: read-only, and safe beside a running broker (nothing is opened
// for writing, no lock is taken). payload aliases a buffer that is only
// valid during the call.
//
// In the newest segment, a record cut short at the end of the file (or
// starting with a zero length prefix), or one that does not verify and is
// followed by zeros only (a write into the
// zero padding of a preallocated segment, seen half done), is where the
// writer is (or a torn tail that the next Open repairs): the scan ends
// there without an error, so the last records shown may still be waiting
// for their fsync. Zero padding after the last record ends a segment's
// records in any segment. Anywhere else, a record that does not verify ends the
// scan with ErrCorruptRecord wrapped with the segment and index; a gap
// between segments ends it with an error naming the indexes. A segment
// removed while it is read (truncation by the broker) is an error too: run
// the scan again.
func Scan(dir string, from uint64, fn func(index uint64, payload []byte) error) error {
	segs, err := listSegments(dir)
	if err != nil {
		return err
	}
	for i, s := range segs {
		if i+1 < len(segs) && segs[i+1].index <= from {
			continue // every record of this segment is before from
		}
		data, err := os.ReadFile(filepath.Join(dir, s.name))
		if err != nil {
			return fmt.Errorf("wal: read segment %s: %w", s.name, err)
		}
		last := i+1 == len(segs)
		at := s.index
		for pos := 0; pos < len(data); at++ {
			if data[pos] == 0 && allZero(data[pos:]) {
				break // zero padding
			}
			size, k := binary.Uvarint(data[pos:])
			// A zero length prefix before non-zero bytes is a torn write
			// whose first page did not reach the disk.
			torn := k <= 0 || size == 0 || size > uint64(len(data)-pos-k)
			if torn && last {
				return nil
			}
			if torn {
				return fmt.Errorf("%w: segment %s is torn at record %d", ErrCorruptRecord, s.name, at)
			}
			end := pos + k + int(size)
			p, err := DecodeRecord(data[pos+k : end])
			if err != nil && last && end < len(data) && allZero(data[end:]) {
				return nil // the writer's record, half written into the padding
			}
			if err != nil {
				return fmt.Errorf("segment %s, record %d: %w", s.name, at, err)
			}
			pos += k + int(size)
			if at < from {
				continue
			}
			if err := fn(at, p); err != nil {
				if errors.Is(err, ErrStopScan) {
					return nil
				}
				return err
			}
		}
		if !last && at != segs[i+1].index {
			return fmt.Errorf("wal: segment %s ends before record %d but the next segment starts at %d", s.name, at, segs[i+1].index)
		}
	}
	return nil
}
