package e2e

// POST /api/v1/transaction fields the Queen client SDKs send beyond
// "operations" (Queen SDK wire contract; docs/api.md, "Producing"):
// the Go SDK's top-level "kv"/"timers" riders, which this broker refuses
// rather than ignore, and "requiredLeases", whose single lease is lent to
// ack operations without their own leaseId (queen-mq/queen
// clients/client-go/transaction_lease_wire_test.go).

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
)

// sdkTx posts a whole transaction body and returns the status and the
// decoded answer.
func sdkTx(t testing.TB, base string, req map[string]any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return sdkTxRaw(t, base, string(b))
}

func sdkTxRaw(t testing.TB, base, raw string) (int, map[string]any) {
	t.Helper()
	code, rb := post(t, base, "/api/v1/transaction", []byte(raw))
	var r map[string]any
	if err := json.Unmarshal(rb, &r); err != nil {
		t.Fatalf("transaction answer %d %q: %v", code, rb, err)
	}
	return code, r
}

func pushOp(queue, txid string) map[string]any {
	return map[string]any{"type": "push", "items": []map[string]any{{"queue": queue, "partition": "P",
		"payload": map[string]string{"from": "tx"}, "transactionId": txid}}}
}

// ackOp is an ack operation as the JS SDK sends it: no leaseId.
func ackOp(m popMsg) map[string]any {
	return map[string]any{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID, "status": "completed"}
}

// popOne pops exactly one message of queue/partition under a new lease.
func popOne(t testing.TB, base, queue, partition string) popMsg {
	t.Helper()
	code, r := pop(t, base, popPath(queue, partition), "batch=1")
	if code != http.StatusOK || len(r.Messages) != 1 || r.Messages[0].LeaseID == "" {
		t.Fatalf("pop %s/%s: %d %s", queue, partition, code, r.raw)
	}
	return r.Messages[0]
}

// wantUnacked proves no transaction acked m: its holder can still ack it
// under its own lease.
func wantUnacked(t testing.TB, base string, m popMsg) {
	t.Helper()
	if a := ack(t, base, m, "completed", ""); !a.Success {
		t.Fatalf("%s was acked (or its lease lost) by a refused transaction: %+v", m.TransactionID, a)
	}
}

// wantNext proves m was acked: the next pop of its partition delivers
// the following message.
func wantNext(t testing.TB, base, queue, partition, txid string) {
	t.Helper()
	_, r := pop(t, base, popPath(queue, partition), "batch=1")
	if len(r.Messages) != 1 || r.Messages[0].TransactionID != txid {
		t.Fatalf("next pop of %s/%s: %s, want %s", queue, partition, r.raw, txid)
	}
}

// TestSDKTransactionRidersRefused: a non-empty kv or timers rider is a
// 400 naming the unsupported rider, and neither the push nor the ack of
// the bundle is applied.
func TestSDKTransactionRidersRefused(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "rid", "P", 1, 2)
	m := popOne(t, s.base, "rid", "P")
	ackWithLease := ackOp(m)
	ackWithLease["leaseId"] = m.LeaseID
	ops := []any{pushOp("rid-out", "R1"), ackWithLease}
	kvPut := []any{map[string]any{"op": "putIfAbsent", "namespace": "ns", "key": "marker", "value": true}}
	timer := []any{map[string]any{"op": "schedule", "key": "t1", "fireAt": "2030-01-01T00:00:00Z"}}
	for i, c := range []struct {
		req  map[string]any
		name string
	}{
		{map[string]any{"operations": ops, "requiredLeases": []string{m.LeaseID}, "kv": kvPut}, "kv"},
		{map[string]any{"operations": ops, "requiredLeases": []string{m.LeaseID}, "timers": timer}, "timers"},
		{map[string]any{"operations": ops, "kv": []any{}, "timers": timer}, "timers"},
		{map[string]any{"operations": ops, "kv": map[string]any{}}, "kv"},
		{map[string]any{"kv": kvPut}, "kv"}, // a kv-only bundle has no operations
	} {
		code, r := sdkTx(t, s.base, c.req)
		msg := fmt.Sprint(r["error"])
		if code != http.StatusBadRequest || !strings.Contains(msg, `"`+c.name+`"`) || !strings.Contains(msg, "not supported") {
			t.Errorf("case %d: %d %v, want 400 naming the unsupported %q rider", i, code, r, c.name)
		}
	}
	if n := len(readQueue(t, s.store, "rid-out")); n != 0 {
		t.Fatalf("refused bundles stored %d messages", n)
	}
	wantUnacked(t, s.base, m)
	wantNext(t, s.base, "rid", "P", "m-2")
}

