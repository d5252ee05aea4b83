package fastapi

import (
	"testing"

	"github.com/queenmq/queen-go/ingest"
)

// TestInTxPushItemsMintedMark: an item of a transaction or stream push
// without a transactionId keeps the minted mark only with its minted text
// (mintTxID); where the caller is to derive the key (a stream cycle), the
// emptied transactionId drops the mark, so the projection probes the
// derived key for duplicates instead of taking it for a fresh minted id.
func TestInTxPushItemsMintedMark(t *testing.T) {
	parsed := []ingest.ParsedItem{
		{Queue: "q", Partition: ingest.DefaultPartition, Payload: []byte("1")},
		{Queue: "q", Partition: ingest.DefaultPartition, TransactionID: "tx-1", Payload: []byte("2")},
	}
	for _, mint := range []bool{true, false} {
		items, err := inTxPushItems(parsed, 1, nil, mint)
		if err != nil {
			t.Fatal(err)
		}
		m := items[0].Message
		if mint && (!m.MintedTxID || m.TransactionID != m.ID.String()) {
			t.Fatalf("mintTxID: %q marked %v, want the id's text, marked", m.TransactionID, m.MintedTxID)
		}
		if !mint && (m.MintedTxID || m.TransactionID != "") {
			t.Fatalf("no mintTxID: %q marked %v, want empty and unmarked", m.TransactionID, m.MintedTxID)
		}
		if items[1].Message.MintedTxID || items[1].Message.TransactionID != "tx-1" {
			t.Fatalf("client transactionId: %+v", items[1].Message)
		}
	}
}
