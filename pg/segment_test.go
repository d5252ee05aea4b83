package pg

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/google/uuid"
)

// TestAppendSegmentOffsets: the pop path's range decoder returns, for
// every range from..to over a segment (inside, overlapping either end,
// outside), exactly what DecodeSegment decodes for those offsets, with
// producer subjects, trace ids and the encrypted flag on some messages;
// a body whose count disagrees with its offsets, or that is cut short
// inside the range, is ErrBadSegment.
func TestAppendSegmentOffsets(t *testing.T) {
	pid := uuid.New()
	var msgs []Message
	for i := range 7 {
		m := Message{ID: uuid.New(), TransactionID: fmt.Sprintf("tx-%d", i), CreatedAtMicros: int64(1e15 + i),
			Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), Encrypted: i == 5}
		if i%2 == 1 {
			sub := fmt.Sprintf("sub-%d", i)
			m.ProducerSub = &sub
		}
		if i%3 == 0 {
			tr := uuid.New()
			m.TraceID = &tr
		}
		msgs = append(msgs, m)
	}
	const base, last = 100, 106
	body := EncodeSegment(nil, msgs)
	full, err := DecodeSegment(body)
	if err != nil {
		t.Fatal(err)
	}
	for from := int64(base - 2); from <= last+2; from++ {
		for to := from - 1; to <= last+2; to++ {
			prefix := []StoredMessage{{Offset: -1}}
			got, err := appendSegmentOffsets(prefix, pid, base, last, body, from, to)
			if err != nil {
				t.Fatalf("%d..%d: %v", from, to, err)
			}
			want := []StoredMessage{{Offset: -1}}
			for i := range full {
				if off := base + int64(i); off >= from && off <= to {
					want = append(want, StoredMessage{PartitionID: pid, Offset: off, Message: full[i]})
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%d..%d:\n got %+v\nwant %+v", from, to, got, want)
			}
		}
	}
	if _, err := appendSegmentOffsets(nil, pid, base, last+1, body, base, base); !errors.Is(err, ErrBadSegment) {
		t.Fatalf("count mismatch: %v", err)
	}
	cut := body[:len(body)-3]
	if _, err := appendSegmentOffsets(nil, pid, base, last, cut, last, last); !errors.Is(err, ErrBadSegment) {
		t.Fatalf("cut inside the range: %v", err)
	}
	if _, err := appendSegmentOffsets(nil, pid, base, last, append([]byte{9}, body[1:]...), base, base); !errors.Is(err, ErrBadSegment) {
		t.Fatalf("bad version: %v", err)
	}
}