// TestSDKTransactionEmptyRidersIgnored: kv/timers that are [] or null ask
// for nothing and the bundle commits as usual.
func TestSDKTransactionEmptyRidersIgnored(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "emp", "P", 1, 3)
	for i, raw := range []string{`"kv":[],"timers":[]`, `"kv":null,"timers":null`} {
		m := popOne(t, s.base, "emp", "P")
		req := fmt.Sprintf(`{"operations":[{"type":"push","items":[{"queue":"emp-out","partition":"P","payload":1,"transactionId":"E%d"}]},
			{"type":"ack","transactionId":%q,"partitionId":%q,"status":"completed"}],"requiredLeases":[%q],%s}`,
			i, m.TransactionID, m.PartitionID, m.LeaseID, raw)
		if code, r := sdkTxRaw(t, s.base, req); code != http.StatusOK || r["success"] != true {
			t.Fatalf("%s: %d %v", raw, code, r)
		}
	}
	if got := fmt.Sprint(txids(readPartition(t, s.store, "emp-out", "P"))); got != "[E0 E1]" {
		t.Fatalf("emp-out holds %s", got)
	}
	wantNext(t, s.base, "emp", "P", "m-3")
}

// TestSDKTransactionLendsSingleRequiredLease: an ack op without leaseId is
// fenced by the one lease in requiredLeases. A foreign or expired lease
// refuses the whole bundle (success:false, its push not stored, the
// message not acked); the message's own live lease commits.
func TestSDKTransactionLendsSingleRequiredLease(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "lend", "A", 1, 2)
	pushN(t, s.base, "lend", "B", 1, 2)
	a := popOne(t, s.base, "lend", "A")
	b := popOne(t, s.base, "lend", "B")
	if a.LeaseID == b.LeaseID {
		t.Fatalf("both pops share lease %s", a.LeaseID)
	}
	refused := func(what string, leases []string) {
		t.Helper()
		code, r := sdkTx(t, s.base, map[string]any{"operations": []any{pushOp("lend-out", "L1"), ackOp(a)},
			"requiredLeases": leases})
		if code != http.StatusOK || r["success"] != false ||
			!strings.Contains(fmt.Sprint(r["error"]), "operations[1]: ") ||
			!strings.Contains(fmt.Sprint(r["error"]), "Invalid or expired lease") {
			t.Fatalf("%s: %d %v, want success:false refusing the ack (operation 1)", what, code, r)
		}
		if n := len(readQueue(t, s.store, "lend-out")); n != 0 {
			t.Fatalf("%s: the refused bundle stored %d messages", what, n)
		}
	}
	// Another consumer's live lease (repeated: still one distinct lease).
	refused("foreign lease", []string{b.LeaseID})
	refused("foreign lease twice", []string{b.LeaseID, b.LeaseID})
	// A lease nobody holds.
	refused("unknown lease", []string{"0190c1d2-0000-7000-8000-00000000dead"})

	// The message's own lease commits both operations.
	code, r := sdkTx(t, s.base, map[string]any{"operations": []any{pushOp("lend-out", "L1"), ackOp(a)},
		"requiredLeases": []string{a.LeaseID}})
	if code != http.StatusOK || r["success"] != true {
		t.Fatalf("own lease: %d %v", code, r)
	}
	if got := fmt.Sprint(txids(readQueue(t, s.store, "lend-out"))); got != "[L1]" {
		t.Fatalf("lend-out holds %s", got)
	}
	wantNext(t, s.base, "lend", "A", "m-2")
	wantUnacked(t, s.base, b)
}

