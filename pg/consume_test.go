package pg_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/queenmq/queen-go/pg"
)

// TestPopAutoAckConcurrentExactlyOnce: concurrent autoAck pops of a
// queue (claimed with SKIP LOCKED, spread over the partitions) deliver
// every stored message exactly once, each pop a contiguous ascending run
// of one partition, and the cursors end at the partitions' ends.
func TestPopAutoAckConcurrentExactlyOnce(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	const parts, per = 6, 40
	for p := range parts {
		store(t, ctx, st, "q", string(rune('a'+p)), per)
	}
	seen := drainAutoAck(t, ctx, st, []string{pg.QueueModeGroup}, 8, 7)
	checkOnce(t, seen, parts*per)
	for k := range seen {
		if k.off < 0 || k.off >= per {
			t.Fatalf("%v delivered, beyond the %d stored", k, per)
		}
	}
	wantCursorsAtEnd(t, ctx, st)
}

// wantCursorsAtEnd fails t unless every consumer cursor of st's database
// is at its partition's end.
func wantCursorsAtEnd(t *testing.T, ctx context.Context, st *pg.Store) {
	t.Helper()
	var behind int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id
		WHERE c.cursor_offset <> p.next_offset`).Scan(&behind); err != nil || behind != 0 {
		t.Fatalf("cursors not at the partitions' ends: %d (%v)", behind, err)
	}
}

// TestPopWaitsForLockedCandidate: a wildcard pop whose only candidate's
// cursor is locked by a transaction in flight waits for it and then
// delivers from where that transaction left the cursor, instead of
// answering empty.
func TestPopWaitsForLockedCandidate(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	store(t, ctx, st, "w", "only", 5)
	res, err := st.Pop(ctx, pg.PopRequest{Queue: "w", Group: pg.QueueModeGroup, Batch: 1, AutoAck: true})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("first pop: %v %+v", err, res)
	}
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `UPDATE queen.consumer_cursors SET cursor_offset = 2`); err != nil {
		t.Fatal(err)
	}
	done := make(chan *pg.PopResult, 1)
	go func() {
		r, err := st.Pop(ctx, pg.PopRequest{Queue: "w", Group: pg.QueueModeGroup, Batch: 10, AutoAck: true})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	select {
	case r := <-done:
		t.Fatalf("pop returned while the cursor was locked: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r == nil || len(r.Messages) != 3 || r.Messages[0].Offset != 2 {
			t.Fatalf("after the lock: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pop still waiting after the lock was released")
	}
}

// groupOffset is one message as one consumer group received it.
type groupOffset struct {
	group, part string
	off         int64
}

// drainAutoAck runs consumers concurrent autoAck pop loops of batch on
// queue q for each of groups, each until it has answered empty three
// times, and returns how often each group received each message. Every
// pop must be one partition's contiguous ascending run of at most batch,
// without a lease.
func drainAutoAck(t *testing.T, ctx context.Context, st *pg.Store, groups []string, consumers, batch int) map[groupOffset]int {
	t.Helper()
	var mu sync.Mutex
	seen := map[groupOffset]int{}
	var wg sync.WaitGroup
	errs := make(chan error, len(groups)*consumers)
	for _, group := range groups {
		for range consumers {
			wg.Go(func() {
				for empty := 0; empty < 3; {
					res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: group, Batch: batch, AutoAck: true})
					if err != nil {
						errs <- err
						return
					}
					if len(res.Messages) == 0 {
						empty++
						continue
					}
					mu.Lock()
					if len(res.Messages) > batch || len(res.Claimed) != 1 || res.Claimed[0].Name != res.Messages[0].Partition {
						t.Errorf("pop of %d messages, claimed %v", len(res.Messages), res.Claimed)
					}
					for i, m := range res.Messages {
						if m.LeaseID != uuid.Nil {
							t.Errorf("autoAck message under lease %s", m.LeaseID)
						}
						if i > 0 && (m.Partition != res.Messages[0].Partition || m.Offset != res.Messages[i-1].Offset+1) {
							t.Errorf("pop not one contiguous run: %d after %d", m.Offset, res.Messages[i-1].Offset)
						}
						seen[groupOffset{group, m.Partition, m.Offset}]++
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return seen
}

// checkOnce fails t unless seen holds want distinct messages, each
// received once.
func checkOnce(t *testing.T, seen map[groupOffset]int, want int) {
	t.Helper()
	if len(seen) != want {
		t.Fatalf("delivered %d distinct (group, message), want %d", len(seen), want)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%v delivered %d times", k, n)
		}
	}
}

// TestPopAutoAckCombined: many concurrent autoAck pops of one queue are
// served partly by combined transactions (pg/popcombine.go), and every
// pop still gets a contiguous ascending run of one partition of at most
// its batch, every message exactly once, the cursors at the ends.
func TestPopAutoAckCombined(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	const parts, per, batch = 12, 60, 5
	for p := range parts {
		store(t, ctx, st, "q", string(rune('a'+p)), per)
	}
	checkOnce(t, drainAutoAck(t, ctx, st, []string{pg.QueueModeGroup}, 16, batch), parts*per)
	if n := pg.CombinedPops(st); n == 0 {
		t.Fatal("no pop was served by a combined transaction")
	}
	wantCursorsAtEnd(t, ctx, st)
}

// TestPopAutoAckCombinedGroups: concurrent autoAck pops of several
// consumer groups of one queue are served partly by transactions that
// claim for several groups at once (serveAutoAckGroups); every pop still
// gets one partition's contiguous ascending run of at most its batch,
// every message reaches every group exactly once, and every group's
// cursors end at the partitions' ends.
func TestPopAutoAckCombinedGroups(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	const parts, per, batch, consumers = 6, 60, 5, 3
	groups := []string{"G", "H", "I", "J"}
	for p := range parts {
		store(t, ctx, st, "q", string(rune('a'+p)), per)
	}
	checkOnce(t, drainAutoAck(t, ctx, st, groups, consumers, batch), len(groups)*parts*per)
	if n := pg.CombinedGroupPops(st); n == 0 {
		t.Fatal("no pop was served by a combined transaction of several groups")
	}
	var cursors, behind int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE c.cursor_offset <> p.next_offset OR c.lease_id IS NOT NULL)
		FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id`).Scan(&cursors, &behind); err != nil ||
		cursors != len(groups)*parts || behind != 0 {
		t.Fatalf("%d cursors (want %d), %d behind or leased at the end (%v)", cursors, len(groups)*parts, behind, err)
	}
}

