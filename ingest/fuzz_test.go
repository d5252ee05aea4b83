package ingest

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
)

func sameItem(a, b *Item) bool {
	if a.Queue != b.Queue || a.Partition != b.Partition || a.TransactionID != b.TransactionID ||
		a.MessageID != b.MessageID || !bytes.Equal(a.Payload, b.Payload) {
		return false
	}
	if (a.ProducerSub == nil) != (b.ProducerSub == nil) {
		return false
	}
	return a.ProducerSub == nil || *a.ProducerSub == *b.ProducerSub
}

func sameRecord(a, b *Record) bool {
	if a.AcceptedAt != b.AcceptedAt || len(a.Items) != len(b.Items) {
		return false
	}
	for i := range a.Items {
		if !sameItem(&a.Items[i], &b.Items[i]) {
			return false
		}
	}
	return true
}

// FuzzDecodeRecord: DecodeRecord never panics on arbitrary bytes, what it
// accepts re-encodes to something it decodes the same way, and any record
// built from the fuzz inputs round-trips through EncodeRecord.
func FuzzDecodeRecord(f *testing.F) {
	sub := "producer-1"
	sample := EncodeRecord(nil, &Record{AcceptedAt: 1_700_000_000_000_000, Items: []Item{
		{Queue: "orders", Partition: DefaultPartition, TransactionID: "tx-1", MessageID: uuid.MustParse("0190b2c4-7d3e-7000-8000-000000000001"), Payload: []byte(`{"a":1}`)},
		{Queue: "orders", Partition: "p2", TransactionID: "tx-2", ProducerSub: &sub, Payload: []byte(`"s"`)},
	}})
	f.Add([]byte{}, int64(0), "q", "p", "", "", false, []byte(`1`), []byte{}, uint8(1))
	f.Add([]byte{recordKindPush}, int64(-1), "q", DefaultPartition, "tx", "sub", true, []byte(`null`), make([]byte, 16), uint8(3))
	f.Add(sample, int64(1<<62), "ørders", "p", "tx-ü", "", false, []byte(`{"x":[1,2,3]}`), []byte("0123456789abcdef"), uint8(2))
	f.Add(sample[:len(sample)-1], int64(5), "", "", "", "", false, []byte{}, []byte{}, uint8(0))
	f.Add(append(append([]byte(nil), sample...), 0), int64(5), "q", "p", "", "", false, []byte(nil), []byte(nil), uint8(4))
	f.Add([]byte{2, 0, 0}, int64(0), "q", "p", "", "", false, []byte(nil), []byte(nil), uint8(1))
	f.Add([]byte{recordKindPush, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, int64(0), "q", "p", "", "", false, []byte(nil), []byte(nil), uint8(1))
	f.Fuzz(func(t *testing.T, raw []byte, acceptedAt int64, queue, partition, txid, producer string,
		hasSub bool, payload, id []byte, nItems uint8) {
		// Arbitrary bytes.
		r, err := DecodeRecord(raw)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("DecodeRecord: error %v does not wrap ErrBadRecord", err)
			}
		} else {
			if n := ItemCount(raw); n != len(r.Items) {
				t.Fatalf("ItemCount = %d, DecodeRecord decoded %d items", n, len(r.Items))
			}
			again, err := DecodeRecord(EncodeRecord(nil, r))
			if err != nil {
				t.Fatalf("re-encoded record does not decode: %v", err)
			}
			if !sameRecord(r, again) {
				t.Fatalf("decode(encode(decode(raw))) differs from decode(raw)")
			}
		}
		// The item-by-item reader (records projected in pieces) accepts
		// exactly what DecodeRecord accepts and reads the same items.
		if rr, rerr := NewRecordReader(raw); rerr == nil {
			var it Item
			i := 0
			for rerr = rr.Next(&it); rerr == nil; rerr = rr.Next(&it) {
				if err == nil && !sameRecord(&Record{Items: r.Items[i : i+1]}, &Record{Items: []Item{it}}) {
					t.Fatalf("RecordReader item %d differs from DecodeRecord's", i)
				}
				i++
			}
			if (rerr == io.EOF) != (err == nil) {
				t.Fatalf("RecordReader ends with %v, DecodeRecord with %v", rerr, err)
			}
		} else if err == nil {
			t.Fatalf("NewRecordReader refused what DecodeRecord accepted: %v", rerr)
		}

		// A record built from the inputs.
		rec := &Record{AcceptedAt: acceptedAt}
		for i := 0; i < int(nItems%5); i++ {
			it := Item{Queue: queue, Partition: partition, TransactionID: txid, Payload: payload[:len(payload)*i/4]}
			copy(it.MessageID[:], id)
			it.MessageID[15] ^= byte(i)
			if hasSub != (i%2 == 1) {
				s := producer
				it.ProducerSub = &s
			}
			if i == 3 {
				it.TransactionID = it.MessageID.String() // as NewItems mints it: left out of the record
			}
			rec.Items = append(rec.Items, it)
		}
		enc := EncodeRecord([]byte("prefix"), rec)
		if got := len(enc) - len("prefix"); got != rec.EncodedLen() {
			t.Fatalf("EncodeRecord wrote %d bytes, EncodedLen says %d", got, rec.EncodedLen())
		}
		// The push path's layout in pieces (payloads not copied) joins to
		// the same bytes, and meta holds exactly the bytes that are not
		// payloads.
		meta, vec := encodeRecordGathered([]byte("prefix"), nil, rec)
		if joined := bytes.Join(vec, nil); !bytes.Equal(joined, enc) {
			t.Fatalf("gathered record %x, EncodeRecord %x", joined, enc)
		}
		if want := len(enc) - payloadBytes(rec); len(meta) != want {
			t.Fatalf("gathered meta holds %d bytes, want %d (the record without its payloads)", len(meta), want)
		}
		got, err := DecodeRecord(enc[len("prefix"):])
		if err != nil {
			t.Fatalf("DecodeRecord(EncodeRecord(r)): %v", err)
		}
		if !sameRecord(rec, got) {
			t.Fatalf("round trip changed the record:\n got %+v\nwant %+v", got, rec)
		}
		// The first layout (kind 1, written by older brokers) still decodes.
		if old, err := DecodeRecord(encodeKind1(rec)); err != nil || !sameRecord(rec, old) {
			t.Fatalf("kind 1 record: %v, got %+v, want %+v", err, old, rec)
		}
		// Decoding into a Record that held a longer record before (the
		// projector reuses one per batch) gives the same record.
		reused := &Record{Items: make([]Item, 7)}
		for i := range reused.Items {
			reused.Items[i] = Item{Queue: "stale", ProducerSub: &producer, Payload: []byte("stale")}
		}
		if err := DecodeRecordInto(reused, enc[len("prefix"):]); err != nil || !sameRecord(rec, reused) {
			t.Fatalf("DecodeRecordInto a reused Record: %v, got %+v, want %+v", err, reused, rec)
		}
		// Every strict prefix is refused, never misread.
		for cut := 0; cut < len(enc)-len("prefix"); cut += 1 + cut/8 {
			if _, err := DecodeRecord(enc[len("prefix") : len("prefix")+cut]); err == nil {
				t.Fatalf("DecodeRecord accepted a %d-byte prefix of a %d-byte record", cut, len(enc)-len("prefix"))
			}
		}
	})
}

