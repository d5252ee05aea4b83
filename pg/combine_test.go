package pg_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/queen-go/pg"
)

// lockCursors holds an ACCESS EXCLUSIVE lock on queen.consumer_cursors
// (every pop and ack then waits) until the returned func is called.
func lockCursors(t *testing.T, ctx context.Context, st *pg.Store) func() {
	t.Helper()
	return holdInTx(t, ctx, st, "LOCK TABLE queen.consumer_cursors IN ACCESS EXCLUSIVE MODE")
}

// lockCursorRows holds the row locks of partitionID's cursors (of group
// only, when group is not empty), as a transaction in flight would, until
// the returned func is called.
func lockCursorRows(t *testing.T, ctx context.Context, st *pg.Store, partitionID any, group string) func() {
	t.Helper()
	return holdInTx(t, ctx, st, `SELECT 1 FROM queen.consumer_cursors WHERE partition_id = $1 AND ($2 = '' OR consumer_group = $2) FOR UPDATE`,
		partitionID, group)
}

// holdInTx runs stmt with args in a transaction of its own and holds
// that transaction (and the locks it took) open until the returned func
// is called, at the test's end at the latest; the func rolls it back.
func holdInTx(t *testing.T, ctx context.Context, st *pg.Store, stmt string, args ...any) func() {
	t.Helper()
	conn, err := st.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		conn.Release()
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, stmt, args...); err != nil {
		conn.Release()
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			if _, err := conn.Exec(context.Background(), "ROLLBACK"); err != nil {
				t.Error(err)
			}
			conn.Release()
		})
	}
	t.Cleanup(release)
	return release
}

// runBehindLeader runs lead with a context of leadFor and, once it is in
// flight, each of the n calls with a context of callFor (they queue
// behind lead, and a combined transaction takes them when lead ends), all
// while PostgreSQL blocks them (lockCursors) for blockFor. It returns
// how long each of the n calls took.
func runBehindLeader(t *testing.T, ctx context.Context, st *pg.Store, n int, leadFor, callFor, blockFor time.Duration,
	lead func(ctx context.Context), call func(ctx context.Context, i int)) []time.Duration {
	t.Helper()
	release := lockCursors(t, ctx, st)
	var wg sync.WaitGroup
	wg.Go(func() {
		c, cancel := context.WithTimeout(ctx, leadFor)
		defer cancel()
		lead(c)
	})
	time.Sleep(50 * time.Millisecond) // lead is in flight
	took := make([]time.Duration, n)
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			c, cancel := context.WithTimeout(ctx, callFor)
			defer cancel()
			call(c, i)
			took[i] = time.Since(start)
		})
	}
	time.Sleep(blockFor)
	release()
	wg.Wait()
	return took
}

// TestCombinedPopsKeepTheirDeadlines: pops a combined transaction takes
// answer by their own context's deadline (the HTTP pop's database
// timeout, or a long-poll's timeout), not the combined transaction's
// own bound, when PostgreSQL does not answer (here: a table lock held).
func TestCombinedPopsKeepTheirDeadlines(t *testing.T) {
	t.Parallel()
	for _, autoAck := range []bool{true, false} {
		t.Run(map[bool]string{true: "autoAck", false: "leased"}[autoAck], func(t *testing.T) {
			t.Parallel()
			st, ctx := setupStatus(t)
			for p := range 6 {
				store(t, ctx, st, "q", string(rune('a'+p)), 5)
			}
			req := pg.PopRequest{Queue: "q", Group: pg.QueueModeGroup, Batch: 5, AutoAck: autoAck}
			var mu sync.Mutex
			got := 0 // messages the pops answered with
			pop := func(c context.Context) {
				if res, err := st.Pop(c, req); err == nil {
					mu.Lock()
					got += len(res.Messages)
					mu.Unlock()
				}
			}
			took := runBehindLeader(t, ctx, st, 4, 300*time.Millisecond, time.Second, 4*time.Second,
				pop, func(c context.Context, i int) { pop(c) })
			for i, d := range took {
				if d > 2500*time.Millisecond {
					t.Errorf("pop %d with a deadline of 1s answered after %v", i, d)
				}
			}
			// Once PostgreSQL answers again, every message not answered
			// is there to pop (none lost, none leased by a pop that
			// failed).
			n := got
			for range 12 {
				res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: pg.QueueModeGroup, Batch: 5, AutoAck: true})
				if err != nil {
					t.Fatal(err)
				}
				n += len(res.Messages)
			}
			if n != 30 {
				t.Errorf("%d messages answered and left after the timed-out pops, want 30", n)
			}
		})
	}
}

