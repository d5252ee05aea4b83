package pg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

// storeTagged writes n messages to queue/partition whose payloads name
// them: {"p":"<partition>","i":<i>}, i from 0.
func storeTagged(t *testing.T, st *pg.Store, queue, partition string, n int) {
	t.Helper()
	var items []pg.ProjectItem
	now := time.Now().UnixMicro()
	for i := range n {
		items = append(items, pg.ProjectItem{Queue: queue, Partition: partition, AcceptedAtMicros: now,
			Message: pg.Message{ID: uuid.Must(uuid.NewV7()), TransactionID: fmt.Sprintf("%s-%d", partition, i),
				CreatedAtMicros: now + int64(i), Payload: fmt.Appendf(nil, `{"p":%q,"i":%d}`, partition, i)}})
	}
	if _, err := st.Transaction(t.Context(), items, nil); err != nil {
		t.Fatal(err)
	}
}

// TestAutoAckPopOfDamagedSegmentAdvancesNothing: an autoAck wildcard pop
// of a clean cursor (the claim statement writes it, and its offsets are
// decoded straight into the answer) that reaches a damaged segment body
// (cut short with its count intact, as a truncated bytea would be; or of
// another version) fails with ErrBadSegment and commits nothing: the
// cursor stays where it was, so no message is skipped unseen. A pop that
// ends before the damage is answered as before.
func TestAutoAckPopOfDamagedSegmentAdvancesNothing(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	storeTagged(t, st, "bad", "p", 10)
	cursor := func() int64 {
		t.Helper()
		var off int64
		if err := st.Pool().QueryRow(ctx, `SELECT cursor_offset FROM queen.consumer_cursors WHERE consumer_group = 'g'`).Scan(&off); err != nil {
			t.Fatal(err)
		}
		return off
	}
	req := pg.PopRequest{Queue: "bad", Group: "g", Batch: 2, AutoAck: true}
	if res, err := st.Pop(ctx, req); err != nil || len(res.Messages) != 2 { // creates the cursor
		t.Fatalf("first pop: %v", err)
	}
	// The last message's payload loses its last 3 bytes.
	if _, err := st.Pool().Exec(ctx, `UPDATE queen.segments SET body = substring(body from 1 for length(body) - 3)`); err != nil {
		t.Fatal(err)
	}
	res, err := st.Pop(ctx, req) // offsets 2..3: before the damage
	if err != nil || len(res.Messages) != 2 || string(res.Messages[1].Payload) != `{"p":"p","i":3}` {
		t.Fatalf("a pop before the damaged tail: %v %+v", err, res)
	}
	req.Batch = 100
	if _, err := st.Pop(ctx, req); !errors.Is(err, pg.ErrBadSegment) {
		t.Fatalf("a pop reaching the damaged tail: %v, want ErrBadSegment", err)
	}
	if c := cursor(); c != 4 {
		t.Fatalf("cursor at %d after the failed pop, want 4 (nothing committed)", c)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE queen.segments SET body = '\x02'::bytea || substring(body from 2)`); err != nil {
		t.Fatal(err)
	}
	req.Batch = 1
	if _, err := st.Pop(ctx, req); !errors.Is(err, pg.ErrBadSegment) {
		t.Fatalf("a pop of a segment of version 2: %v, want ErrBadSegment", err)
	}
	if c := cursor(); c != 4 {
		t.Fatalf("cursor at %d after the failed pop, want 4 (nothing committed)", c)
	}
}

// TestCombinedAutoAckPopsAnswerTheirOwn: autoAck pops queued behind one
// in flight are served by one combined transaction whose claim writes
// their (existing, clean) cursors and whose messages are all decoded into
// one slice; each pop's answer is one partition's run, in
// offset order, with that partition's own payloads, no message in two
// answers, and the answers keep their payloads while later pops of the
// same queue run (nothing in them is reused).
func TestCombinedAutoAckPopsAnswerTheirOwn(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	const parts, per = 8, 12
	for p := range parts {
		storeTagged(t, st, "q", fmt.Sprintf("p%d", p), per)
	}
	// One pop of one message per partition first: the group's cursors
	// exist, so the combined pops' claim writes them itself (a fresh
	// cursor is the general path's).
	for range parts {
		if res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: "g", Batch: 1, AutoAck: true}); err != nil || len(res.Messages) != 1 {
			t.Fatalf("first pops: %v", err)
		}
	}
	req := pg.PopRequest{Queue: "q", Group: "g", Batch: 5, AutoAck: true}
	var mu sync.Mutex
	var answers [][]pg.PoppedMessage
	pop := func() {
		res, err := st.Pop(ctx, req)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		answers = append(answers, res.Messages)
		mu.Unlock()
	}
	before := pg.CombinedPops(st)
	runBehindLeader(t, ctx, st, parts-1, 10*time.Second, 10*time.Second, 500*time.Millisecond,
		func(c context.Context) { pop() }, func(c context.Context, i int) { pop() })
	if pg.CombinedPops(st) == before {
		t.Fatal("no pop was served by a combined transaction")
	}
	if len(answers) != parts {
		t.Fatalf("%d answers, want %d", len(answers), parts)
	}
	check := func(when string) {
		seen := map[string]bool{}
		for a, msgs := range answers {
			if a < parts && len(msgs) != 5 {
				t.Fatalf("%s: answer %d holds %d messages, want 5", when, a, len(msgs))
			}
			for i, m := range msgs {
				want := fmt.Sprintf(`{"p":%q,"i":%d}`, msgs[0].Partition, m.Offset)
				if m.Partition != msgs[0].Partition || m.Offset != msgs[0].Offset+int64(i) || string(m.Payload) != want ||
					m.TransactionID != fmt.Sprintf("%s-%d", m.Partition, m.Offset) {
					t.Fatalf("%s: answer %d message %d: %s offset %d %s %s, want %s offset %d %s", when, a, i,
						m.Partition, m.Offset, m.TransactionID, m.Payload, msgs[0].Partition, msgs[0].Offset+int64(i), want)
				}
				key := fmt.Sprintf("%s/%d", m.Partition, m.Offset)
				if seen[key] {
					t.Fatalf("%s: %s in two answers", when, key)
				}
				seen[key] = true
			}
		}
	}
	check("answered")
	// The rest, popped one by one: every message is answered exactly once
	// (a combined pop whose cursor write committed offsets it did not
	// hand out would lose them).
	total := parts // the first pops'
	for _, msgs := range answers {
		total += len(msgs)
	}
	first := len(answers)
	for range 2 * parts * per {
		res, err := st.Pop(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) == 0 {
			break
		}
		answers = append(answers, res.Messages)
		total += len(res.Messages)
	}
	if total != parts*per {
		t.Fatalf("%d messages answered in all, want %d", total, parts*per)
	}
	answers = answers[:first]
	check("after later pops")
}