// TestAutoAckGroupsTransaction: one combined transaction of autoAck pops
// of several consumer groups (serveBatch, driven directly) gives the pops
// of one group distinct partitions even when they ask for different
// subscriptions (one claim statement per group), each pop one
// contiguous run from its group's cursor; a group too new for the claim
// statement (its first pop records the subscription) leaves its pops to
// run by themselves with nothing consumed for it; and a run that does not
// decode rolls the whole transaction back, so no group's cursor moves.
func TestAutoAckGroupsTransaction(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, p := range []string{"a", "b", "c"} {
		store(t, ctx, st, "q", p, 10)
	}
	// Groups g and h read offset 0 of every partition (their cursors
	// exist, so their claims take the fast path); group fresh never read.
	for _, g := range []string{"g", "h"} {
		for range 3 {
			if res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: g, Batch: 1, AutoAck: true}); err != nil || len(res.Messages) != 1 {
				t.Fatalf("first pops of %s: %+v %v", g, res, err)
			}
		}
	}
	cursors := func() map[string]int64 {
		t.Helper()
		rows, err := st.Pool().Query(ctx, `SELECT c.consumer_group || '/' || p.name, c.cursor_offset
			FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var k string
			var v int64
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		return out
	}
	req := func(group, mode string) pg.PopRequest {
		return pg.PopRequest{Queue: "q", Group: group, Batch: 4, AutoAck: true, SubscriptionMode: mode}
	}
	// Four pops of g (three partitions: one of them has nothing left to
	// claim and runs by itself), two of h, one of the new group.
	reqs := []pg.PopRequest{req("g", ""), req("h", ""), req("g", pg.SubscribeNew), req("fresh", ""), req("g", ""),
		req("h", pg.SubscribeNew), req("g", pg.SubscribeNew)}
	res := pg.ServeAutoAckBatch(st, reqs)
	seen := map[string]bool{}
	served := map[string]int{}
	for i, r := range res {
		if r == nil {
			continue
		}
		if len(r.Messages) != 4 || len(r.Claimed) != 1 {
			t.Fatalf("pop %d (%s): %+v", i, reqs[i].Group, r)
		}
		served[reqs[i].Group]++
		part := r.Messages[0].Partition
		k := reqs[i].Group + "/" + part
		if seen[k] {
			t.Errorf("pop %d: group %s given partition %s twice in one transaction", i, reqs[i].Group, part)
		}
		seen[k] = true
		for j, m := range r.Messages {
			if m.Partition != part || m.Offset != int64(1+j) {
				t.Errorf("pop %d: message %d is %s/%d, want %s/%d", i, j, m.Partition, m.Offset, part, 1+j)
			}
		}
	}
	if served["g"] != 3 || served["h"] != 2 || served["fresh"] != 0 {
		t.Fatalf("pops served per group %v, want g 3, h 2, fresh 0", served)
	}
	before := cursors()
	for k := range seen {
		if before[k] != 5 {
			t.Errorf("cursor %s at %d after the transaction, want 5", k, before[k])
		}
	}
	if _, ok := before["fresh/a"]; ok {
		t.Errorf("the new group got cursors from a transaction that left it alone: %v", before)
	}

	// A segment of partition c that does not decode: g's three pops claim
	// all three partitions, c among them, so the transaction fails and no
	// group's cursor moves.
	if _, err := st.Pool().Exec(ctx, `UPDATE queen.segments s SET body = '\x00ff' FROM queen.partitions p
		WHERE p.id = s.partition_id AND p.name = 'c'`); err != nil {
		t.Fatal(err)
	}
	res = pg.ServeAutoAckBatch(st, []pg.PopRequest{req("g", ""), req("h", ""), req("g", ""), req("h", ""), req("g", ""), req("h", "")})
	for i, r := range res {
		if r != nil {
			t.Errorf("pop %d served by a transaction with an undecodable run: %+v", i, r)
		}
	}
	if after := cursors(); !maps.Equal(after, before) {
		t.Fatalf("cursors moved by a failed transaction: %v, before %v", after, before)
	}
}

// TestPopAutoAckCombinedOnePartition: with one partition and more
// concurrent autoAck pops than partitions, the pops a combined
// transaction finds no partition for run again by themselves and wait
// for the partition instead of answering empty while messages are
// waiting; every message is delivered once.
func TestPopAutoAckCombinedOnePartition(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	const total, batch = 400, 4
	store(t, ctx, st, "q", "only", total)
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: pg.QueueModeGroup, Batch: batch, AutoAck: true})
				if err != nil {
					errs <- err
					return
				}
				if len(res.Messages) == 0 {
					// Empty only once everything is delivered (the
					// cursor can only have moved on since the answer).
					var cursor, next int64
					if err := st.Pool().QueryRow(ctx, `SELECT c.cursor_offset, p.next_offset FROM queen.consumer_cursors c
						JOIN queen.partitions p ON p.id = c.partition_id`).Scan(&cursor, &next); err != nil {
						errs <- err
					} else if cursor != next {
						t.Errorf("empty pop with the cursor at %d of %d", cursor, next)
					}
					return
				}
				mu.Lock()
				for _, m := range res.Messages {
					seen[m.Offset]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != total {
		t.Fatalf("delivered %d distinct messages, want %d", len(seen), total)
	}
	for off, n := range seen {
		if n != 1 {
			t.Fatalf("offset %d delivered %d times", off, n)
		}
	}
}

// TestPopLeasedCombined: concurrent leased pops of several consumer
// groups of one queue, served partly by combined transactions (each pop
// its own claim and lease), each get one partition's contiguous run under
// a lease of their own; acked (concurrent whole-lease acks partly
// combined too), every message reaches every group exactly once, and
// every lease is released at the end.
func TestPopLeasedCombined(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	const parts, per, batch, groups, consumers = 6, 40, 5, 3, 4
	for p := range parts {
		store(t, ctx, st, "q", string(rune('a'+p)), per)
	}
	type key struct {
		group, part string
		off         int64
	}
	var mu sync.Mutex
	seen := map[key]int{}
	leases := map[uuid.UUID]string{}
	var wg sync.WaitGroup
	errs := make(chan error, groups*consumers)
	for g := range groups {
		group := string(rune('G' + g))
		for range consumers {
			wg.Go(func() {
				for empty := 0; empty < 3; {
					res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: group, Batch: batch})
					if err != nil {
						errs <- err
						return
					}
					if len(res.Messages) == 0 {
						empty++
						continue
					}
					mu.Lock()
					if other, ok := leases[res.LeaseID]; ok || res.LeaseID == uuid.Nil {
						t.Errorf("lease %s of group %s handed out before (to %q)", res.LeaseID, group, other)
					}
					leases[res.LeaseID] = group
					if len(res.Messages) > batch || len(res.Claimed) != 1 {
						t.Errorf("pop of %d messages, claimed %v", len(res.Messages), res.Claimed)
					}
					var acks []pg.AckRequest
					for i, m := range res.Messages {
						if m.LeaseID != res.LeaseID {
							t.Errorf("message under lease %s, pop's lease %s", m.LeaseID, res.LeaseID)
						}
						if i > 0 && (m.Partition != res.Messages[0].Partition || m.Offset != res.Messages[i-1].Offset+1) {
							t.Errorf("pop not one contiguous run: %d after %d", m.Offset, res.Messages[i-1].Offset)
						}
						seen[key{group, m.Partition, m.Offset}]++
						l := m.LeaseID
						acks = append(acks, pg.AckRequest{TransactionID: m.TransactionID, PartitionID: m.PartitionID,
							LeaseID: &l, Status: pg.AckCompleted, Group: group})
					}
					mu.Unlock()
					out, err := st.Ack(ctx, acks)
					if err != nil {
						errs <- err
						return
					}
					for _, r := range out {
						if !r.Success {
							t.Errorf("ack of group %s: %s", group, r.Error)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != groups*parts*per {
		t.Fatalf("delivered %d distinct (group, message), want %d", len(seen), groups*parts*per)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%v delivered %d times", k, n)
		}
	}
	if n := pg.CombinedPops(st); n == 0 {
		t.Fatal("no pop was served by a combined transaction")
	}
	if n := pg.CombinedAcks(st); n == 0 {
		t.Fatal("no ack was applied by a combined transaction")
	}
	var held, behind int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE c.lease_id IS NOT NULL), count(*) FILTER (WHERE c.cursor_offset <> p.next_offset)
		FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id`).Scan(&held, &behind); err != nil || held != 0 || behind != 0 {
		t.Fatalf("%d leases held, %d cursors behind at the end (%v)", held, behind, err)
	}
}
