package fastapi

import (
	"strings"
	"testing"

	"github.com/queenmq/queen-go/ingest"
)

// TestAckTransactionIDRule: an ack's transactionId follows
// validateTransactionID (the rule of traces and message keys), with the
// ack route's texts: absent or "" is "transactionId is required", one
// past ingest.MaxTransactionIDBytes "transactionId is longer than 1024
// bytes", and the longest allowed one is accepted.
func TestAckTransactionIDRule(t *testing.T) {
	t.Parallel()
	pid := "6d6c1f2e-0000-4000-8000-000000000001"
	str := func(s string) *string { return &s }
	longest := strings.Repeat("t", ingest.MaxTransactionIDBytes)
	for _, c := range []struct {
		name string
		txid *string
		want string
	}{
		{"absent", nil, "transactionId is required"},
		{"empty", str(""), "transactionId is required"},
		{"one byte", str("t"), ""},
		{"longest", str(longest), ""},
		{"longest, multi-byte", str(strings.Repeat("é", ingest.MaxTransactionIDBytes/2)), ""},
		{"one byte too long", str(longest + "t"), "transactionId is longer than 1024 bytes"},
		{"one rune too long", str(strings.Repeat("é", ingest.MaxTransactionIDBytes/2) + "é"), "transactionId is longer than 1024 bytes"},
	} {
		_, msg := toAckRequest(ackBody{TransactionID: c.txid, PartitionID: str(pid)}, "")
		if msg != c.want {
			t.Errorf("%s: %q, want %q", c.name, msg, c.want)
		}
		if c.txid != nil && *c.txid != "" {
			err := validateTransactionID(*c.txid)
			if (err == nil) != (msg == "") || (err != nil && msg != "transactionId "+err.Error()) {
				t.Errorf("%s: ack %q, validateTransactionID %v", c.name, msg, err)
			}
		}
	}
}
