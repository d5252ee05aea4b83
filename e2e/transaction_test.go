package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/ingest"
)

func txCall(t testing.TB, base string, ops ...map[string]any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"operations": ops})
	code, rb := post(t, base, "/api/v1/transaction", b)
	var r map[string]any
	_ = json.Unmarshal(rb, &r)
	return code, r
}

func TestTransactionPushAndAckAtomic(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	push(t, s.base, body(item{"tx1", "P", 1, "M1"}, item{"tx1", "P", 2, "M2"}))
	_, r := pop(t, s.base, popPath("tx1", "P"), "")
	m1 := r.Messages[0]
	trace := "0190c1d2-0000-7000-8000-000000000001"
	next := map[string]any{"type": "push", "items": []map[string]any{{"queue": "tx2", "partition": "Q", "payload": map[string]int{"from": 1}, "traceId": trace, "transactionId": "N1"}}}

	// A refused ack (wrong lease) rolls the push back too.
	code, res := txCall(t, s.base, next, map[string]any{"type": "ack", "transactionId": m1.TransactionID,
		"partitionId": m1.PartitionID, "leaseId": "0190c1d2-0000-7000-8000-00000000dead"})
	if code != 200 || res["success"] != false || !strings.HasPrefix(fmt.Sprint(res["error"]), "operations[1]: ") {
		t.Fatalf("rollback: %d %v (the error must name the ack, operation 1)", code, res)
	}
	if n := len(readQueue(t, s.store, "tx2")); n != 0 {
		t.Fatalf("rolled-back push stored %d messages", n)
	}
	code, res = txCall(t, s.base, next, map[string]any{"type": "ack", "transactionId": m1.TransactionID,
		"partitionId": m1.PartitionID, "leaseId": m1.LeaseID})
	if code != 200 || res["success"] != true {
		t.Fatalf("commit: %d %v", code, res)
	}
	_, r = pop(t, s.base, popPath("tx1", "P"), "")
	if len(r.Messages) != 1 || r.Messages[0].TransactionID != "M2" {
		t.Fatalf("after the transactional ack: %+v", r.Messages)
	}
	_, r = pop(t, s.base, popPath("tx2", "Q"), "")
	if len(r.Messages) != 1 || r.Messages[0].TraceID == nil || *r.Messages[0].TraceID != trace {
		t.Fatalf("transactional push: %s", r.raw)
	}
	// A duplicate push aborts the transaction.
	code, res = txCall(t, s.base, next)
	if code != 200 || res["success"] != false || !strings.Contains(fmt.Sprint(res["error"]), "duplicate") {
		t.Fatalf("duplicate: %d %v", code, res)
	}
	// Client mistakes are 400 and apply nothing.
	for _, bad := range []string{`{}`, `{"operations":[]}`, `{"operations":[{"type":"nope"}]}`,
		`{"operations":[{"type":"push","items":[{"queue":"tx3","payload":1,"traceId":"not-a-uuid"}]}]}`,
		`{"operations":[{"type":"push","items":[{"queue":"tx3","payload":1}]},{"type":"ack","partitionId":"x"}]}`,
		`{"operations":[{"type":"push"}]}`} {
		if code, rb := post(t, s.base, "/api/v1/transaction", []byte(bad)); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", bad, code, rb)
		}
	}
	if n := len(readQueue(t, s.store, "tx3")); n != 0 {
		t.Fatalf("rejected transactions stored %d", n)
	}
	// Plain pushes and transactional pushes share one offset sequence.
	push(t, s.base, body(item{"tx2", "Q", 2, "N2"}))
	txCall(t, s.base, map[string]any{"type": "push", "items": []map[string]any{{"queue": "tx2", "partition": "Q", "payload": 3, "transactionId": "N3"}}})
	msgs := readPartition(t, s.store, "tx2", "Q")
	if got := fmt.Sprint(txids(msgs)); got != "[N1 N2 N3]" {
		t.Fatalf("partition holds %s", got)
	}
	for i, m := range msgs {
		if m.Offset != int64(i) {
			t.Fatalf("offsets %d at %d", m.Offset, i)
		}
	}
}