// payloadBytes is the sum of r's payload lengths.
func payloadBytes(r *Record) int {
	n := 0
	for i := range r.Items {
		n += len(r.Items[i].Payload)
	}
	return n
}

// fuzzBodies seed the push body fuzz targets.
var fuzzBodies = []string{
	`{"items":[{"queue":"q","transactionId":"a1","payload":1},{"queue":"q","payload":2},{"queue":"q","transactionId":"","payload":3},{"queue":"q","transactionId":"c\u00e9","payload":4}]}`,
	`{"items":[{"queue":"q","transactionId":"first-array","payload":1}],"items":[{"queue":"q","payload":1},{"queue":"q","transactionId":"second","payload":2}]}`,
	`{"items":[{"queue":"q","transactionId":"t1","payload":1},{"queue":"q","transactionId":null,"payload":2},{"queue":"q","transactionId":"t3","transactionId":"t3b","payload":3}]}`,
	``,
	` `,
	`null`,
	`[]`,
	`{}`,
	`{"items":[]}`,
	`{"items":{}}`,
	`{"items":[{"queue":"q","payload":{"a":1}}]}`,
	`{"items":[{"queue":"q","partition":"p","transactionId":"t","payload":[1,"2",null,true]}]}`,
	`{"items":[{"queue":"q","payload":1,"transactionId":null},{"queue":"r","payload":"x"}]}`,
	`{"items":[{"queue":"q","queue":"r","payload":1,"payload":2}]}`,
	`{"items":[{"queue":"","payload":1}]}`,
	`{"items":[{"queue":"q","partition":"","payload":1}]}`,
	`{"items":[{"queue":"q\u0000","payload":1}]}`,
	`{"items":[{"queue":"\u00e9\ud83d\ude00","payload":"\ud800"}]}`,
	`{"items":[{"queue":"q","payload":   {"nested":[[[[{}]]]]}   }]}`,
	`{"items":[{"queue":"q","payload":1e400}]}`,
	`{"items":[{"queue":"q","payload":-0.0e-0}]}`,
	`{"items":[{"queue":"q","payload":01}]}`,
	`{"items":[{"queue":"q","payload":"\x"}]}`,
	`{"items":[{"queue":"q","payload":tru}]}`,
	`{"items":[{"queue":"q","payload":1}],}`,
	`{"items":[{"queue":"q","payload":1}]} trailing`,
	`{"items":[{"queue":"q","payload":1}]}{"items":[]}`,
	`{"items":[{"queue":"q","payload":"\"}"}]}`,
	`{"items":[{"Queue":"q","payload":1}]}`,
	`{"items":[{"queue":"q","payload":1,"transactionId":5}]}`,
	`{"items":[{"queue":1,"payload":1}]}`,
	"{\"items\":[{\"queue\":\"q\",\"payload\":\"\xff\"}]}",
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`,
}

// FuzzParseBody: ParseBody never panics; the items it returns have a valid
// queue and partition name and a payload that is valid JSON taken from the
// body.
func FuzzParseBody(f *testing.F) {
	for _, s := range fuzzBodies {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		items, err := ParseBody(body)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("ParseBody: error %v (%T) is not a *ValidationError", err, err)
			}
			if items != nil {
				t.Fatalf("ParseBody returned %d items with an error", len(items))
			}
			return
		}
		for i, it := range items {
			if it.Queue == "" || it.Partition == "" {
				t.Fatalf("items[%d]: queue %q partition %q", i, it.Queue, it.Partition)
			}
			if err := ValidateName(it.Queue); err != nil {
				t.Fatalf("items[%d]: queue %q: %v", i, it.Queue, err)
			}
			if err := ValidateName(it.Partition); err != nil {
				t.Fatalf("items[%d]: partition %q: %v", i, it.Partition, err)
			}
			if len(it.TransactionID) > MaxTransactionIDBytes || !utf8.ValidString(it.TransactionID) {
				t.Fatalf("items[%d]: transactionId of %d bytes, valid UTF-8 %t", i, len(it.TransactionID), utf8.ValidString(it.TransactionID))
			}
			if !stdjson.Valid(it.Payload) {
				t.Fatalf("items[%d]: payload %q is not valid JSON (body %q)", i, it.Payload, body)
			}
			if !bytes.Contains(body, it.Payload) {
				t.Fatalf("items[%d]: payload %q is not taken from the body", i, it.Payload)
			}
		}
		// The push path parses into a reused slice that still holds the
		// items of an earlier push: the result must be the same.
		dirty := make([]ParsedItem, 3, 8)
		for i := range dirty {
			dirty[i] = ParsedItem{Queue: "stale", Partition: "stale", TransactionID: "stale", Payload: []byte("1")}
		}
		again, err := parseBodyInto(dirty, body, 0)
		if err != nil || !reflect.DeepEqual(again, items) {
			t.Fatalf("parseBodyInto a reused slice: %v, %d items, want %d", err, len(again), len(items))
		}
	})
}
