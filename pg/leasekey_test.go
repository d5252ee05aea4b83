package pg_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/queenmq/queen-go/pg"
)

// TestLeaseIDFormat: a seed is no lease target; bound to a key it is a
// version 8 RFC 9562 UUID that names that key and keeps the seed's
// partition bit and random half; ids of other shapes (UUIDv7 as minted
// before lease keys, v4) are no targets; and the SQL expression binds
// exactly as the Go function does.
func TestLeaseIDFormat(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, multi := range []bool{false, true} {
		for _, key := range []int64{1, 2, 255, 1 << 40, 1<<62 - 1} {
			seed, err := pg.NewLeaseSeed(multi)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, ok := pg.LeaseTarget(seed); ok {
				t.Fatalf("seed %s is a lease target", seed)
			}
			id := pg.BindLeaseID(seed, key)
			if id.Version() != 8 || id.Variant() != uuid.RFC4122 {
				t.Fatalf("bound id %s: version %d variant %v", id, id.Version(), id.Variant())
			}
			if [8]byte(id[:8]) != [8]byte(seed[:8]) {
				t.Fatalf("bound id %s does not keep seed %s", id, seed)
			}
			k, m, ok := pg.LeaseTarget(id)
			if !ok || k != key || m != multi {
				t.Fatalf("LeaseTarget(%s) = %d, %v, %v; want %d, %v, true", id, k, m, ok, key, multi)
			}
			var got pgtype.UUID
			if err := st.Pool().QueryRow(ctx, `SELECT `+pg.LeaseIDSQL("$1::uuid", "$2::bigint"),
				pgtype.UUID{Bytes: seed, Valid: true}, key).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if uuid.UUID(got.Bytes) != id {
				t.Fatalf("SQL binds seed %s to key %d as %s, Go as %s", seed, key, uuid.UUID(got.Bytes), id)
			}
		}
	}
	for _, id := range []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.New(), uuid.Nil} {
		if _, _, ok := pg.LeaseTarget(id); ok {
			t.Fatalf("%s (version %d) is a lease target", id, id.Version())
		}
	}
}

// TestCursorIndexesLetUpdatesBeHOT: no index of queen.consumer_cursors
// covers a column a pop or an ack writes, and such an update is HOT.
func TestCursorIndexesLetUpdatesBeHOT(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	rows, err := st.Pool().Query(ctx, `SELECT i.indexrelid::regclass::text, a.attname
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = 'queen.consumer_cursors'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var idx, col string
		if err := rows.Scan(&idx, &col); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains([]string{"partition_id", "consumer_group", "lease_key"}, col) {
			t.Errorf("index %s covers %s, which cursor updates change (no update can be HOT)", idx, col)
		}
	}
	rows.Close()
	var exprs int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_index WHERE indrelid = 'queen.consumer_cursors'::regclass
		AND (indexprs IS NOT NULL OR indpred IS NOT NULL)`).Scan(&exprs); err != nil || exprs != 0 {
		t.Fatalf("%d expression or partial indexes on consumer_cursors (%v)", exprs, err)
	}
	store(t, ctx, st, "q", "p", 3)
	if _, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: "g", Batch: 1}); err != nil {
		t.Fatal(err)
	}
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// The backend's counts not yet flushed include earlier transactions
	// on the connection: the update's own is the difference.
	var before, hot int64
	if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_hot_updated('queen.consumer_cursors'::regclass)`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `WITH u AS (UPDATE queen.consumer_cursors SET lease_id = gen_random_uuid(),
		lease_expires_at = now(), cursor_offset = cursor_offset + 1, acked = '{1}' WHERE consumer_group = 'g' RETURNING 1)
		SELECT count(*) FROM u`).Scan(&hot); err != nil || hot != 1 {
		t.Fatalf("update: %d rows, %v", hot, err)
	}
	if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_hot_updated('queen.consumer_cursors'::regclass)`).Scan(&hot); err != nil {
		t.Fatal(err)
	}
	if hot-before != 1 {
		t.Fatalf("a cursor update was not HOT (%d HOT updates)", hot-before)
	}
}

