package ingest

import (
	"errors"
	"testing"
)

// TestRecordHeader: the header reads what EncodeRecord wrote, and a
// truncated or foreign payload is ErrBadRecord.
func TestRecordHeader(t *testing.T) {
	sub := "s"
	r := &Record{AcceptedAt: 1700000000123456, Items: []Item{
		{Queue: "q", Partition: "p", TransactionID: "t1", Payload: []byte(`1`)},
		{Queue: "q", Partition: "p", TransactionID: "t2", ProducerSub: &sub, Payload: []byte(`{"a":2}`)},
	}}
	b := EncodeRecord(nil, r)
	at, n, err := RecordHeader(b)
	if err != nil || at != r.AcceptedAt || n != 2 {
		t.Fatalf("RecordHeader = %d, %d, %v", at, n, err)
	}
	for _, bad := range [][]byte{nil, {recordKindPush}, {9, 0, 0}, b[:3]} {
		if _, _, err := RecordHeader(bad); !errors.Is(err, ErrBadRecord) {
			t.Errorf("RecordHeader(%x) error %v, want ErrBadRecord", bad, err)
		}
	}
}
