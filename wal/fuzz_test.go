package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeRecord: DecodeRecord never panics, accepts exactly what
// EncodeRecord produces, and rejects any single flipped bit.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte{}, uint(0))
	f.Add([]byte{RecordVersion}, uint(3))
	f.Add([]byte{RecordVersion, 0, 0, 0, 0}, uint(9))
	f.Add(EncodeRecord(nil, nil), uint(0))
	f.Add(EncodeRecord(nil, []byte(`{"items":[{"queue":"q","payload":1}]}`)), uint(77))
	f.Add(EncodeRecord(nil, bytes.Repeat([]byte{0}, 64)), uint(40))
	v2 := EncodeRecord(nil, []byte("future"))
	v2[0] = 2
	f.Add(v2, uint(1))
	f.Fuzz(func(t *testing.T, data []byte, bit uint) {
		// DecodeRecord has no length-dependent branch past the header, but
		// hash/crc32 switches code paths at 504 and 4032 bytes. Inputs that
		// reach them count as new coverage, and the fuzzer's minimisation
		// (quadratic in the input length, up to -fuzzminimizetime, 60 s by
		// default) then stalls a 30 s run at 0 execs/s.
		if len(data) > 500 {
			data = data[:500]
		}
		// Arbitrary input: no panic; what decodes re-encodes to the input.
		if p, err := DecodeRecord(data); err == nil {
			if re := EncodeRecord(nil, p); !bytes.Equal(re, data) {
				t.Fatalf("DecodeRecord accepted %x, which does not re-encode to itself (%x)", data, re)
			}
		} else if !errors.Is(err, ErrCorruptRecord) && !errors.Is(err, ErrUnknownVersion) {
			t.Fatalf("DecodeRecord: unexpected error %v", err)
		}

		// Any payload round-trips, appended after existing bytes too.
		rec := EncodeRecord(nil, data)
		if len(rec) != len(data)+headerSize {
			t.Fatalf("EncodeRecord: %d bytes for a %d-byte payload", len(rec), len(data))
		}
		p, err := DecodeRecord(rec)
		if err != nil {
			t.Fatalf("DecodeRecord(EncodeRecord(p)): %v", err)
		}
		if !bytes.Equal(p, data) {
			t.Fatalf("round trip changed the payload: %x -> %x", data, p)
		}
		prefixed := EncodeRecord([]byte("prefix"), data)
		if !bytes.Equal(prefixed[6:], rec) {
			t.Fatalf("EncodeRecord with a non-empty dst wrote %x, want %x", prefixed[6:], rec)
		}

		// CRC-32C detects every single-bit error.
		bad := append([]byte(nil), rec...)
		pos := bit % uint(len(bad)*8)
		bad[pos/8] ^= 1 << (pos % 8)
		if p, err := DecodeRecord(bad); err == nil {
			t.Fatalf("flipping bit %d went unnoticed (payload %x)", pos, p)
		}
	})
}

// segmentBytes builds a segment file (tidwall's layout) holding records
// for payloads.
func segmentBytes(payloads ...[]byte) []byte {
	var seg []byte
	for _, p := range payloads {
		rec := EncodeRecord(nil, p)
		seg = binary.AppendUvarint(seg, uint64(len(rec)))
		seg = append(seg, rec...)
	}
	return seg
}