// TestLeaseFoundByKey: leases are found by the key their id carries, with
// the lease rules unchanged. A pop of one partition is leased under an id
// naming its cursor's lease_key; another pop of the group takes another
// partition under another id, and an ack of it under the first id is
// refused; extend and release reach exactly the lease's row, and a
// released lease is delivered again from the cursor, in order, with no
// retry counted. A pop of several partitions has one id for all of them,
// and extend and release still reach every partition it holds after the
// partition its id names was acked. A lease id of the old shape (no key)
// is still found.
func TestLeaseFoundByKey(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, p := range []string{"a", "b", "c"} {
		store(t, ctx, st, "q", p, 4)
	}
	type row struct {
		part     string
		key      int64
		lease    uuid.UUID
		secsLeft float64
		offset   int64
		retries  int
	}
	rowsOf := func(group string) map[string]row {
		t.Helper()
		rs, err := st.Pool().Query(ctx, `SELECT p.name, c.lease_key, c.lease_id, coalesce(extract(epoch FROM c.lease_expires_at - now()), -1),
			c.cursor_offset, c.retry_count
			FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id WHERE c.consumer_group = $1`, group)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		out := map[string]row{}
		for rs.Next() {
			var r row
			var lease pgtype.UUID
			if err := rs.Scan(&r.part, &r.key, &lease, &r.secsLeft, &r.offset, &r.retries); err != nil {
				t.Fatal(err)
			}
			if lease.Valid {
				r.lease = lease.Bytes
			}
			out[r.part] = r
		}
		return out
	}
	pop := func(req pg.PopRequest) *pg.PopResult {
		t.Helper()
		res, err := st.Pop(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) == 0 {
			t.Fatalf("pop %+v delivered nothing", req)
		}
		for i, m := range res.Messages {
			if m.LeaseID != res.LeaseID {
				t.Fatalf("message %d under lease %s, the pop's is %s", i, m.LeaseID, res.LeaseID)
			}
		}
		return res
	}
	// The group's first pop creates its cursors (general path), the
	// second is the claim statement's one round trip.
	first := pop(pg.PopRequest{Queue: "q", Group: "g", Batch: 4})
	second := pop(pg.PopRequest{Queue: "q", Group: "g", Batch: 4})
	rs := rowsOf("g")
	for _, res := range []*pg.PopResult{first, second} {
		part := res.Messages[0].Partition
		key, multi, ok := pg.LeaseTarget(res.LeaseID)
		if !ok || multi || key != rs[part].key || rs[part].lease != res.LeaseID {
			t.Fatalf("lease %s of partition %s: target %d %v %v; row key %d lease %s", res.LeaseID, part, key, multi, ok,
				rs[part].key, rs[part].lease)
		}
	}
	if first.Messages[0].Partition == second.Messages[0].Partition {
		t.Fatalf("two live leases on partition %s", first.Messages[0].Partition)
	}
	// An ack of the second pop's message under the first pop's lease.
	m := second.Messages[0]
	out, err := st.Ack(ctx, []pg.AckRequest{{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: &first.LeaseID,
		Group: "g"}})
	if err != nil || out[0].Success || out[0].Error != pg.ErrTextInvalidLease {
		t.Fatalf("ack under a foreign lease: %+v, %v", out, err)
	}
	// Extend reaches the first lease's row only.
	if _, msg, err := st.ExtendLease(ctx, first.LeaseID, 1000); err != nil || msg != "" {
		t.Fatalf("extend: %q, %v", msg, err)
	}
	after := rowsOf("g")
	for part, r := range after {
		if extended := r.secsLeft > 500; extended != (part == first.Messages[0].Partition) {
			t.Fatalf("partition %s: %.0f s left after extending the lease of %s", part, r.secsLeft, first.Messages[0].Partition)
		}
	}
	// Release frees it; the next pop of that partition redelivers from
	// the cursor, in order, with no retry counted.
	if n, err := st.ReleaseLease(ctx, first.LeaseID); err != nil || n != 1 {
		t.Fatalf("release: %d rows, %v", n, err)
	}
	if n, err := st.ReleaseLease(ctx, first.LeaseID); err != nil || n != 0 {
		t.Fatalf("release again: %d rows, %v", n, err)
	}
	again := pop(pg.PopRequest{Queue: "q", Group: "g", Partition: first.Messages[0].Partition, Batch: 4})
	if len(again.Messages) != len(first.Messages) || again.LeaseID == first.LeaseID {
		t.Fatalf("redelivered %d messages under %s; first %d under %s", len(again.Messages), again.LeaseID, len(first.Messages), first.LeaseID)
	}
	for i := range again.Messages {
		if again.Messages[i].Offset != first.Messages[i].Offset || again.Messages[i].TransactionID != first.Messages[i].TransactionID {
			t.Fatalf("redelivery %d: offset %d, first delivery offset %d", i, again.Messages[i].Offset, first.Messages[i].Offset)
		}
	}
	if r := rowsOf("g")[first.Messages[0].Partition]; r.retries != 0 {
		t.Fatalf("a released lease counted %d retries", r.retries)
	}
	if _, msg, _ := st.ExtendLease(ctx, first.LeaseID, 10); msg != "Lease not found" {
		t.Fatalf("extend of a released lease: %q", msg)
	}

	// Several partitions under one lease.
	multi := pop(pg.PopRequest{Queue: "q", Group: "h", Batch: 12, Partitions: 3})
	if len(multi.Claimed) != 3 {
		t.Fatalf("multi-partition pop claimed %d partitions", len(multi.Claimed))
	}
	key, isMulti, ok := pg.LeaseTarget(multi.LeaseID)
	hs := rowsOf("h")
	var keyPart string
	for part, r := range hs {
		if r.lease != multi.LeaseID {
			t.Fatalf("partition %s under %s, the pop's lease is %s", part, r.lease, multi.LeaseID)
		}
		if r.key == key {
			keyPart = part
		}
	}
	if !ok || !isMulti || keyPart == "" {
		t.Fatalf("multi lease %s: key %d (partition %q) multi %v ok %v", multi.LeaseID, key, keyPart, isMulti, ok)
	}
	// The whole lease extends through its key row; an id forged with the
	// same key and multi bit but another random half is not found.
	if _, msg, err := st.ExtendLease(ctx, multi.LeaseID, 900); err != nil || msg != "" {
		t.Fatalf("extend of a multi-partition lease: %q, %v", msg, err)
	}
	forged := multi.LeaseID
	forged[0] ^= 0xff
	if _, msg, err := st.ExtendLease(ctx, forged, 900); err != nil || msg != "Lease not found" {
		t.Fatalf("extend of a forged multi-partition id: %q, %v", msg, err)
	}
	// Ack every message of the partition the id names: its lease ends.
	var acks []pg.AckRequest
	for _, m := range multi.Messages {
		if m.Partition == keyPart {
			acks = append(acks, pg.AckRequest{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: &multi.LeaseID, Group: "h"})
		}
	}
	out, err = st.Ack(ctx, acks)
	if err != nil || !out[len(out)-1].Success || !out[len(out)-1].LeaseReleased {
		t.Fatalf("ack of partition %s: %+v, %v", keyPart, out, err)
	}
	if _, msg, err := st.ExtendLease(ctx, multi.LeaseID, 1000); err != nil || msg != "" {
		t.Fatalf("extend of the rest of a multi-partition lease: %q, %v", msg, err)
	}
	for part, r := range rowsOf("h") {
		if part != keyPart && r.secsLeft < 500 {
			t.Fatalf("partition %s not extended (%.0f s left)", part, r.secsLeft)
		}
	}
	if n, err := st.ReleaseLease(ctx, multi.LeaseID); err != nil || n != 2 {
		t.Fatalf("release of the rest of a multi-partition lease: %d rows, %v", n, err)
	}

	// A lease id of the old shape, written before lease keys.
	old := uuid.Must(uuid.NewV7())
	if _, err := st.Pool().Exec(ctx, `UPDATE queen.consumer_cursors c SET lease_id = $1,
		lease_expires_at = now() + interval '1 minute', lease_end = c.cursor_offset
		FROM queen.partitions p WHERE p.id = c.partition_id AND p.name = 'a' AND c.consumer_group = 'h'`, old); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := st.ExtendLease(ctx, old, 1000); err != nil || msg != "" {
		t.Fatalf("extend of an old-shape lease: %q, %v", msg, err)
	}
	if n, err := st.ReleaseLease(ctx, old); err != nil || n != 1 {
		t.Fatalf("release of an old-shape lease: %d rows, %v", n, err)
	}
}

