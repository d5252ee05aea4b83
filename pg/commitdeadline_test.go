package pg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/queen-go/pg"
)

// slowCommits makes every later commit of a transaction that wrote a
// consumer cursor take d at least: a deferred constraint trigger sleeps
// at COMMIT (once per transaction), after the transaction's statements ran
// and before its commit is durable.
func slowCommits(t *testing.T, ctx context.Context, st *pg.Store, d time.Duration) {
	t.Helper()
	for _, q := range []string{
		// A cancel (pgx sends one when a context ends mid-query) is
		// ignored and the sleep finished, as a commit's WAL flush, the slow
		// part of a commit on a loaded machine, cannot be cancelled.
		fmt.Sprintf(`CREATE FUNCTION public.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE until timestamptz := clock_timestamp() + make_interval(secs => %.3f);
		BEGIN
			IF current_setting('test.slow_committed', true) = 'y' THEN RETURN NULL; END IF;
			PERFORM set_config('test.slow_committed', 'y', true);
			WHILE clock_timestamp() < until LOOP
				BEGIN
					PERFORM pg_sleep(extract(epoch FROM until - clock_timestamp()));
				EXCEPTION WHEN query_canceled THEN NULL;
				END;
			END LOOP;
			RETURN NULL;
		END $$`, d.Seconds()),
		`CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT OR UPDATE ON queen.consumer_cursors
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.slow_commit()`,
	} {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPopAutoAckCommitOutlivesDeadline: an autoAck pop whose context ends
// while its COMMIT is on the way still learns the outcome and delivers
// what it committed. PostgreSQL commits a COMMIT it has received whether
// or not the broker still waits for the answer; a pop that gave up on it
// answered an error with the cursor moved, and the batch was consumed and
// never delivered (the 900 messages a loaded pop-c10-b100 run lost: a
// waiting pop's attempt has about a second). Four concurrent pops a
// round, so the combined path (pg/popcombine.go) runs as well as pops
// alone. The invariant: every message the cursors moved past was
// delivered.
func TestPopAutoAckCommitOutlivesDeadline(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	const parts, per = 4, 7
	total := 0
	for p := range parts {
		name := string(rune('a' + p))
		store(t, ctx, st, "slow", name, per)
		// Each partition's cursor is created now, so that the pops below
		// take the claim statement (a fresh cursor is the general path's).
		res, err := st.Pop(ctx, pg.PopRequest{Queue: "slow", Partition: name, Group: pg.QueueModeGroup, Batch: 1, AutoAck: true})
		if err != nil || len(res.Messages) != 1 {
			t.Fatalf("first pop of %s: %v %+v", name, err, res)
		}
		total++
	}
	slowCommits(t, ctx, st, time.Second)
	for round := range 2 {
		var mu sync.Mutex
		delivered, failed := 0, 0
		var wg sync.WaitGroup
		for range parts {
			wg.Go(func() {
				pctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
				defer cancel()
				res, err := st.Pop(pctx, pg.PopRequest{Queue: "slow", Group: pg.QueueModeGroup, Batch: per / 2, AutoAck: true})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					t.Logf("round %d: pop failed: %v", round, err)
					return
				}
				delivered += len(res.Messages)
			})
		}
		wg.Wait()
		total += delivered
		// A pop that gave up left its backend committing: wait for it.
		waitIdle(t, ctx, st)
		var consumed int
		if err := st.Pool().QueryRow(ctx, `SELECT coalesce(sum(cursor_offset), 0) FROM queen.consumer_cursors`).Scan(&consumed); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: delivered %d (%d in all), %d pops failed, cursors past %d", round, delivered, total, failed, consumed)
		if consumed != total {
			t.Fatalf("round %d: the cursors moved past %d messages, %d were delivered (%d pops failed this round)",
				round, consumed, total, failed)
		}
		if delivered == 0 {
			t.Fatalf("round %d delivered nothing: no commit was exercised", round)
		}
	}
}

// waitIdle waits until no other session of st's database runs a
// statement (or a commit), 10 s at most.
func waitIdle(t *testing.T, ctx context.Context, st *pg.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var busy int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions still busy after 10 s", busy)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPopLeasedCommitOutlivesDeadline: a leased pop whose one round trip
// (BEGIN, claim, COMMIT) is still on the way when its context ends
// answers with its messages under the lease it committed, instead of
// failing with the lease committed unseen (the messages then held until
// it lapsed, and a delivery attempt counted for a pop nobody received).
func TestPopLeasedCommitOutlivesDeadline(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	store(t, ctx, st, "slowl", "p", 6)
	res, err := st.Pop(ctx, pg.PopRequest{Queue: "slowl", Partition: "p", Group: pg.QueueModeGroup, Batch: 1, AutoAck: true})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("first pop: %v %+v", err, res)
	}
	slowCommits(t, ctx, st, time.Second)
	pctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	res, err = st.Pop(pctx, pg.PopRequest{Queue: "slowl", Group: pg.QueueModeGroup, Batch: 3})
	waitIdle(t, ctx, st)
	var leased bool
	if qerr := st.Pool().QueryRow(ctx, `SELECT lease_id IS NOT NULL FROM queen.consumer_cursors`).Scan(&leased); qerr != nil {
		t.Fatal(qerr)
	}
	if err != nil {
		t.Fatalf("pop failed (%v); lease committed: %v", err, leased)
	}
	if len(res.Messages) != 3 || res.Messages[0].Offset != 1 || !leased {
		t.Fatalf("pop: %d messages from %v, lease on the cursor %v; want 3 from offset 1 under a lease", len(res.Messages), res.Messages, leased)
	}
	ack := make([]pg.AckRequest, len(res.Messages))
	for i, m := range res.Messages {
		ack[i] = pg.AckRequest{TransactionID: m.TransactionID, PartitionID: m.PartitionID, Status: pg.AckCompleted,
			LeaseID: &res.LeaseID, Group: pg.QueueModeGroup}
	}
	out, err := st.Ack(ctx, ack)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		if !r.Success {
			t.Fatalf("ack %d under the delivered lease: %+v", i, r)
		}
	}
}