// TestSDKTransactionExpiredRequiredLease: the lease named in requiredLeases
// lapsed and another consumer took the message. The lent lease refuses
// the ack, so the bundle does not complete the new holder's message; the
// new holder still can.
func TestSDKTransactionExpiredRequiredLease(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "lexp", map[string]any{"leaseTime": 1, "retryLimit": 100})
	pushN(t, s.base, "lexp", "P", 1, 2)
	first := popOne(t, s.base, "lexp", "P")
	time.Sleep(1300 * time.Millisecond)
	// The re-delivery's lease must outlive the rest of the test (the
	// transaction, the reads, and wantUnacked's ack under it): with 1 s, a
	// loaded machine let it lapse too and the ack was refused.
	configure(t, s.base, "lexp", map[string]any{"leaseTime": 60, "retryLimit": 100})
	taken := popOne(t, s.base, "lexp", "P")
	if taken.TransactionID != first.TransactionID || taken.LeaseID == first.LeaseID {
		t.Fatalf("re-delivery: %+v after %+v", taken, first)
	}
	code, r := sdkTx(t, s.base, map[string]any{"operations": []any{pushOp("lexp-out", "X1"), ackOp(first)},
		"requiredLeases": []string{first.LeaseID}})
	if code != http.StatusOK || r["success"] != false || !strings.Contains(fmt.Sprint(r["error"]), "Invalid or expired lease") {
		t.Fatalf("expired lease: %d %v, want success:false", code, r)
	}
	if n := len(readQueue(t, s.store, "lexp-out")); n != 0 {
		t.Fatalf("the refused bundle stored %d messages", n)
	}
	wantUnacked(t, s.base, taken)
	wantNext(t, s.base, "lexp", "P", "m-2")
}

// TestSDKTransactionSeveralRequiredLeases: with two or more distinct leases
// nothing is lent (Queen 2 semantics) and requiredLeases is no gate of its
// own. The bundle mixes the Go SDK shape (leaseId on the ack op) with the
// JS SDK shape (lease only in requiredLeases, two such acks, so lending
// any one lease would refuse one of them), and lists a lease that is not
// live; it commits.
func TestSDKTransactionSeveralRequiredLeases(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	var msgs []popMsg
	for _, p := range []string{"A", "B", "C"} {
		pushN(t, s.base, "sev", p, 1, 2)
		msgs = append(msgs, popOne(t, s.base, "sev", p))
	}
	ackA := ackOp(msgs[0])
	ackA["leaseId"] = msgs[0].LeaseID
	code, r := sdkTx(t, s.base, map[string]any{"operations": []any{ackA, ackOp(msgs[1]), ackOp(msgs[2])},
		"requiredLeases": []string{msgs[1].LeaseID, msgs[0].LeaseID, msgs[2].LeaseID, "0190c1d2-0000-7000-8000-00000000dead"}})
	if code != http.StatusOK || r["success"] != true {
		t.Fatalf("%d %v", code, r)
	}
	for _, p := range []string{"A", "B", "C"} {
		wantNext(t, s.base, "sev", p, "m-2")
	}
}

// TestSDKTransactionRequiredLeasesMustBeUUIDs: requiredLeases is absent,
// null, or an array of UUID strings; anything else is a 400 and applies
// nothing.
func TestSDKTransactionRequiredLeasesMustBeUUIDs(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	const ops = `"operations":[{"type":"push","items":[{"queue":"rlb","partition":"P","payload":1,"transactionId":"%s"}]}]`
	for _, bad := range []string{`["not-a-uuid"]`, `[""]`, `[42]`, `[null]`, `"0190c1d2-0000-7000-8000-00000000dead"`, `{}`,
		`["0190c1d2-0000-7000-8000-00000000dead","nope"]`} {
		code, r := sdkTxRaw(t, s.base, "{"+fmt.Sprintf(ops, "BAD")+`,"requiredLeases":`+bad+"}")
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(r["error"]), "requiredLeases") {
			t.Errorf("requiredLeases %s: %d %v, want 400", bad, code, r)
		}
	}
	if n := len(readQueue(t, s.store, "rlb")); n != 0 {
		t.Fatalf("rejected transactions stored %d", n)
	}
	for i, good := range []string{`[]`, `null`} {
		if code, r := sdkTxRaw(t, s.base, "{"+fmt.Sprintf(ops, fmt.Sprint("G", i))+`,"requiredLeases":`+good+"}"); code != http.StatusOK || r["success"] != true {
			t.Errorf("requiredLeases %s: %d %v, want committed", good, code, r)
		}
	}
}
