package pg_test

import (
	"testing"
	"time"

	"github.com/queenmq/queen-go/pg"
)

// TestClaimOneWritesCursorAsGeneralPath: a wildcard pop of one partition,
// whose cursor write is done by the claim statement itself, leaves the
// cursor exactly as the general path (a pop naming the partition) does,
// leased and with autoAck, and delivers the same offsets; a cursor the
// claim may not write (a lapsed lease, a deleted message at the cursor)
// gets the general rules (a retry counted, the deleted offset passed
// over).
func TestClaimOneWritesCursorAsGeneralPath(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	opts := pg.DefaultQueueOptions()
	opts.LeaseTime = 1
	for _, q := range []string{"wild", "named"} {
		if _, err := st.Configure(ctx, q, "", "", "Default", opts); err != nil {
			t.Fatal(err)
		}
		store(t, ctx, st, q, "p", 30)
	}
	type cursor struct {
		offset, leaseEnd, consumed int64
		leased                     bool
		retries                    int
		leaseSecs                  float64
	}
	read := func(q string) cursor {
		t.Helper()
		var c cursor
		if err := st.Pool().QueryRow(ctx, `SELECT c.cursor_offset, coalesce(c.lease_end, -1), c.total_consumed,
			c.lease_id IS NOT NULL, c.retry_count, coalesce(round(extract(epoch FROM c.lease_expires_at - now())), -1)
			FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id
			JOIN queen.queues qu ON qu.id = p.queue_id WHERE qu.name = $1 AND c.consumer_group = 'g'`, q).
			Scan(&c.offset, &c.leaseEnd, &c.consumed, &c.leased, &c.retries, &c.leaseSecs); err != nil {
			t.Fatal(err)
		}
		return c
	}
	pop := func(q string, batch int, autoAck bool) []int64 {
		t.Helper()
		req := pg.PopRequest{Queue: q, Group: "g", Batch: batch, AutoAck: autoAck}
		if q == "named" {
			req.Partition = "p"
		}
		res, err := st.Pop(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var offs []int64
		for _, m := range res.Messages {
			offs = append(offs, m.Offset)
		}
		return offs
	}
	same := func(step string, batch int, autoAck bool) {
		t.Helper()
		w, n := pop("wild", batch, autoAck), pop("named", batch, autoAck)
		if len(w) != len(n) || (len(w) > 0 && (w[0] != n[0] || w[len(w)-1] != n[len(n)-1])) {
			t.Fatalf("%s: wildcard pop delivered %v, named %v", step, w, n)
		}
		if cw, cn := read("wild"), read("named"); cw != cn {
			t.Fatalf("%s: cursor after a wildcard pop %+v, after a named one %+v", step, cw, cn)
		}
	}
	// The first pops of the group create its cursors (general path).
	same("first pop", 5, true)
	same("autoAck", 7, true)
	same("leased", 4, false)
	time.Sleep(1100 * time.Millisecond) // the lease lapses: a retry
	same("after a lapsed lease", 6, false)
	time.Sleep(1100 * time.Millisecond)
	// The lease lapses again; the message at the cursor is deleted.
	for _, q := range []string{"wild", "named"} {
		peek, err := st.Pop(ctx, pg.PopRequest{Queue: q, Partition: "p", Group: "peek", Batch: 100, AutoAck: true})
		if err != nil {
			t.Fatal(err)
		}
		at := read(q).offset
		for _, m := range peek.Messages {
			if m.Offset == at {
				if ok, err := pg.NewTombstones(st).DeleteMessage(ctx, m.PartitionID, m.TransactionID); err != nil || !ok {
					t.Fatalf("delete: %v %v", ok, err)
				}
			}
		}
	}
	same("leased after a lapsed lease and a deletion", 3, false)
	time.Sleep(1100 * time.Millisecond)
	same("autoAck to the end", 100, true)
	if c := read("wild"); c.offset != 30 || c.leased {
		t.Fatalf("cursor at the end: %+v", c)
	}
}

// TestPopOneTripGivesLeaseBackOnBadSegment: a leased wildcard pop commits
// its lease with the claim, before it decodes; a segment that does not
// decode fails the pop and gives the lease back (no lease left, no retry
// counted), so the next pop sees the partition as before.
func TestPopOneTripGivesLeaseBackOnBadSegment(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	store(t, ctx, st, "bad", "p", 10)
	// The group's first pop creates its cursor (general path).
	if res, err := st.Pop(ctx, pg.PopRequest{Queue: "bad", Group: "g", Batch: 2, AutoAck: true}); err != nil || len(res.Messages) != 2 {
		t.Fatalf("first pop: %v", err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE queen.segments SET body = '\x07'::bytea`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pop(ctx, pg.PopRequest{Queue: "bad", Group: "g", Batch: 5}); err == nil {
		t.Fatal("a pop of a damaged segment succeeded")
	}
	var leased bool
	var offset int64
	var retries int
	if err := st.Pool().QueryRow(ctx, `SELECT lease_id IS NOT NULL, cursor_offset, retry_count FROM queen.consumer_cursors
		WHERE consumer_group = 'g'`).Scan(&leased, &offset, &retries); err != nil {
		t.Fatal(err)
	}
	if leased || offset != 2 || retries != 0 {
		t.Fatalf("after the failed pop: leased %v, cursor %d, retries %d; want no lease, 2, 0", leased, offset, retries)
	}
}
