package pg_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestFastAckSameAnswersAsGeneral: a batch ack sent to the broker that
// handed out the lease (which remembers its transactionIds and completes a
// whole lease in one statement) answers exactly as one sent to another
// broker (which reads the lease's segments back), and leaves the same
// cursor, in every case where the fast path must stand aside too: acks
// out of order, a partial ack, a message deleted inside the lease, the
// lease's segment removed by retention, a lapsed lease, a foreign lease id,
// a failed ack.
func TestFastAckSameAnswersAsGeneral(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	popper, url := testenv.OpenSchemaStore(t)
	other := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
	opts := pg.DefaultQueueOptions()
	opts.LeaseTime = 1
	if _, err := popper.Configure(ctx, "short", "", "", "Default", opts); err != nil {
		t.Fatal(err)
	}
	type cursor struct {
		offset   int64
		leased   bool
		consumed int64
	}
	cases := []struct {
		name   string
		queue  string
		before func(t *testing.T, res *pg.PopResult) // after the pop, before the ack
		acks   func(res *pg.PopResult) []pg.AckRequest
		fast   bool // the popper's fast path applies
	}{
		{name: "whole lease in order", fast: true},
		{name: "whole lease reversed", fast: true, acks: func(res *pg.PopResult) []pg.AckRequest {
			a := acksOf(res, "")
			slices.Reverse(a)
			return a
		}},
		{name: "without lease ids", fast: true, acks: func(res *pg.PopResult) []pg.AckRequest {
			a := acksOf(res, "")
			for i := range a {
				a[i].LeaseID = nil
			}
			return a
		}},
		{name: "partial", acks: func(res *pg.PopResult) []pg.AckRequest { return acksOf(res, "")[:3] }},
		{name: "one twice", acks: func(res *pg.PopResult) []pg.AckRequest {
			a := acksOf(res, "")
			a[4] = a[3]
			return a
		}},
		{name: "failed", acks: func(res *pg.PopResult) []pg.AckRequest { return acksOf(res, pg.AckFailed) }},
		{name: "foreign lease", acks: func(res *pg.PopResult) []pg.AckRequest {
			a := acksOf(res, "")
			id := uuid.Must(uuid.NewV7())
			for i := range a {
				a[i].LeaseID = &id
			}
			return a
		}},
		{name: "deleted in the lease", before: func(t *testing.T, res *pg.PopResult) {
			m := res.Messages[2]
			if ok, err := pg.NewTombstones(popper).DeleteMessage(ctx, m.PartitionID, m.TransactionID); err != nil || !ok {
				t.Fatalf("delete: %v %v", ok, err)
			}
		}},
		{name: "segment removed by retention", before: func(t *testing.T, res *pg.PopResult) {
			if _, err := popper.Pool().Exec(ctx, `DELETE FROM queen.segments WHERE partition_id = $1`, res.Messages[0].PartitionID); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "lapsed lease", queue: "short", before: func(t *testing.T, res *pg.PopResult) { time.Sleep(1100 * time.Millisecond) }},
	}
	for i, tc := range cases {
		run := func(t *testing.T, acker *pg.Store, part string) ([]pg.AckResult, cursor) {
			t.Helper()
			queue := tc.queue
			if queue == "" {
				queue = "q"
			}
			store(t, ctx, popper, queue, part, 5)
			res, err := popper.Pop(ctx, pg.PopRequest{Queue: queue, Partition: part, Group: "g", Batch: 10})
			if err != nil || len(res.Messages) != 5 {
				t.Fatalf("pop: %v, %d messages", err, len(res.Messages))
			}
			if tc.before != nil {
				tc.before(t, res)
			}
			acks := acksOf(res, "")
			if tc.acks != nil {
				acks = tc.acks(res)
			}
			out, err := acker.Ack(ctx, acks)
			if err != nil {
				t.Fatal(err)
			}
			var c cursor
			if err := popper.Pool().QueryRow(ctx, `SELECT cursor_offset, lease_id IS NOT NULL, total_consumed
				FROM queen.consumer_cursors WHERE partition_id = $1 AND consumer_group = 'g'`, res.Messages[0].PartitionID).
				Scan(&c.offset, &c.leased, &c.consumed); err != nil {
				t.Fatal(err)
			}
			return out, c
		}
		t.Run(tc.name, func(t *testing.T) {
			part := string(rune('a' + i))
			before := pg.FastAcks(popper)
			fast, fc := run(t, popper, part+"-fast")
			if used := pg.FastAcks(popper) > before; used != tc.fast {
				t.Errorf("fast path used: %v, want %v", used, tc.fast)
			}
			general, gc := run(t, other, part+"-general")
			for i := range fast {
				fast[i].PartitionName, general[i].PartitionName = "", ""
			}
			if !slices.Equal(fast, general) {
				t.Errorf("answers differ:\n popper: %+v\n other:  %+v", fast, general)
			}
			if fc != gc {
				t.Errorf("cursors differ: popper %+v, other %+v", fc, gc)
			}
			if tc.fast && (fc.offset != 5 || fc.leased || fc.consumed != 5 || !fast[4].LeaseReleased) {
				t.Errorf("whole-lease ack left cursor %+v, answers %+v", fc, fast)
			}
		})
	}
}

// acksOf acks every message of res with status.
func acksOf(res *pg.PopResult, status string) []pg.AckRequest {
	var out []pg.AckRequest
	for _, m := range res.Messages {
		lease := m.LeaseID
		out = append(out, pg.AckRequest{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: &lease,
			Status: status, Group: "g"})
	}
	return out
}