// TestCombinedAcksKeepTheirDeadlines: as TestCombinedPopsKeepTheirDeadlines
// for whole-lease acks.
func TestCombinedAcksKeepTheirDeadlines(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	var leases []*pg.PopResult
	for p := range 5 {
		store(t, ctx, st, "q", string(rune('a'+p)), 5)
	}
	for range 5 {
		res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: "g", Batch: 5})
		if err != nil || len(res.Messages) != 5 {
			t.Fatalf("pop: %v", err)
		}
		leases = append(leases, res)
	}
	took := runBehindLeader(t, ctx, st, 4, 300*time.Millisecond, time.Second, 4*time.Second,
		func(c context.Context) { _, _ = st.Ack(c, acksOf(leases[4], "")) },
		func(c context.Context, i int) { _, _ = st.Ack(c, acksOf(leases[i], "")) })
	for i, d := range took {
		if d > 2500*time.Millisecond {
			t.Errorf("ack %d with a deadline of 1s answered after %v", i, d)
		}
	}
}

// TestCombinedAcksNotHeldUpByOneLock: a whole-lease ack that waits for a
// cursor row another transaction holds does not hold up the whole-lease
// acks of the queue's other partitions queued behind it (the lock
// timeout of combined acks applies to the ack in flight too); every ack
// still succeeds.
func TestCombinedAcksNotHeldUpByOneLock(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	var leases []*pg.PopResult
	for p := range 5 {
		store(t, ctx, st, "q", string(rune('a'+p)), 5)
	}
	for range 5 {
		res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: "g", Batch: 5})
		if err != nil || len(res.Messages) != 5 {
			t.Fatalf("pop: %v", err)
		}
		leases = append(leases, res)
	}
	unlock := lockCursorRows(t, ctx, st, leases[4].Messages[0].PartitionID, "g")
	var wg sync.WaitGroup
	check := func(i int) {
		res, err := st.Ack(ctx, acksOf(leases[i], ""))
		if err != nil {
			t.Errorf("ack %d: %v", i, err)
			return
		}
		for _, r := range res {
			if !r.Success {
				t.Errorf("ack %d: %+v", i, r)
			}
		}
	}
	wg.Go(func() { check(4) }) // waits for the row lock
	time.Sleep(100 * time.Millisecond)
	took := make([]time.Duration, 4)
	for i := range 4 {
		wg.Go(func() {
			start := time.Now()
			check(i)
			took[i] = time.Since(start)
		})
	}
	time.Sleep(3 * time.Second)
	unlock()
	wg.Wait()
	for i, d := range took {
		if d > 1500*time.Millisecond {
			t.Errorf("ack %d of an unlocked partition answered after %v", i, d)
		}
	}
}

