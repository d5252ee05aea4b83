package bench

import (
	"fmt"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
)

// BenchmarkAckResultDecode: an ack answer of 100 results decoded with
// each transactionId as a string into a fresh slice (before) and as raw
// JSON into kept results (ackResult, checked by sameID).
func BenchmarkAckResultDecode(b *testing.B) {
	var sb strings.Builder
	sb.WriteByte('[')
	for i := range 100 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"index":%d,"transactionId":"r1-0-%d","success":true,"error":null,"queueName":"bench-r1","partitionName":"p3","leaseReleased":false,"dlq":false}`, i, i)
	}
	sb.WriteByte(']')
	body := []byte(sb.String())
	b.Run("strings", func(b *testing.B) {
		b.ReportAllocs()
		type stringResult struct {
			Index         int     `json:"index"`
			TransactionID string  `json:"transactionId"`
			Success       bool    `json:"success"`
			Error         *string `json:"error"`
		}
		for b.Loop() {
			var res []stringResult
			if err := json.Unmarshal(body, &res); err != nil || len(res) != 100 {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		var kept []ackResult
		for b.Loop() {
			res := kept[:cap(kept)]
			for i := range res {
				res[i] = ackResult{TransactionID: res[i].TransactionID[:0]}
			}
			res = res[:0]
			if err := json.Unmarshal(body, &res); err != nil || len(res) != 100 || !sameID(res[7].TransactionID, "r1-0-7") {
				b.Fatal(err)
			}
			kept = res
		}
	})
}
