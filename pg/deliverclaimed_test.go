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
			cursorRow: cursorRow{offset: 537, nextOffset: 700, leaseEnd: -1, leaseKey: 42}}
	}
	seed, err := newLeaseSeed(false)
	if err != nil {
		t.Fatal(err)
	}
	lease := bindLeaseID(seed, 42) // the id the claim wrote on the cursor
	for _, autoAck := range []bool{true, false} {
		req := PopRequest{Queue: "q1", Group: QueueModeGroup, Batch: 100, Partitions: 1, AutoAck: autoAck}
		res := &PopResult{LeaseID: seed, leaseSeed: seed}
		if autoAck {
			res.LeaseID, res.leaseSeed = uuid.Nil, uuid.Nil
		}
		var w pgx.Batch
		got, err := s.popPartition(context.Background(), nil, q, pid, "p7", req, res, 100, 0, true, false, cc(segs), &w)
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
	if _, err := s.deliverClaimed(nil, q, "p7", req, uuid.Nil, cc(missing)); err == nil {
		t.Fatal("a segment missing from the claim's rows was delivered without it")
	}
	short := append([]claimedSegment(nil), segs...)
	short[1].last++ // the body holds one message fewer than its offsets
	if _, err := s.deliverClaimed(nil, q, "p7", req, uuid.Nil, cc(short)); !errors.Is(err, ErrBadSegment) {
		t.Fatalf("count mismatch: %v", err)
	}
	encSegs, _ := claimedSegments(pid, 500, 200, 30, 600)
	if _, err := s.deliverClaimed(nil, q, "p7", req, uuid.Nil, cc(encSegs)); !errors.Is(err, ErrNoKey) {
		t.Fatalf("encrypted payload without a key: %v", err)
	}
}

// TestDeliverClaimedIntoOneSlice: the cursors of a combined pop are
// decoded into one slice, grown once for all of them (growForClaimed),
// one run after the other, without allocating per cursor or per message
// (no trace ids or producer subjects here, which share one array per
// segment).
func TestDeliverClaimedIntoOneSlice(t *testing.T) {
	q := &queueRow{name: "q1", leaseTime: 30, retryLimit: 3}
	s := &Store{}
	req := PopRequest{Queue: "q1", Group: QueueModeGroup, Batch: 100, Partitions: 3, AutoAck: true, perPartition: 100}
	var cursors []*claimedCursor
	var want []StoredMessage
	for i := range 3 {
		pid := uuid.New()
		var msgs []Message
		for off := range 250 {
			msgs = append(msgs, Message{ID: uuid.New(), TransactionID: fmt.Sprintf("tx-%d-%d", i, off),
				CreatedAtMicros: 1e15, Payload: []byte(`{}`)})
		}
		var segs []claimedSegment
		for b := 0; b < 250; b += 50 {
			segs = append(segs, claimedSegment{int64(b), int64(b + 49), EncodeSegment(nil, msgs[b:b+50])})
		}
		cursors = append(cursors, &claimedCursor{id: pid, name: fmt.Sprintf("p%d", i), take: 100 - 10*i, updated: true,
			segs: segs, cursorRow: cursorRow{offset: int64(20 + i), nextOffset: 250, leaseEnd: -1}})
		for off := 20 + i; off < 20+i+100-10*i; off++ {
			want = append(want, StoredMessage{Queue: "q1", Partition: fmt.Sprintf("p%d", i), PartitionID: pid,
				Offset: int64(off), Message: msgs[off]})
		}
	}
	deliver := func() []PoppedMessage {
		out := growForClaimed(nil, cursors)
		for _, cc := range cursors {
			var err error
			if out, err = s.deliverClaimed(out, q, cc.name, req, uuid.Nil, cc); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	got := deliver()
	if len(got) != len(want) || cap(got) < 270 {
		t.Fatalf("%d messages in a slice of capacity %d, want %d in at least 270", len(got), cap(got), len(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i].StoredMessage, want[i]) || got[i].LeaseID != uuid.Nil {
			t.Fatalf("message %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if raceEnabled {
		return
	}
	if n := testing.AllocsPerRun(20, func() { deliver() }); n != 1 {
		t.Fatalf("%v allocations per combined delivery, want 1 (the slice for every cursor)", n)
	}
}