// TestCombinedPopsNotHeldUpByOneLock: a wildcard pop that waits for a
// busy partition's cursor (every candidate locked) does not hold up the
// pops of its key queued behind it while another partition has messages.
func TestCombinedPopsNotHeldUpByOneLock(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	store(t, ctx, st, "q", "a", 5)
	store(t, ctx, st, "q", "b", 5)
	// Give both partitions a cursor of the group (a clean claim).
	for range 2 {
		res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: pg.QueueModeGroup, Batch: 5, AutoAck: true})
		if err != nil || len(res.Messages) != 5 {
			t.Fatalf("pop: %v", err)
		}
	}
	store(t, ctx, st, "q", "a", 5)
	var aID any
	if err := st.Pool().QueryRow(ctx, `SELECT id FROM queen.partitions WHERE name = 'a'`).Scan(&aID); err != nil {
		t.Fatal(err)
	}
	unlock := lockCursorRows(t, ctx, st, aID, "")
	req := pg.PopRequest{Queue: "q", Group: pg.QueueModeGroup, Batch: 5}
	var wg sync.WaitGroup
	wg.Go(func() { // waits for partition a
		if res, err := st.Pop(ctx, req); err != nil || len(res.Messages) != 5 {
			t.Errorf("pop of a: %v", err)
		}
	})
	time.Sleep(200 * time.Millisecond)
	store(t, ctx, st, "q", "b", 5)
	wg.Go(func() {
		start := time.Now()
		res, err := st.Pop(ctx, req)
		took := time.Since(start)
		if err != nil || len(res.Messages) != 5 || res.Messages[0].Partition != "b" {
			t.Errorf("pop of b: %v %+v", err, res)
		}
		if took > 1500*time.Millisecond {
			t.Errorf("pop of b, waiting for none, answered after %v", took)
		}
	})
	time.Sleep(3 * time.Second)
	unlock()
	wg.Wait()
}

// TestCombinedAcksOneStatement: the whole-lease acks a combined
// transaction serves are applied by one statement over arrays, lease by
// lease with the conditions of a whole-lease ack alone: a lease with a
// message deleted inside it, a released lease and a lease already
// partly acked are left alone (their calls take the general path), and
// the others complete, each cursor past its own lease.
func TestCombinedAcksOneStatement(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	var leases []*pg.PopResult
	for p := range 5 {
		store(t, ctx, st, "q", string(rune('a'+p)), 5)
	}
	for range 5 {
		res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: "g", Batch: 5})
		if err != nil || len(res.Messages) != 5 {
			t.Fatalf("pop: %v", err)
		}
		leases = append(leases, res)
	}
	m := leases[1].Messages[2]
	if ok, err := pg.NewTombstones(st).DeleteMessage(ctx, m.PartitionID, m.TransactionID); err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if n, err := st.ReleaseLease(ctx, leases[2].LeaseID); err != nil || n != 1 {
		t.Fatalf("release: %v %v", n, err)
	}
	if res, err := st.Ack(ctx, acksOf(leases[3], "")[:1]); err != nil || !res[0].Success {
		t.Fatalf("partial ack: %v %+v", err, res)
	}
	calls := make([][]pg.AckRequest, len(leases))
	for i, l := range leases {
		calls[i] = acksOf(l, "")
	}
	applied := pg.ServeCombinedAcks(st, calls)
	if want := []bool{true, false, false, false, true}; !slices.Equal(applied, want) {
		t.Fatalf("applied %v, want %v", applied, want)
	}
	type cursor struct {
		offset, consumed int64
		leased           bool
	}
	want := []cursor{{5, 5, false}, {0, 0, true}, {0, 0, false}, {1, 1, true}, {5, 5, false}}
	for i, l := range leases {
		var c cursor
		if err := st.Pool().QueryRow(ctx, `SELECT cursor_offset, total_consumed, lease_id IS NOT NULL FROM queen.consumer_cursors
			WHERE partition_id = $1 AND consumer_group = 'g'`, l.Messages[0].PartitionID).Scan(&c.offset, &c.consumed, &c.leased); err != nil {
			t.Fatal(err)
		}
		if c != want[i] {
			t.Errorf("lease %d: cursor %+v, want %+v", i, c, want[i])
		}
	}
}

