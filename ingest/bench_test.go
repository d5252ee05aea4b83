package ingest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/wal"
)

// benchBody is a push body of n items shaped like queen-bench's: queue
// "bench", partitions p0..p9 round-robin, a JSON object payload of about
// payloadBytes bytes, and a transactionId of kind txid: none (""), a
// short text as queen-bench's client ids ("text": run-1-<producer>-<seq>),
// or a UUIDv7's text as Queen's SDKs send ("uuid7").
func benchBody(n, payloadBytes int, txid string) []byte {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	pad := strings.Repeat("x", max(payloadBytes-30, 0))
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"queue":"bench","partition":"p%d",`, i%10)
		switch txid {
		case "text":
			fmt.Fprintf(&b, `"transactionId":"run-1-%d-%d",`, i%8, i)
		case "uuid7":
			fmt.Fprintf(&b, `"transactionId":"%s",`, uuid.Must(uuid.NewV7()))
		}
		fmt.Fprintf(&b, `"payload":{"p":%d,"s":%d,"pad":"%s"}}`, i%8, i, pad)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

var benchShapes = []struct {
	name  string
	items int
	txid  string // benchBody's kind
}{
	{"items=1", 1, ""},
	{"items=1/txid", 1, "text"},
	{"items=100", 100, ""},
	{"items=100/txid", 100, "text"},
	{"items=100/uuid7", 100, "uuid7"},
}

// BenchmarkParseBody: validating a push body (256-byte payloads) into its
// items; bytes/s is body bytes.
func BenchmarkParseBody(b *testing.B) {
	benchEachShape(b, benchShapeBody, func(b *testing.B, body []byte, items int) {
		parsed, err := ParseBody(body)
		if err != nil || len(parsed) != items {
			b.Fatalf("ParseBody: %d items, %v", len(parsed), err)
		}
	})
}

// BenchmarkBuildRecord: what the push path does between the request body
// and the WAL append: parse and validate, mint ids, lay out the push
// record in pieces (encodeRecordGathered: the payloads are not copied;
// figures of builds that encoded the record in one buffer include that
// copy).
func BenchmarkBuildRecord(b *testing.B) {
	sub := "producer-1"
	benchEachShape(b, benchShapeBody, func(b *testing.B, body []byte, items int) {
		vec, res, err := buildForBench(body, &sub)
		n := 0
		for _, p := range vec {
			n += len(p)
		}
		if err != nil || len(res) != items || n < len(body)/2 {
			b.Fatalf("build: %d results, %d bytes, %v", len(res), n, err)
		}
	})
}

// buildForBench is Pipeline.Push up to the WAL append: it returns the
// push record in the pieces the WAL is handed (the first starting with
// the envelope's room; the payloads are slices of body).
func buildForBench(body []byte, sub *string) ([][]byte, []Result, error) {
	parsed, err := ParseBody(body)
	if err != nil {
		return nil, nil, err
	}
	items, err := NewItems(parsed, sub)
	if err != nil {
		return nil, nil, err
	}
	rec := Record{AcceptedAt: 1_700_000_000_000_000, Items: items}
	res := make([]Result, len(items))
	for i := range items {
		it := &items[i]
		mid := it.TransactionID
		if parsed[i].TransactionID != "" {
			mid = it.MessageID.String()
		}
		res[i] = Result{Index: i, MessageID: mid, TransactionID: it.TransactionID, QueueName: it.Queue}
	}
	_, vec := encodeRecordGathered(make([]byte, wal.HeaderSize), nil, &rec)
	return vec, res, nil
}

// encodedForBench is the push record (without envelope) that buildForBench
// builds for body, in one piece.
func encodedForBench(b *testing.B, body []byte) []byte {
	vec, _, err := buildForBench(body, nil)
	if err != nil {
		b.Fatal(err)
	}
	return bytes.Join(vec, nil)[wal.HeaderSize:]
}

// BenchmarkDecodeRecord: what the projector does per WAL record before it
// builds its batch: decode the push record (100 items of 256 bytes).
func BenchmarkDecodeRecord(b *testing.B) {
	encoded := func(b *testing.B, items int, txid string) []byte {
		return encodedForBench(b, benchBody(items, 256, txid))
	}
	benchEachShape(b, encoded, func(b *testing.B, enc []byte, items int) {
		r, err := DecodeRecord(enc)
		if err != nil || len(r.Items) != items {
			b.Fatalf("DecodeRecord: %v", err)
		}
	})
}

// benchShapeBody is the push body of a benchShapes entry (256-byte
// payloads).
func benchShapeBody(_ *testing.B, items int, txid string) []byte { return benchBody(items, 256, txid) }

// benchEachShape runs one sub-benchmark per benchShapes entry: input makes
// the entry's input (on the parent b, before the sub-benchmark; its length
// is what bytes/s counts) and op is one iteration on it, failing b when
// its result is wrong (items is the entry's item count).
func benchEachShape(b *testing.B, input func(b *testing.B, items int, txid string) []byte, op func(b *testing.B, in []byte, items int)) {
	for _, sh := range benchShapes {
		in := input(b, sh.items, sh.txid)
		b.Run(sh.name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				op(b, in, sh.items)
			}
		})
	}
}

// BenchmarkDecodeRecordInto: the projector's decode of whole records into
// one Record it reuses across records and batches (the items' fields are
// then copied into the batch).
func BenchmarkDecodeRecordInto(b *testing.B) {
	encoded := func(b *testing.B, items int, txid string) []byte {
		return encodedForBench(b, benchBody(items, 256, txid))
	}
	var r Record
	benchEachShape(b, encoded, func(b *testing.B, enc []byte, items int) {
		if err := DecodeRecordInto(&r, enc); err != nil || len(r.Items) != items {
			b.Fatalf("DecodeRecordInto: %v", err)
		}
	})
}
