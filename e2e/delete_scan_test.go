package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestDeleteMessageByScan: a message the dedup sidecar no longer names
// (its rows deleted here, as after its window) and no lease covers is
// found by reading the partition's segments newest first, in runs of a
// few MiB: the oldest of six segments of about 1.4 MB each (two runs
// back) is deleted and never delivered, the newest one is deleted too, and
// an unknown transactionId answers "Message not found" after reading them
// all.
func TestDeleteMessageByScan(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	payload := func() string {
		b := make([]byte, 1<<20)
		rand.Read(b)
		return base64.RawURLEncoding.EncodeToString(b) // does not compress
	}
	for i := 1; i <= 6; i++ {
		wantStatuses(t, push(t, s.base, body(item{"scan", "P", payload(), fmt.Sprintf("s%d", i)})), Q)
	}
	for _, tbl := range []string{"queen.dedup_batches", "queen.dedup"} {
		if _, err := s.store.Pool().Exec(context.Background(), "DELETE FROM "+tbl); err != nil && !strings.Contains(err.Error(), "does not exist") {
			t.Fatal(err)
		}
	}
	_, r := pop(t, s.base, popPath("scan", "P"), "consumerGroup=peek&batch=1&autoAck=true")
	pid := r.PartitionID
	for _, c := range []struct{ txid, want string }{
		{"s1", "Message deleted successfully"}, {"s6", "Message deleted successfully"}, {"nope", "Message not found"},
	} {
		code, b := del(t, s.base+"/api/v1/messages/"+pid+"/"+c.txid)
		if code != http.StatusOK || !strings.Contains(b, c.want) {
			t.Fatalf("DELETE %s: %d %s, want %q", c.txid, code, b, c.want)
		}
	}
	var got []string
	for {
		code, r := pop(t, s.base, popPath("scan", "P"), "consumerGroup=after&batch=10&autoAck=true")
		if code != http.StatusOK {
			break
		}
		for _, m := range r.Messages {
			got = append(got, m.TransactionID)
		}
	}
	if fmt.Sprint(got) != "[s2 s3 s4 s5]" {
		t.Fatalf("after the deletes a new group gets %v, want [s2 s3 s4 s5]", got)
	}
}
