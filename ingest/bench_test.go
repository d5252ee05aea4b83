package ingest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/queenmq/queen-go/wal"
)

// benchBody is a push body of n items shaped like queen-bench's: queue
// "bench", partitions p0..p9 round-robin, a JSON object payload of about
// payloadBytes bytes, and a transactionId when withTxID.
func benchBody(n, payloadBytes int, withTxID bool) []byte {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	pad := strings.Repeat("x", max(payloadBytes-30, 0))
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"queue":"bench","partition":"p%d",`, i%10)
		if withTxID {
			fmt.Fprintf(&b, `"transactionId":"run-1-%d-%d",`, i%8, i)
		}
		fmt.Fprintf(&b, `"payload":{"p":%d,"s":%d,"pad":"%s"}}`, i%8, i, pad)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

var benchShapes = []struct {
	name  string
	items int
	txid  bool
}{
	{"items=1", 1, false},
	{"items=100", 100, false},
	{"items=100/txid", 100, true},
}

// BenchmarkParseBody: validating a push body (256-byte payloads) into its
// items; bytes/s is body bytes.
func BenchmarkParseBody(b *testing.B) {
	for _, sh := range benchShapes {
		body := benchBody(sh.items, 256, sh.txid)
		b.Run(sh.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				items, err := ParseBody(body)
				if err != nil || len(items) != sh.items {
					b.Fatalf("ParseBody: %d items, %v", len(items), err)
				}
			}
		})
	}
}

// BenchmarkBuildRecord: what the push path does between the request body
// and WAL.Append: parse and validate, mint ids, encode the push record.
func BenchmarkBuildRecord(b *testing.B) {
	sub := "producer-1"
	for _, sh := range benchShapes {
		body := benchBody(sh.items, 256, sh.txid)
		b.Run(sh.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				rec, res, err := buildForBench(body, &sub)
				if err != nil || len(res) != sh.items || len(rec) < len(body)/2 {
					b.Fatalf("build: %d results, %d bytes, %v", len(res), len(rec), err)
				}
			}
		})
	}
}

// buildForBench is Pipeline.Push up to the WAL append.
func buildForBench(body []byte, sub *string) ([]byte, []Result, error) {
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
	buf := EncodeRecord(make([]byte, wal.HeaderSize, wal.HeaderSize+rec.EncodedLen()), &rec)
	return buf[wal.HeaderSize:], res, nil
}

// BenchmarkDecodeRecord: what the projector does per WAL record before it
// builds its batch: decode the push record (100 items of 256 bytes).
func BenchmarkDecodeRecord(b *testing.B) {
	for _, sh := range benchShapes {
		enc, _, err := buildForBench(benchBody(sh.items, 256, sh.txid), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(sh.name, func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				r, err := DecodeRecord(enc)
				if err != nil || len(r.Items) != sh.items {
					b.Fatalf("DecodeRecord: %v", err)
				}
			}
		})
	}
}