// TestReleaseSeedFreesWhatTheSeedLeased: a pop that does not know which
// cursor its seed was bound to (a combined transaction whose outcome is
// unknown) gives back exactly that lease: other leases of the group, and
// the same seed's lease of another group, stay.
func TestReleaseSeedFreesWhatTheSeedLeased(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, p := range []string{"a", "b"} {
		store(t, ctx, st, "q", p, 2)
		for _, g := range []string{"g", "h"} {
			if _, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: g, Partition: p, Batch: 1, AutoAck: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	seed, err := pg.NewLeaseSeed(false)
	if err != nil {
		t.Fatal(err)
	}
	// The seed bound to partition a's cursor in g and in h (as two
	// groups' claims could), another lease on b in g.
	if _, err := st.Pool().Exec(ctx, `UPDATE queen.consumer_cursors c SET lease_id = CASE WHEN p.name = 'a'
			THEN `+pg.LeaseIDSQL("$1::uuid", "c.lease_key")+` ELSE gen_random_uuid() END,
		lease_expires_at = now() + interval '1 minute', lease_end = c.cursor_offset
		FROM queen.partitions p WHERE p.id = c.partition_id`, seed); err != nil {
		t.Fatal(err)
	}
	if n, err := pg.ReleaseSeed(ctx, st, "q", "g", seed); err != nil || n != 1 {
		t.Fatalf("releaseSeed: %d rows, %v", n, err)
	}
	var left []string
	rows, err := st.Pool().Query(ctx, `SELECT p.name || '/' || c.consumer_group FROM queen.consumer_cursors c
		JOIN queen.partitions p ON p.id = c.partition_id WHERE c.lease_id IS NOT NULL ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		left = append(left, s)
	}
	rows.Close()
	if fmt.Sprint(left) != "[a/h b/g b/h]" {
		t.Fatalf("leases left: %v", left)
	}
}

// TestExtendForeignLeaseIDRunsNoScan: an id that no broker minted as a
// lease (a random v4, a v8 seed, not bound to a key) is "Lease not found"
// without a query, so that a flood of them cannot hold the pool with
// scans of the whole cursor table: even on a cancelled context it
// answers. A UUIDv7 (the shape minted before lease keys) is still looked
// for (TestLeaseKeys, the upgrade test), and waits for its turn within
// the context.
func TestExtendForeignLeaseIDRunsNoScan(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	seed := uuid.New()
	seed[6] = seed[6]&0x0f | 0x80
	clear(seed[8:]) // a seed: no key bound
	for _, id := range []uuid.UUID{uuid.New(), seed, {}} {
		if _, msg, err := st.ExtendLease(done, id, 60); err != nil || msg != "Lease not found" {
			t.Fatalf("extend of %s: %q, %v; want Lease not found without a query", id, msg, err)
		}
	}
	if _, msg, err := st.ExtendLease(ctx, uuid.Must(uuid.NewV7()), 60); err != nil || msg != "Lease not found" {
		t.Fatalf("extend of an unknown UUIDv7: %q, %v", msg, err)
	}
	if _, _, err := st.ExtendLease(done, uuid.Must(uuid.NewV7()), 60); err == nil {
		t.Fatal("an unknown UUIDv7 on a cancelled context was answered without its scan")
	}
}