// TestPopTakesQueuedAcks: a leased pop that starts while whole-lease acks
// of its queue are queued (behind an ack transaction in flight) applies
// them in its own transaction, before its claim: the ack is answered
// applied, and the pop can claim the partition that ack released.
func TestPopTakesQueuedAcks(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	store(t, ctx, st, "q", "b", 5)
	req := pg.PopRequest{Queue: "q", Group: "g", Batch: 5}
	onB, err := st.Pop(ctx, req)
	if err != nil || len(onB.Messages) != 5 || onB.Messages[0].Partition != "b" {
		t.Fatalf("pop of b: %v %+v", err, onB)
	}
	store(t, ctx, st, "q", "a", 10)
	onA, err := st.Pop(ctx, req)
	if err != nil || len(onA.Messages) != 5 || onA.Messages[0].Partition != "a" {
		t.Fatalf("pop of a: %v %+v", err, onA)
	}
	// The ack of b's lease waits for its cursor row (held here), leading
	// the queue's ack line; the ack of a's lease queues behind it.
	unlock := lockCursorRows(t, ctx, st, onB.Messages[0].PartitionID, "g")
	ack := func(l *pg.PopResult) {
		res, err := st.Ack(ctx, acksOf(l, ""))
		if err != nil {
			t.Errorf("ack of %s: %v", l.Messages[0].Partition, err)
			return
		}
		for _, r := range res {
			if !r.Success {
				t.Errorf("ack of %s: %+v", l.Messages[0].Partition, r)
			}
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { ack(onB) })
	time.Sleep(30 * time.Millisecond)
	ackedA := make(chan struct{})
	wg.Go(func() { ack(onA); close(ackedA) })
	time.Sleep(30 * time.Millisecond)
	before := pg.CombinedAcks(st)
	res, err := st.Pop(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ackedA:
	case <-time.After(5 * time.Second):
		t.Fatal("the queued ack was not answered with the pop")
	}
	if got := pg.CombinedAcks(st) - before; got != 1 {
		t.Errorf("%d acks applied by a combined transaction, want 1", got)
	}
	if len(res.Messages) != 5 || res.Messages[0].Partition != "a" || res.Messages[0].Offset != 5 {
		t.Errorf("pop after the ack of a: %+v, want a's offsets 5..9", res.Messages)
	}
	unlock()
	wg.Wait()
}

// TestAckNotHeldUpByWaitingPop: a whole-lease ack that arrives while a
// leased pop of its queue is in flight queues for that pop's next
// transaction, but a pop that waits (here for a cursor row held by
// another transaction) does not hold it up: it applies itself shortly.
func TestAckNotHeldUpByWaitingPop(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	store(t, ctx, st, "q", "a", 5)
	store(t, ctx, st, "q", "b", 5)
	req := pg.PopRequest{Queue: "q", Group: "g", Batch: 5}
	x, err := st.Pop(ctx, req)
	if err != nil || len(x.Messages) != 5 {
		t.Fatalf("pop: %v", err)
	}
	y, err := st.Pop(ctx, req)
	if err != nil || len(y.Messages) != 5 || y.Messages[0].Partition == x.Messages[0].Partition {
		t.Fatalf("pop: %v %+v", err, y)
	}
	if res, err := st.Ack(ctx, acksOf(y, "")); err != nil || !res[len(res)-1].Success {
		t.Fatalf("ack: %v %+v", err, res)
	}
	store(t, ctx, st, "q", y.Messages[0].Partition, 5)
	unlock := lockCursorRows(t, ctx, st, y.Messages[0].PartitionID, "g")
	popped := make(chan *pg.PopResult, 1)
	go func() { // waits for y's partition, the only one with messages
		res, err := st.Pop(ctx, req)
		if err != nil {
			t.Errorf("waiting pop: %v", err)
		}
		popped <- res
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	res, err := st.Ack(ctx, acksOf(x, ""))
	if took := time.Since(start); took > time.Second {
		t.Errorf("ack answered after %v behind a waiting pop", took)
	}
	if err != nil || !res[len(res)-1].Success {
		t.Errorf("ack: %v %+v", err, res)
	}
	select {
	case r := <-popped:
		t.Fatalf("the pop did not wait: %+v", r)
	default:
	}
	unlock()
	if r := <-popped; r == nil || len(r.Messages) == 0 {
		t.Errorf("waiting pop delivered %+v", r)
	}
}
