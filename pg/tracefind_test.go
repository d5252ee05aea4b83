package pg_test

import (
	"errors"
	"testing"

	"github.com/queenmq/queen-go/pg"
)

// TestTraceOfUnknownTxIDReadsNoLeasedSegment: a trace naming a
// transactionId the partition never stored is answered "not found"
// without reading the segments the partition's leases cover when the
// broker's lease memo holds those leases (before, every such trace read
// and decoded every live lease's messages: with 8 groups holding 16 MiB
// leases, 0.2 s of broker CPU per request). A leased message whose dedup
// entry is gone is still found, through the memo or, when the memo does
// not hold the lease (another broker's), through the segments.
func TestTraceOfUnknownTxIDReadsNoLeasedSegment(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	store(t, ctx, st, "tr", "p", 10)
	store(t, ctx, st, "tr", "dmg", 10)
	var leased []pg.PoppedMessage
	for _, g := range []string{"g0", "g1"} {
		for _, p := range []string{"p", "dmg"} {
			res, err := st.Pop(ctx, pg.PopRequest{Queue: "tr", Partition: p, Group: g, Batch: 10})
			if err != nil || len(res.Messages) != 10 {
				t.Fatalf("pop %s %s: %v", g, p, err)
			}
			if g == "g0" && p == "p" {
				leased = res.Messages
			}
		}
	}
	dmg := leased[0].PartitionID // replaced below
	if err := st.Pool().QueryRow(ctx, `SELECT p.id FROM queen.partitions p WHERE p.name = 'dmg'`).Scan(&dmg); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `DELETE FROM queen.dedup_batches`); err != nil { // what SweepDedup does later
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE queen.segments SET body = '\x07'::bytea WHERE partition_id = $1`, dmg); err != nil {
		t.Fatal(err)
	}
	trace := func(m pg.PoppedMessage) error {
		_, err := st.RecordTrace(ctx, pg.TraceInput{PartitionID: m.PartitionID, TransactionID: m.TransactionID,
			ConsumerGroup: "g0", EventType: "info", Data: []byte(`{}`)})
		return err
	}
	unknown := leased[0]
	unknown.PartitionID, unknown.TransactionID = dmg, "never-stored"
	if err := trace(unknown); !errors.Is(err, pg.ErrTraceMessageNotFound) {
		t.Fatalf("unknown transactionId under leases held in the memo: %v; want not found without reading a segment", err)
	}
	if err := trace(leased[3]); err != nil {
		t.Fatalf("leased message, dedup entry gone, lease in the memo: %v", err)
	}
	pg.ForgetLeaseMemo(st)
	if err := trace(leased[4]); err != nil {
		t.Fatalf("leased message, dedup entry gone, lease not in the memo: %v", err)
	}
	if err := trace(unknown); err == nil || errors.Is(err, pg.ErrTraceMessageNotFound) {
		t.Fatalf("unknown transactionId, leases not in the memo, damaged segment: %v; want the segment read (and its error)", err)
	}
}
