package pg

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// claimedSegments is partition pid's messages base..base+n-1 packed into
// segments of per messages each, as the claim statement returns them.
func claimedSegments(pid uuid.UUID, base int64, n, per int, encrypted int64) ([]claimedSegment, []StoredMessage) {
	var segs []claimedSegment
	var all []StoredMessage
	for b := int64(0); b < int64(n); b += int64(per) {
		var msgs []Message
		for off := base + b; off < base+min(b+int64(per), int64(n)); off++ {
			m := Message{ID: uuid.New(), TransactionID: fmt.Sprintf("tx-%d", off), CreatedAtMicros: 1e15 + off,
				Payload: []byte(fmt.Sprintf(`{"o":%d}`, off)), Encrypted: off == encrypted}
			if off%2 == 0 {
				sub := fmt.Sprintf("sub-%d", off)
				m.ProducerSub = &sub
			}
			if off%3 == 0 {
				tr := uuid.New()
				m.TraceID = &tr
			}
			msgs = append(msgs, m)
			all = append(all, StoredMessage{PartitionID: pid, Offset: off, Message: m})
		}
		segs = append(segs, claimedSegment{base + b, base + b + int64(len(msgs)) - 1, EncodeSegment(nil, msgs)})
	}
	return segs, all
}

// TestDeliverClaimed: a cursor the claim statement wrote is delivered by
// decoding its offsets straight into the answer: exactly offsets
// cursor..cursor+take-1 (starting and ending inside a segment), each as
// DecodeSegment decodes it, with the queue, partition and lease (none for
// autoAck) on every message, and the same answer popPartition gave
// before; a segment missing from the rows, a body whose count disagrees
// with its offsets, and an encrypted payload without a key are errors.
func TestDeliverClaimed(t *testing.T) {
	pid := uuid.New()
	segs, all := claimedSegments(pid, 500, 200, 30, -1)
	q := &queueRow{name: "q1", leaseTime: 30, retryLimit: 3}
	s := &Store{}
	cc := func(segs []claimedSegment) *claimedCursor {
		return &claimedCursor{id: pid, name: "p7", take: 100, updated: true, segs: segs,
			cursorRow: cursorRow{offset: 537, nextOffset: 700, leaseEnd: -1}}
	}
	lease := uuid.New()
	for _, autoAck := range []bool{true, false} {
		req := PopRequest{Queue: "q1", Group: QueueModeGroup, Batch: 100, Partitions: 1, AutoAck: autoAck}
		res := &PopResult{LeaseID: lease}
		if autoAck {
			res.LeaseID = uuid.Nil
		}
		var w pgx.Batch
		got, err := s.popPartition(context.Background(), nil, q, pid, "p7", req, res, 100, true, false, cc(segs), &w)
		if err != nil || w.Len() != 0 {
			t.Fatalf("autoAck=%v: %v (%d writes queued)", autoAck, err, w.Len())
		}
		var want []PoppedMessage
		for _, m := range all[37:137] {
			m.Queue, m.Partition = "q1", "p7"
			pm := PoppedMessage{StoredMessage: m, LeaseID: lease}
			if autoAck {
				pm.LeaseID = uuid.Nil
			}
			want = append(want, pm)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("autoAck=%v: got %d messages %+v...\nwant %d %+v...", autoAck, len(got), got[0], len(want), want[0])
		}
	}
	req := PopRequest{Queue: "q1", Group: QueueModeGroup, Batch: 100, Partitions: 1, AutoAck: true}
	missing := append(append([]claimedSegment(nil), segs[:2]...), segs[3:]...) // offsets 560..589 gone
	if _, err := s.deliverClaimed(q, "p7", req, uuid.Nil, cc(missing)); err == nil {
		t.Fatal("a segment missing from the claim's rows was delivered without it")
	}
	short := append([]claimedSegment(nil), segs...)
	short[1].last++ // the body holds one message fewer than its offsets
	if _, err := s.deliverClaimed(q, "p7", req, uuid.Nil, cc(short)); !errors.Is(err, ErrBadSegment) {
		t.Fatalf("count mismatch: %v", err)
	}
	encSegs, _ := claimedSegments(pid, 500, 200, 30, 600)
	if _, err := s.deliverClaimed(q, "p7", req, uuid.Nil, cc(encSegs)); !errors.Is(err, ErrNoKey) {
		t.Fatalf("encrypted payload without a key: %v", err)
	}
}
