package pg_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenmq/queen-go/pg"
)

// TestFastAcksSameAsOneByOne: fastAcksSQL over the leases of a combined
// transaction applies exactly the leases, and leaves exactly the cursors,
// that one fastAckSQL per lease in the same order does, for leases as the
// pop left them and for every way a lease can have changed between the
// memo and the statement: expired, released, a message deleted inside
// it, partly acked, a memo of another lease id or other offsets (first
// or last), a group without a cursor, and one lease twice in the arrays
// (applied once, consumed once).
func TestFastAcksSameAsOneByOne(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	const parts = 10
	for p := range parts {
		store(t, ctx, st, "q", string(rune('a'+p)), 5)
	}
	var leases []pg.WholeLease
	pops := map[uuid.UUID]*pg.PopResult{}
	for range parts {
		res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: "g", Batch: 5})
		if err != nil || len(res.Messages) != 5 {
			t.Fatalf("pop: %v", err)
		}
		m := res.Messages
		leases = append(leases, pg.WholeLease{Partition: m[0].PartitionID, Lease: res.LeaseID, Group: "g", Queue: "q",
			First: m[0].Offset, Last: m[4].Offset})
		pops[m[0].PartitionID] = res
	}
	slices.SortFunc(leases, func(x, y pg.WholeLease) int { return bytes.Compare(x.Partition[:], y.Partition[:]) })
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	// 0, 9: as the pop left them.
	exec(`UPDATE queen.consumer_cursors SET lease_expires_at = now() - interval '1 second' WHERE partition_id = $1`, leases[1].Partition)
	if n, err := st.ReleaseLease(ctx, leases[2].Lease); err != nil || n != 1 {
		t.Fatalf("release: %v %v", n, err)
	}
	m := pops[leases[3].Partition].Messages[2]
	if ok, err := pg.NewTombstones(st).DeleteMessage(ctx, m.PartitionID, m.TransactionID); err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if res, err := st.Ack(ctx, acksOf(pops[leases[4].Partition], "")[:1]); err != nil || !res[0].Success {
		t.Fatalf("partial ack: %v %+v", err, res)
	}
	leases[5].Lease = uuid.New()
	leases[6].Last--
	leases[7].First++
	leases[8].Group = "other"
	dup := slices.Insert(slices.Clone(leases), 1, leases[0]) // lease 0 twice, adjacent as sorted
	for _, list := range [][]pg.WholeLease{leases, dup} {
		one, oneCursors, err := pg.TryWholeLeaseAcks(ctx, st, list, false)
		if err != nil {
			t.Fatal(err)
		}
		all, allCursors, err := pg.TryWholeLeaseAcks(ctx, st, list, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == len(dup) && all[0] != one[0] {
			// Either of one lease's two copies may be the one applied:
			// the same answer to two calls that ack the same lease.
			all[0], all[1] = all[1], all[0]
		}
		if !slices.Equal(one, all) {
			t.Errorf("%d leases: applied one by one %v, in one statement %v", len(list), one, all)
		}
		if !slices.Equal(oneCursors, allCursors) {
			t.Errorf("%d leases: cursors one by one\n%s\nin one statement\n%s", len(list),
				strings.Join(oneCursors, "\n"), strings.Join(allCursors, "\n"))
		}
		want := []bool{true, false, false, false, false, false, false, false, false, true}
		if len(list) == len(dup) {
			want = slices.Insert(want, 1, false)
		}
		if !slices.Equal(one, want) {
			t.Errorf("%d leases: applied %v, want %v", len(list), one, want)
		}
	}
}

// TestFastAcksLockInArrayOrder: fastAcksSQL locks the leases' cursors one
// after the other in array order (the caller's (partition, group) order,
// the order every ack path locks in, so that concurrent acks cannot
// deadlock): while it waits for the fourth cursor, held by another
// transaction, it holds the first three and not the last two; and it
// gives up after the combined acks' lock timeout (55P03).
func TestFastAcksLockInArrayOrder(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	const parts = 6
	for p := range parts {
		store(t, ctx, st, "q", string(rune('a'+p)), 2)
	}
	var leases []pg.WholeLease
	for range parts {
		res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: "g", Batch: 2})
		if err != nil || len(res.Messages) != 2 {
			t.Fatalf("pop: %v", err)
		}
		m := res.Messages
		leases = append(leases, pg.WholeLease{Partition: m[0].PartitionID, Lease: res.LeaseID, Group: "g", Queue: "q",
			First: m[0].Offset, Last: m[1].Offset})
	}
	slices.SortFunc(leases, func(x, y pg.WholeLease) int { return bytes.Compare(x.Partition[:], y.Partition[:]) })
	holder, err := st.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	prober, err := st.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer prober.Release()
	const lockSQL = `SELECT 1 FROM queen.consumer_cursors WHERE partition_id = $1 AND consumer_group = 'g' FOR UPDATE NOWAIT`
	// locked reports whether another transaction holds lease i's cursor.
	locked := func(i int) bool {
		t.Helper()
		_, err := prober.Exec(ctx, lockSQL, leases[i].Partition)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	const waitingSQL = `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND query LIKE 'WITH k AS (%unnest(%'`
	waiting := func() bool {
		var n int
		if err := prober.QueryRow(ctx, waitingSQL).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	for attempt := 0; ; attempt++ {
		if _, err := holder.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Exec(ctx, lockSQL, leases[3].Partition); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, _, err := pg.TryWholeLeaseAcks(ctx, st, leases, true)
			done <- err
		}()
		for !waiting() && time.Since(start) < 2*time.Second {
		}
		got := []bool{locked(0), locked(1), locked(2), locked(4), locked(5)}
		stillWaiting := waiting()
		err := <-done
		took := time.Since(start)
		if _, rerr := holder.Exec(ctx, "ROLLBACK"); rerr != nil {
			t.Fatal(rerr)
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || took > 2*time.Second {
			t.Fatalf("the statement waiting for a held cursor ended after %v with %v, want 55P03 after the lock timeout", took, err)
		}
		if !stillWaiting {
			if attempt == 5 {
				t.Fatal("the statement never seen waiting long enough to look at its locks")
			}
			continue // it gave up while we looked: look again
		}
		if want := []bool{true, true, true, false, false}; !slices.Equal(got, want) {
			t.Fatalf("cursors 0, 1, 2, 4, 5 held while waiting for cursor 3: %v, want %v", got, want)
		}
		return
	}
}
