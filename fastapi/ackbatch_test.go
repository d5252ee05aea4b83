package fastapi

import (
	"reflect"
	"testing"
)

// TestDecodeAckBatchReusedBuffer: decoding ack/batch bodies one after
// another into one kept buffer gives, for each, what decodeObject gives
// into a fresh value (errors included): nothing of an earlier body
// (its error text, its leaseId, more items) shows in a later one, and an
// empty or absent array stays told apart.
func TestDecodeAckBatchReusedBuffer(t *testing.T) {
	t.Parallel()
	bodies := []string{
		`{"consumerGroup":"g","acknowledgments":[{"transactionId":"a","partitionId":"p","leaseId":"l","status":"failed","error":"boom","consumerGroup":"x"},{"transactionId":"b"},{"transactionId":"c"}]}`,
		`{"acknowledgments":[{"transactionId":"d"}]}`,
		`{"acknowledgments":[]}`,
		`{}`,
		`{"acknowledgments":null}`,
		`{"acknowledgments":[{"transactionId":"e","partitionId":"q"},{"transactionId":"f"}]}`,
		`{"acknowledgments":[{"transactionId":5}]}`,
		`{"acknowledgments":{}}`,
		`{"acknowledgments":[{"transactionId":"g","error":"x"}],"acknowledgments":[{"partitionId":"r"}]}`,
		`{"acknowledgments":[{"status":"completed"}]}`,
		`not json`,
		`{"acknowledgments":[{"transactionId":"h"},{"transactionId":"i"},{"transactionId":"j"},{"transactionId":"k"},{"transactionId":"l"}]}`,
		`{"acknowledgments":[{"leaseId":"m"}]}`,
	}
	buf := new(ackBatchBuf)
	for round := range 2 {
		for _, b := range bodies {
			got, gotErr := decodeAckBatch([]byte(b), buf)
			var want ackBatchBody
			wantErr := decodeObject([]byte(b), &want)
			if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Fatalf("round %d, %s: error %v, want %v", round, b, gotErr, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, %s:\n got %+v\nwant %+v", round, b, deref(got), deref(want))
			}
		}
	}
	if cap(buf.items) == 0 {
		t.Error("the items buffer was not kept")
	}
}

func deref(a ackBatchBody) any {
	if a.Acknowledgments == nil {
		return a
	}
	return struct {
		G     string
		Items []ackBatchItem
	}{a.ConsumerGroup, *a.Acknowledgments}
}

// BenchmarkAckBatchDecode: an ack/batch body of 100 acks decoded into a
// fresh value (as before ackBatchBuf) and into a kept buffer.
func BenchmarkAckBatchDecode(b *testing.B) {
	body := []byte(`{"consumerGroup":"bench-g0","acknowledgments":[`)
	for i := range 100 {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"transactionId":"019a0000-0000-7000-8000-0000000000`...)
		body = append(body, byte('0'+i/10), byte('0'+i%10))
		body = append(body, `","partitionId":"6d6c1f2e-0000-4000-8000-000000000001","leaseId":"6d6c1f2e-0000-4000-8000-000000000002","status":"completed"}`...)
	}
	body = append(body, "]}"...)
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var a ackBatchBody
			if err := decodeObject(body, &a); err != nil || len(*a.Acknowledgments) != 100 {
				b.Fatal(err)
			}
		}
	})
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		buf := new(ackBatchBuf)
		for b.Loop() {
			if a, err := decodeAckBatch(body, buf); err != nil || len(*a.Acknowledgments) != 100 {
				b.Fatal(err)
			}
		}
	})
}

// TestAckParseCacheSameAsAlone: validating a batch's acks in order with
// one ackParseCache gives, item by item, what validating each alone gives,
// when consecutive acks share their partitionId, leaseId and group and
// when they change (back and forth, to a bad UUID or a bad group after a
// good one).
func TestAckParseCacheSameAsAlone(t *testing.T) {
	t.Parallel()
	p1, p2 := "6d6c1f2e-0000-4000-8000-000000000001", "6d6c1f2e-0000-4000-8000-000000000002"
	l1, l2 := "0190a000-0000-7000-8000-000000000001", "0190a000-0000-7000-8000-000000000002"
	str := func(s string) *string { return &s }
	items := []ackBody{
		{TransactionID: str("a"), PartitionID: str(p1), LeaseID: str(l1), ConsumerGroup: "g"},
		{TransactionID: str("b"), PartitionID: str(p1), LeaseID: str(l1), ConsumerGroup: "g"},
		{TransactionID: str("c"), PartitionID: str(p2), LeaseID: str(l1), ConsumerGroup: "h"},
		{TransactionID: str("d"), PartitionID: str(p1), LeaseID: str(l2), ConsumerGroup: "g"},
		{TransactionID: str("e"), PartitionID: str(p1), LeaseID: str(""), ConsumerGroup: "g"},
		{TransactionID: str("f"), PartitionID: str(p1), LeaseID: str(l2)},
		{TransactionID: str("g"), PartitionID: str("not-a-uuid"), LeaseID: str(l2), ConsumerGroup: "g"},
		{TransactionID: str("h"), PartitionID: str(p1), LeaseID: str("nope"), ConsumerGroup: "g"},
		{TransactionID: str("i"), PartitionID: str(p1), LeaseID: str(l2), ConsumerGroup: "g\x01"},
		{TransactionID: str("j"), PartitionID: str(p2), LeaseID: str(l1), ConsumerGroup: "g"},
	}
	for _, top := range []string{"", "top"} {
		var c ackParseCache
		for i, it := range items {
			got, gotMsg := toAckRequestWith(it, top, nil, &c)
			want, wantMsg := toAckRequest(it, top)
			if gotMsg != wantMsg || !reflect.DeepEqual(got, want) {
				t.Fatalf("group %q, item %d: %+v %q, alone %+v %q", top, i, got, gotMsg, want, wantMsg)
			}
		}
	}
}

// TestPartitionIDPresent: an ack/batch item's partitionId decodes as a
// plain string; an empty one is told apart (absent or null: "is
// required"; "": "must be a UUID") by a second decode of the body.
func TestPartitionIDPresent(t *testing.T) {
	t.Parallel()
	body := []byte(`{"acknowledgments":[{"transactionId":"a"},{"transactionId":"b","partitionId":""},{"transactionId":"c","partitionId":null},{"transactionId":"d","partitionId":"x"}]}`)
	buf := new(ackBatchBuf)
	a, err := decodeAckBatch(body, buf)
	if err != nil {
		t.Fatal(err)
	}
	wantPresent := []bool{false, true, false, true}
	wantMsg := []string{"partitionId is required", "partitionId must be a UUID", "partitionId is required", "partitionId must be a UUID"}
	for i, it := range *a.Acknowledgments {
		if got := partitionIDPresent(body, i); got != wantPresent[i] {
			t.Errorf("item %d: present %v, want %v", i, got, wantPresent[i])
		}
		pid := &it.PartitionID
		if it.PartitionID == "" && !partitionIDPresent(body, i) {
			pid = nil
		}
		if _, msg := toAckRequest(ackBody{TransactionID: &it.TransactionID, PartitionID: pid}, ""); msg != wantMsg[i] {
			t.Errorf("item %d: %q, want %q", i, msg, wantMsg[i])
		}
	}
	if partitionIDPresent(body, 9) {
		t.Error("an item past the end is present")
	}
}
