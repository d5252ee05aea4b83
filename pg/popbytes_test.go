package pg_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

// storeEach writes n messages of payload to queue/partition, one
// transaction (so one segment) each.
func storeEach(t *testing.T, ctx context.Context, st *pg.Store, queue, partition string, n int, payload []byte) {
	t.Helper()
	for i := 0; i < n; i++ {
		now := time.Now().UnixMicro()
		it := pg.ProjectItem{Queue: queue, Partition: partition, AcceptedAtMicros: now,
			Message: pg.Message{ID: uuid.Must(uuid.NewV7()), TransactionID: uuid.NewString(),
				CreatedAtMicros: now, Payload: payload}}
		if _, err := st.Transaction(ctx, []pg.ProjectItem{it}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// warm stores one message in queue/partition and pops and acks it as
// each of groups (named partition), so that their cursors exist and the
// pops that follow take the claim statements' paths (a partition without
// a cursor for the group goes the general way).
func warm(t *testing.T, ctx context.Context, st *pg.Store, queue, partition string, groups ...string) {
	t.Helper()
	storeEach(t, ctx, st, queue, partition, 1, []byte(`0`))
	for _, g := range groups {
		res, err := st.Pop(ctx, pg.PopRequest{Queue: queue, Partition: partition, Group: g, Batch: 1})
		if err != nil || len(res.Messages) != 1 {
			t.Fatalf("warm-up pop of %s/%s: %v, %v", queue, partition, res, err)
		}
		ackAll(t, ctx, st, res, g)
	}
}

// offsets is the partitions and offsets res delivered, as "p:o".
func offsets(res *pg.PopResult) []string {
	var out []string
	for _, m := range res.Messages {
		out = append(out, fmt.Sprintf("%s:%d", m.Partition, m.Offset))
	}
	return out
}

func wantOffsets(t *testing.T, what string, res *pg.PopResult, want ...string) {
	t.Helper()
	got := offsets(res)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: delivered %v, want %v", what, got, want)
	}
}

// ackAll acks every message res delivered.
func ackAll(t *testing.T, ctx context.Context, st *pg.Store, res *pg.PopResult, group string) {
	t.Helper()
	var reqs []pg.AckRequest
	for _, m := range res.Messages {
		lease := m.LeaseID
		reqs = append(reqs, pg.AckRequest{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: &lease,
			Status: "completed", Group: group})
	}
	out, err := st.Ack(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out {
		if r.Error != "" {
			t.Fatalf("ack: %s", r.Error)
		}
	}
}

// TestPopByteBound: a pop's messages stop at its byte bound
// (PopRequest.MaxBytes, QUEEN_MAX_POP_BYTES), counted in the stored
// (plain) bytes of the segments read, ending with the segment (claim) or
// message (named partition) that reaches it; the first is delivered
// however large; what is left is delivered by the next pops, in order.
// Each pop path is covered: a leased pop of one partition (one round
// trip), autoAck, a named partition (the general path), several
// partitions (claimSQL) and segments written without plain_bytes.
func TestPopByteBound(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	payload := []byte(`"` + string(bytes.Repeat([]byte{'y'}, 998)) + `"`) // about 1,030 bytes stored
	warm(t, ctx, st, "q", "a", pg.QueueModeGroup, "g")
	storeEach(t, ctx, st, "q", "a", 10, payload) // offsets 1..10
	pop := func(req pg.PopRequest) *pg.PopResult {
		t.Helper()
		req.Queue = "q"
		if req.Group == "" {
			req.Group = pg.QueueModeGroup
		}
		res, err := st.Pop(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Leased, one partition: 1,030 + 1,030 + 1,030 reaches 2,500 at the
	// third segment.
	res := pop(pg.PopRequest{Batch: 10, MaxBytes: 2500})
	wantOffsets(t, "leased pop", res, "a:1", "a:2", "a:3")
	// The lease covers what was delivered only: acking it frees the
	// partition for the next three.
	ackAll(t, ctx, st, res, pg.QueueModeGroup)
	res = pop(pg.PopRequest{Batch: 10, MaxBytes: 2500})
	wantOffsets(t, "leased pop after the ack", res, "a:4", "a:5", "a:6")
	ackAll(t, ctx, st, res, pg.QueueModeGroup)
	// A bound below one message still delivers one.
	res = pop(pg.PopRequest{Batch: 10, MaxBytes: 10, AutoAck: true})
	wantOffsets(t, "autoAck pop under a tiny bound", res, "a:7")
	res = pop(pg.PopRequest{Batch: 10, MaxBytes: 2000, AutoAck: true})
	wantOffsets(t, "autoAck pop", res, "a:8", "a:9")
	// A named partition (the general path) counts messages the same way.
	res = pop(pg.PopRequest{Batch: 10, MaxBytes: 10, Partition: "a", Group: "g"})
	wantOffsets(t, "named partition, tiny bound", res, "a:1")
	ackAll(t, ctx, st, res, "g")
	res = pop(pg.PopRequest{Batch: 10, MaxBytes: 2500, Partition: "a", Group: "g"})
	wantOffsets(t, "named partition", res, "a:2", "a:3", "a:4")
	ackAll(t, ctx, st, res, "g")
	// Without a bound of its own a pop takes the Store's (16 MiB): all.
	res = pop(pg.PopRequest{Batch: 10, Group: "g"})
	wantOffsets(t, "default bound", res, "a:5", "a:6", "a:7", "a:8", "a:9", "a:10")

	// Several partitions: the bound is the pop's, summed in claim order;
	// a partition claimed after it is reached delivers nothing and is
	// not leased (the next pop takes it).
	for _, p := range []string{"b", "c"} {
		warm(t, ctx, st, "m", p, pg.QueueModeGroup)
		storeEach(t, ctx, st, "m", p, 3, payload) // offsets 1..3
	}
	popM := func(maxBytes int64) *pg.PopResult {
		t.Helper()
		res, err := st.Pop(ctx, pg.PopRequest{Queue: "m", Group: pg.QueueModeGroup, Batch: 10, Partitions: 2, MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := popM(1500)
	if got := offsets(first); len(got) != 2 || got[0][2:] != "1" || got[1][2:] != "2" || got[0][:1] != got[1][:1] {
		t.Fatalf("pop of two partitions under 1,500 bytes: %v, want offsets 1 and 2 of one partition", got)
	}
	second := popM(1 << 20)
	other := map[string]string{"b": "c", "c": "b"}[first.Messages[0].Partition]
	wantOffsets(t, "pop of the other partition", second, other+":1", other+":2", other+":3")

	// Compressed segments count at their plain size: ten 4,000-byte
	// payloads that compress to a few hundred bytes each.
	big := []byte(`"` + string(bytes.Repeat([]byte{'x'}, 3998)) + `"`)
	warm(t, ctx, st, "z", "p", pg.QueueModeGroup)
	storeEach(t, ctx, st, "z", "p", 10, big) // offsets 1..10
	var stored, plain int64
	if err := st.Pool().QueryRow(ctx, `SELECT sum(octet_length(s.body)), sum(s.plain_bytes) FROM queen.segments s
		JOIN queen.partitions p ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'z'`).Scan(&stored, &plain); err != nil {
		t.Fatal(err)
	}
	if stored*4 > plain {
		t.Fatalf("segments of queue z: %d bytes stored, %d plain; want them compressed", stored, plain)
	}
	res, err := st.Pop(ctx, pg.PopRequest{Queue: "z", Group: pg.QueueModeGroup, Batch: 10, MaxBytes: 10000, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	wantOffsets(t, "compressed segments", res, "p:1", "p:2", "p:3")
	// Segments written without plain_bytes (by a broker before it) count
	// at their stored size.
	if _, err := st.Pool().Exec(ctx, `UPDATE queen.segments SET plain_bytes = NULL`); err != nil {
		t.Fatal(err)
	}
	res, err = st.Pop(ctx, pg.PopRequest{Queue: "z", Group: pg.QueueModeGroup, Batch: 10, MaxBytes: 10000, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	wantOffsets(t, "segments without plain_bytes", res, "p:4", "p:5", "p:6", "p:7", "p:8", "p:9", "p:10")
}

// TestPopByteBoundDeletedRun: deleted messages (tombstones) at a group's
// cursor whose segments reach the byte bound do not make a pop answer
// empty while live messages follow them: the pop passes over them and
// delivers what follows, on every path. (It answered nothing and moved
// the cursor: a long-poll then waited for the next wake-up, up to its
// timeout, with the messages there.)
func TestPopByteBoundDeletedRun(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	groups := []string{pg.QueueModeGroup, "auto", "parts", "named"}
	warm(t, ctx, st, "q", "a", groups...)
	big := []byte(`"` + string(bytes.Repeat([]byte{'b'}, 2000)) + `"`)
	storeEach(t, ctx, st, "q", "a", 3, big)           // offsets 1..3, deleted below
	storeEach(t, ctx, st, "q", "a", 3, []byte(`"s"`)) // offsets 4..6
	res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Partition: "a", Group: "peek", Batch: 10, AutoAck: true, MaxBytes: 1 << 20})
	if err != nil || len(res.Messages) != 7 {
		t.Fatalf("peek: %v %v", res, err)
	}
	for _, m := range res.Messages[1:4] {
		if ok, err := pg.NewTombstones(st).DeleteMessage(ctx, m.PartitionID, m.TransactionID); err != nil || !ok {
			t.Fatalf("delete: %v %v", ok, err)
		}
	}
	for _, req := range []pg.PopRequest{
		{Group: pg.QueueModeGroup},
		{Group: "auto", AutoAck: true},
		{Group: "parts", Partitions: 3},
		{Group: "named", Partition: "a"},
	} {
		req.Queue, req.Batch, req.MaxBytes = "q", 10, 1500
		var got []string
		for i := 0; i < 4 && len(got) < 3; i++ {
			res, err := st.Pop(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Messages) == 0 {
				t.Fatalf("pop %d of group %s: nothing, with %v of a:4..a:6 delivered", i+1, req.Group, got)
			}
			got = append(got, offsets(res)...)
			if !req.AutoAck {
				ackAll(t, ctx, st, res, req.Group)
			}
		}
		if fmt.Sprint(got) != "[a:4 a:5 a:6]" {
			t.Fatalf("group %s: delivered %v, want [a:4 a:5 a:6]", req.Group, got)
		}
	}
}
