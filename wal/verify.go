package wal

import (
	"fmt"
	"os"
	"path/filepath"
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