func addSegmentSeeds(f *testing.F) {
	good := segmentBytes([]byte("one"), []byte("two"), bytes.Repeat([]byte("x"), 200))
	f.Add([]byte{}, uint16(1024), int8(-1))
	f.Add(good, uint16(1024), int8(-1))
	f.Add(good, uint16(1024), int8(2))
	f.Add(good, uint16(100), int8(-1)) // third record above the limit
	f.Add(good[:len(good)-1], uint16(1024), int8(-1))
	f.Add(append(append([]byte(nil), good...), make([]byte, 64)...), uint16(1024), int8(-1))
	f.Add(append(append([]byte(nil), good...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), uint16(1024), int8(-1))
	flipped := append([]byte(nil), good...)
	flipped[10] ^= 4
	f.Add(flipped, uint16(1024), int8(-1))
}

// FuzzScanSegment feeds arbitrary bytes as a segment file to the repair
// scan: no panic, the good offset is within bounds and ends a prefix of
// verified records that rescans cleanly.
func FuzzScanSegment(f *testing.F) {
	addSegmentSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, maxRecord uint16, maxEntries int8) {
		good, n, reason := scanSegment(data, int(maxEntries))
		if good < 0 || good > int64(len(data)) {
			t.Fatalf("good offset %d outside [0, %d]", good, len(data))
		}
		if n < 0 || (maxEntries >= 0 && n > int(maxEntries)) {
			t.Fatalf("%d entries (maxEntries %d)", n, maxEntries)
		}
		// Clean means: every byte after the kept records is zero padding.
		if maxEntries < 0 && (reason == "") != allZero(data[good:]) {
			t.Fatalf("reason %q with good %d of %d bytes", reason, good, len(data))
		}
		// The kept prefix is exactly n verified records.
		rest, count := data[:good], 0
		for len(rest) > 0 {
			size, k := binary.Uvarint(rest)
			if k <= 0 || size > uint64(len(rest)-k) {
				t.Fatalf("kept prefix has a torn entry at count %d", count)
			}
			if _, err := DecodeRecord(rest[k : k+int(size)]); err != nil {
				t.Fatalf("kept entry %d fails verification: %v", count, err)
			}
			rest = rest[k+int(size):]
			count++
		}
		if count != n {
			t.Fatalf("kept prefix holds %d entries, scan says %d", count, n)
		}
		g2, n2, r2 := scanSegment(data[:good], -1)
		if g2 != good || n2 != n || r2 != "" {
			t.Fatalf("rescan of the kept prefix: good %d n %d reason %q; want %d %d \"\"", g2, n2, r2, good, n)
		}
	})
}

// FuzzOpenSegment writes arbitrary bytes as the only segment file and opens
// the log: Open always succeeds, keeps exactly the verified prefix, and the
// log is writable at the next index.
func FuzzOpenSegment(f *testing.F) {
	addSegmentSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, maxRecord uint16, flags int8) {
		noPrealloc := flags&1 != 0
		if maxRecord == 0 {
			maxRecord = 1
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(1)), data, 0o640); err != nil {
			t.Fatal(err)
		}
		good, n, reason := scanSegment(data, -1)
		// A small segment keeps the zero padding (and the prepared next
		// segment) a few KiB, so an exec writes little besides the input.
		l, rep, err := Open(dir, Options{NoSync: true, SegmentSize: 4096, MaxRecordBytes: int(maxRecord), NoPreallocate: noPrealloc, Logger: discardLogger()})
		if err != nil {
			t.Fatalf("Open: %v (report %s)", err, rep)
		}
		defer l.Close()
		if (rep == nil) != (reason == "") {
			t.Fatalf("report %s for good %d of %d bytes (reason %q)", rep, good, len(data), reason)
		}
		// The cut is reported up to its last non-zero byte.
		if rep != nil && (rep.Offset != good || rep.CutBytes != int64(zeroTailStart(data[good:]))) {
			t.Fatalf("report %s, want cut at %d", rep, good)
		}
		if got := l.DurableIndex(); got != uint64(n) {
			t.Fatalf("DurableIndex %d, want %d", got, n)
		}
		rest := data[:good]
		for i := uint64(1); i <= uint64(n); i++ {
			size, k := binary.Uvarint(rest)
			want, _ := DecodeRecord(rest[k : k+int(size)])
			rest = rest[k+int(size):]
			got, err := l.Read(i)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Read(%d) = %x, %v; want %x", i, got, err, want)
			}
			// The read-only reader (queen wal status) agrees with the log.
			if got, err := ReadRecordAt(dir, i); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("ReadRecordAt(%d) = %x, %v; want %x", i, got, err, want)
			}
		}
		if _, err := ReadRecordAt(dir, uint64(n)+1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ReadRecordAt(%d) past the last record: %v, want ErrNotFound", n+1, err)
		}
		idx, err := l.Append([]byte("n"), nil) // 1 byte: within any maxRecord
		if err != nil || idx != uint64(n)+1 {
			t.Fatalf("Append = %d, %v; want %d", idx, err, n+1)
		}
	})
}