// TestTransactionMintedIDSentBackIsDuplicate: the id the broker mints for
// an item pushed without a transactionId, by the push route or the
// transaction route, is its key: sent back as a client transactionId by
// either route, it is a duplicate (the transaction rolled back); so is a
// client transactionId a transaction stored, pushed again by either route.
func TestTransactionMintedIDSentBackIsDuplicate(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	txPush := func(txid string) (int, map[string]any) {
		it := map[string]any{"queue": "txm", "partition": "P", "payload": 1}
		if txid != "" {
			it["transactionId"] = txid
		}
		return txCall(t, s.base, map[string]any{"type": "push", "items": []map[string]any{it}})
	}
	wantAbort := func(what, txid string) {
		t.Helper()
		code, res := txPush(txid)
		if code != 200 || res["success"] != false || !strings.Contains(fmt.Sprint(res["error"]), "duplicate") {
			t.Fatalf("%s: %d %v, want the transaction rolled back as a duplicate", what, code, res)
		}
	}
	// Minted by the push route, sent back through the transaction route.
	x := push(t, s.base, body(item{"txm", "P", 1, ""}))
	wantStatuses(t, x, Q)
	wantAbort("push route's minted id in a transaction", x[0].MessageID)
	// Minted by the transaction route, sent back through both routes.
	code, res := txPush("")
	results, _ := res["results"].([]any)
	if code != 200 || res["success"] != true || len(results) != 1 {
		t.Fatalf("transaction without transactionId: %d %v", code, res)
	}
	r, _ := results[0].(map[string]any)
	y, _ := r["transactionId"].(string)
	if y == "" || y != r["messageId"] {
		t.Fatalf("transaction push: transactionId %v, messageId %v, want the minted id for both", r["transactionId"], r["messageId"])
	}
	wantStatuses(t, push(t, s.base, body(item{"txm", "P", 2, y})), D)
	wantAbort("transaction route's minted id in a transaction", y)
	wantStatuses(t, push(t, s.base, body(item{"txm", "P", 2, x[0].MessageID})), D)
	// A client key stored by a transaction, pushed again by both routes.
	if code, res := txPush("k-1"); code != 200 || res["success"] != true {
		t.Fatalf("transaction with k-1: %d %v", code, res)
	}
	wantStatuses(t, push(t, s.base, body(item{"txm", "P", 3, "k-1"})), D)
	wantAbort("client key again", "k-1")
	if got, want := fmt.Sprint(txids(readPartition(t, s.store, "txm", "P"))), fmt.Sprint([]string{x[0].MessageID, y, "k-1"}); got != want {
		t.Fatalf("partition holds %s, want %s", got, want)
	}
}

