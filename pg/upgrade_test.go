package pg_test

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// oldSchema is pg/schema.sql as of commit 89aae94 (git show
// 89aae94:pg/schema.sql): before store_segments, before lease keys (no
// consumer_cursors.lease_key, an index on lease_id), before the chunked
// dedup probe.
//
//go:embed testdata/schema-89aae94.sql
var oldSchema string

// oldMessages are n messages of partition tag, as an old broker's
// projector stored them.
func oldMessages(tag string, n int) []pg.Message {
	now := time.Now().UnixMicro()
	out := make([]pg.Message, n)
	for i := range out {
		out[i] = pg.Message{ID: uuid.Must(uuid.NewV7()), TransactionID: fmt.Sprintf("old-%s-%d", tag, i),
			CreatedAtMicros: now, Payload: fmt.Appendf(nil, `{"old":"%s","i":%d}`, tag, i)}
	}
	return out
}

// writeOld stores msgs at partition pid's next offset base the way a
// broker of 89aae94 does: queen.write_segments (which locks the partition,
// checks the offset and the queue's encryption, moves next_offset and
// inserts the segment) and the batch's row of queen.dedup_batches, in one
// transaction.
func writeOld(t *testing.T, ctx context.Context, conn *pgx.Conn, pid uuid.UUID, base int64, msgs []pg.Message) {
	t.Helper()
	pids, bases, hashes, _ := pg.BatchRowOf(pg.BatchPart{PID: pid, Base: base, Msgs: msgs})
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT queen.write_segments($1, $2, $3, $4, $5)`,
		[]uuid.UUID{pid}, []int64{base}, []int32{int32(len(msgs))}, []bool{false}, [][]byte{pg.EncodeSegment(nil, msgs)}); err != nil {
		t.Fatalf("old write_segments: %v", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO queen.dedup_batches (expires_at, partition_ids, base_offsets, key_hashes)
		VALUES (now() + interval '1 hour', $1, $2, $3)`, pids, bases, hashes); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeFrom89aae94: a database made by the schema of 89aae94 and