// TestTransactionCountedInMetrics: a transaction's pushes and acks are
// counted in /metrics as the push and ack routes' are (queen_push_items_total
// by verdict, queen_acks_total by status), and an ack sent without a status
// is counted under the status it is applied as, "completed", not under an
// empty label; an ack refused in a transaction counts as rejected.
func TestTransactionCountedInMetrics(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	push(t, s.base, body(item{"txm", "P", 1, "M1"}, item{"txm", "P", 2, "M2"}))
	_, r := pop(t, s.base, popPath("txm", "P"), "batch=1")
	m1 := r.Messages[0]
	if code, rb := post(t, s.base, "/api/v1/ack", []byte(fmt.Sprintf(
		`{"transactionId":%q,"partitionId":%q,"leaseId":%q}`, m1.TransactionID, m1.PartitionID, m1.LeaseID))); code != 200 {
		t.Fatalf("ack: %d %s", code, rb)
	}
	_, r = pop(t, s.base, popPath("txm", "P"), "batch=1")
	m2 := r.Messages[0]
	pushOp := map[string]any{"type": "push", "items": []map[string]any{
		{"queue": "txm2", "payload": 1, "transactionId": "T1"}, {"queue": "txm2", "payload": 2, "transactionId": "T2"}}}
	code, res := txCall(t, s.base, pushOp, map[string]any{"type": "ack", "transactionId": m2.TransactionID,
		"partitionId": m2.PartitionID, "leaseId": m2.LeaseID, "status": "completed"})
	if code != 200 || res["success"] != true {
		t.Fatalf("transaction: %d %v", code, res)
	}
	// A refused ack (its message acked already) rolls the transaction
	// back: it counts as rejected, the push beside it counts nothing.
	code, res = txCall(t, s.base, map[string]any{"type": "push", "items": []map[string]any{
		{"queue": "txm2", "payload": 3, "transactionId": "T3"}}}, map[string]any{"type": "ack", "transactionId": m2.TransactionID,
		"partitionId": m2.PartitionID, "leaseId": m2.LeaseID, "status": "failed"})
	if code != 200 || res["success"] != false {
		t.Fatalf("transaction with a refused ack: %d %v", code, res)
	}
	code, b := get(t, s.base+"/metrics")
	for _, want := range []string{`queen_acks_total{result="ok",status="completed"} 2`, `queen_push_items_total{status="queued"} 4`,
		`queen_acks_total{result="rejected",status="failed"} 1`, `queen_acks_total{result="ok",status="failed"} 0`} {
		if code != 200 || !strings.Contains(b, want) {
			t.Errorf("metrics lack %s: %d %.3000s", want, code, b)
		}
	}
	if strings.Contains(b, `status=""`) {
		t.Errorf("metrics hold an empty status label: %.3000s", b)
	}
}

// TestTransactionLimits: a transaction carries at most
// fastapi.MaxTransactionOperations operations and
// ingest.MaxTransactionItems push items over all of them; beyond either
// it is a 400 naming the limit, and nothing is stored. At the limit it
// commits.
func TestTransactionLimits(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	items := func(n int, tag string) []map[string]any {
		out := make([]map[string]any, n)
		for i := range out {
			out[i] = map[string]any{"queue": "txl", "payload": i, "transactionId": fmt.Sprintf("%s-%d", tag, i)}
		}
		return out
	}
	bad := map[string]any{"type": "ack", "transactionId": "x", "partitionId": "00000000-0000-0000-0000-000000000000"}
	ops := make([]map[string]any, fastapi.MaxTransactionOperations+1)
	for i := range ops {
		ops[i] = bad
	}
	for _, c := range []struct {
		name string
		ops  []map[string]any
		want string
	}{
		{"10,001 items in one operation", []map[string]any{{"type": "push", "items": items(ingest.MaxTransactionItems+1, "a")}}, "10000 push items"},
		{"10,001 items over two", []map[string]any{{"type": "push", "items": items(6000, "b")}, {"type": "push", "items": items(4001, "c")}}, "10000 push items"},
		{"10,001 operations", ops, "at most 10000 are accepted"},
	} {
		code, res := txCall(t, s.base, c.ops...)
		if e, _ := res["error"].(string); code != http.StatusBadRequest || !strings.Contains(e, c.want) {
			t.Errorf("%s: %d %v, want 400 naming %q", c.name, code, res["error"], c.want)
		}
	}
	var n int
	if err := s.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = 'txl' AND p.next_offset > 0`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("partitions with messages after the 400s: %d, %v", n, err)
	}
	if code, res := txCall(t, s.base, map[string]any{"type": "push", "items": items(6000, "d")},
		map[string]any{"type": "push", "items": items(4000, "e")}); code != 200 || res["success"] != true {
		t.Fatalf("10,000 items: %d %v", code, res["error"])
	}
}