// written the way its brokers write (segments through write_segments,
// dedup rows, a cursor holding a lease of the old shape, a UUIDv4 with no
// lease key) upgrades in place when the current broker applies its schema
// (EnsureSchema), and then: the cursors have lease keys, the lease_id
// index is gone and fillfactor is 50; the old lease is still found (the
// scan fallback) and its ack moves the cursor; the old segments decode and
// are delivered with their payloads; an old client transactionId is still
// a duplicate; new pushes and pops work; and an old broker still sharing
// the database (write_segments, kept) writes segments the new broker
// delivers. Applying the schema a second time changes nothing.
func TestUpgradeFrom89aae94(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, oldSchema); err != nil {
		t.Fatalf("apply the schema of 89aae94: %v", err)
	}
	var hasKey, hasStore bool
	if err := conn.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'queen.consumer_cursors'::regclass AND attname = 'lease_key'),
		to_regprocedure('queen.store_segments(uuid[],bigint[],integer[],text[],boolean[],bytea[])') IS NOT NULL`).
		Scan(&hasKey, &hasStore); err != nil {
		t.Fatal(err)
	}
	if hasKey || hasStore {
		t.Fatalf("testdata schema is not the old one: lease_key %v, store_segments %v", hasKey, hasStore)
	}

	// The old broker's data: queue up, partition p (4 messages; offset 0
	// consumed, 1..2 under a live lease of the old shape) and partition q
	// (3 messages, never popped).
	var qid, pidP, pidQ uuid.UUID
	if err := conn.QueryRow(ctx, `INSERT INTO queen.queues (name) VALUES ('up') RETURNING id`).Scan(&qid); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name string
		id   *uuid.UUID
	}{{"p", &pidP}, {"q", &pidQ}} {
		if err := conn.QueryRow(ctx, `INSERT INTO queen.partitions (queue_id, name) VALUES ($1, $2) RETURNING id`,
			qid, p.name).Scan(p.id); err != nil {
			t.Fatal(err)
		}
	}
	msgsP, msgsQ := oldMessages("p", 4), oldMessages("q", 3)
	writeOld(t, ctx, conn, pidP, 0, msgsP)
	writeOld(t, ctx, conn, pidQ, 0, msgsQ)
	oldLease := uuid.Must(uuid.NewV7()) // as 89aae94 minted them: no lease key inside
	if _, err := conn.Exec(ctx, `INSERT INTO queen.consumer_cursors
		(partition_id, consumer_group, cursor_offset, lease_id, lease_expires_at, lease_end, total_consumed)
		VALUES ($1, $2, 1, $3, now() + interval '5 minutes', 2, 1)`,
		pidP, pg.QueueModeGroup, pgtype.UUID{Bytes: oldLease, Valid: true}); err != nil {
		t.Fatal(err)
	}

	// The current broker upgrades the schema.
	st := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
	if err := st.EnsureSchema(ctx); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	var keys, distinct int
	var oldIndex, fill50, keepsWrite bool
	if err := conn.QueryRow(ctx, `SELECT count(lease_key), count(DISTINCT lease_key),
		to_regclass('queen.consumer_cursors_lease') IS NOT NULL,
		(SELECT 'fillfactor=50' = ANY(coalesce(reloptions, '{}')) FROM pg_class WHERE oid = 'queen.consumer_cursors'::regclass),
		to_regprocedure('queen.write_segments(uuid[],bigint[],integer[],boolean[],bytea[])') IS NOT NULL
		FROM queen.consumer_cursors`).Scan(&keys, &distinct, &oldIndex, &fill50, &keepsWrite); err != nil {
		t.Fatal(err)
	}
	if keys != 1 || distinct != 1 || oldIndex || !fill50 || !keepsWrite {
		t.Fatalf("after the upgrade: %d lease keys (%d distinct), old lease_id index %v, fillfactor 50 %v, write_segments kept %v",
			keys, distinct, oldIndex, fill50, keepsWrite)
	}
	// The old rows have no layout: UUIDv7 keys are still probed by their
	// own hash, and one the old broker kept so is a duplicate on the
	// projector's way.
	if !pg.UnmarkedRows(st) {
		t.Fatal("after the upgrade the Store does not see the old sidecar rows (no layout)")
	}
	{
		var pidR uuid.UUID
		if err := conn.QueryRow(ctx, `INSERT INTO queen.partitions (queue_id, name) VALUES ($1, 'r') RETURNING id`, qid).Scan(&pidR); err != nil {
			t.Fatal(err)
		}
		old := oldMessages("r", 1)
		old[0].TransactionID = uuid.Must(uuid.NewV7()).String()
		writeOld(t, ctx, conn, pidR, 0, old)
		again := old[0]
		again.ID = uuid.Must(uuid.NewV7())
		again.CreatedAtMicros = time.Now().UnixMicro()
		out, err := st.Project(ctx, uuid.New(), pg.Checkpoint{Index: 1}, []pg.ProjectItem{
			{Queue: "up", Partition: "r", AcceptedAtMicros: again.CreatedAtMicros, Message: again}})
		if err != nil {
			t.Fatal(err)
		}
		if !out[0].Duplicate || out[0].MessageID != old[0].ID {
			t.Fatalf("an old UUIDv7 transactionId again: %+v, want a duplicate of %s", out[0], old[0].ID)
		}
	}

	// The old lease: extended, then acked (offsets 1 and 2), through the
	// fallback for ids without a lease key.
	if _, msg, err := st.ExtendLease(ctx, oldLease, 120); err != nil || msg != "" {
		t.Fatalf("extend the old lease: %v %q", err, msg)
	}
	acks := []pg.AckRequest{
		{TransactionID: msgsP[1].TransactionID, PartitionID: pidP, LeaseID: &oldLease, Status: pg.AckCompleted, Group: pg.QueueModeGroup},
		{TransactionID: msgsP[2].TransactionID, PartitionID: pidP, LeaseID: &oldLease, Status: pg.AckCompleted, Group: pg.QueueModeGroup},
	}
	res, err := st.Ack(ctx, acks)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.Success || !r.LeaseReleased && i == 1 {
			t.Fatalf("ack %d under the old lease: %+v", i, r)
		}
	}

	// The old segments are delivered, payloads intact: q's three (a
	// fresh cursor), then p's last one.
	popAll := func(partition string, want []pg.Message, from int64) uuid.UUID {
		t.Helper()
		r, err := st.Pop(ctx, pg.PopRequest{Queue: "up", Partition: partition, Group: pg.QueueModeGroup, Batch: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Messages) != len(want) {
			t.Fatalf("pop of %s: %d messages, want %d", partition, len(r.Messages), len(want))
		}
		for i, m := range r.Messages {
			w := want[i]
			if m.Offset != from+int64(i) || m.ID != w.ID || m.TransactionID != w.TransactionID || string(m.Payload) != string(w.Payload) {
				t.Fatalf("pop of %s, message %d: offset %d id %s txid %q payload %s; want offset %d %s %q %s",
					partition, i, m.Offset, m.ID, m.TransactionID, m.Payload, from+int64(i), w.ID, w.TransactionID, w.Payload)
			}
		}
		ack := make([]pg.AckRequest, len(r.Messages))
		for i, m := range r.Messages {
			ack[i] = pg.AckRequest{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: &r.LeaseID,
				Status: pg.AckCompleted, Group: pg.QueueModeGroup}
		}
		out, err := st.Ack(ctx, ack)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range out {
			if !a.Success {
				t.Fatalf("ack %d of the pop of %s: %+v", i, partition, a)
			}
		}
		return r.LeaseID
	}
	if l := popAll("q", msgsQ, 0); l.Version() != 8 {
		t.Fatalf("a new lease id is of version %d, want 8 (a lease key inside)", l.Version())
	}
	popAll("p", msgsP[3:], 3)

	// An old client transactionId is a duplicate still; a new one is
	// stored after the old segments.
	now := time.Now().UnixMicro()
	fresh := pg.Message{ID: uuid.Must(uuid.NewV7()), TransactionID: "new-p-0", CreatedAtMicros: now, Payload: []byte(`"new"`)}
	again := msgsP[0]
	again.ID = uuid.Must(uuid.NewV7())
	_, err = st.Transaction(ctx, []pg.ProjectItem{
		{Queue: "up", Partition: "p", AcceptedAtMicros: now, Message: fresh},
		{Queue: "up", Partition: "p", AcceptedAtMicros: now, Message: again},
	}, nil)
	var abort *pg.TxAbort
	if !errors.As(err, &abort) || !abort.Push || abort.Index != 1 {
		t.Fatalf("a transaction pushing an old transactionId again: %v; want it refused as a duplicate (item 1)", err)
	}
	tr, err := st.Transaction(ctx, []pg.ProjectItem{{Queue: "up", Partition: "p", AcceptedAtMicros: now, Message: fresh}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := tr.Pushes[0]; o.Duplicate || o.Offset != 4 {
		t.Fatalf("a new message: %+v; want stored at offset 4", o)
	}
	popAll("p", []pg.Message{fresh}, 4)

	// An old broker sharing the database writes through write_segments;
	// the new one delivers what it wrote.
	later := oldMessages("p-later", 2)
	writeOld(t, ctx, conn, pidP, 5, later)
	popAll("p", later, 5)

	// Applying the schema again (a second broker starting) changes nothing.
	st2 := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
	if err := st2.EnsureSchema(ctx); err != nil {
		t.Fatalf("schema applied a second time: %v", err)
	}
	var cursors string
	if err := conn.QueryRow(ctx, `SELECT string_agg(p.name || '@' || c.cursor_offset || '/' || c.total_consumed, ',' ORDER BY p.name)
		FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id`).Scan(&cursors); err != nil {
		t.Fatal(err)
	}
	if cursors != "p@7/7,q@3/3" {
		t.Fatalf("cursors %s, want p@7/7,q@3/3", cursors)
	}
}

// TestUpgradeLayoutWaitsForOldBatches: the first start against a sidecar
// of the version before (no layout column) takes the sidecar's lock before
// any other table's, so a batch of an old broker that has read the sidecar
// and then writes segments finishes first instead of deadlocking with the
// schema's lock on queen.segments (found in review).
func TestUpgradeLayoutWaitsForOldBatches(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := testenv.NewDatabase(t)
	st := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
	if err := st.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `ALTER TABLE queen.dedup_batches DROP COLUMN layout`); err != nil { // its index goes with it
		t.Fatal(err)
	}
	// An old broker's long way: the sidecar read in its first round trip.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM queen.dedup_batches`); err != nil {
		t.Fatal(err)
	}
	// A new broker starts meanwhile.
	st2 := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
	done := make(chan error, 1)
	go func() { done <- st2.EnsureSchema(ctx) }()
	time.Sleep(500 * time.Millisecond) // the schema transaction waits for the sidecar's lock
	select {
	case err := <-done:
		t.Fatalf("the schema was applied while an old batch held the sidecar: %v", err)
	default:
	}
	// The old batch's second round trip writes segments, then commits.
	if _, err := tx.Exec(ctx, `LOCK TABLE queen.segments IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatalf("the old batch's segment write: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("schema after the old batch: %v", err)
	}
	var layout, index bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'queen.dedup_batches'::regclass
		AND attname = 'layout' AND NOT attisdropped), to_regclass('queen.dedup_batches_unmarked') IS NOT NULL`).Scan(&layout, &index); err != nil {
		t.Fatal(err)
	}
	if !layout || !index {
		t.Fatalf("after the upgrade: layout column %v, its index %v", layout, index)
	}
}
