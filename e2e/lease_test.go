package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestAckRacingANewPopAfterExpiry: once a lease lapsed, an ack under it is
// refused and changes nothing, even when it races the pop that takes the
// message again.
func TestAckRacingANewPopAfterExpiry(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "race", map[string]any{"leaseTime": 1, "retryLimit": 100})
	for round := 0; round < 6; round++ {
		part := fmt.Sprintf("P%d", round)
		push(t, s.base, body(item{"race", part, 1, "M1"}, item{"race", part, 2, "M2"}))
		_, first := pop(t, s.base, popPath("race", part), "")
		time.Sleep(1300 * time.Millisecond)
		var wg sync.WaitGroup
		var stale ackResp
		var again popResp
		wg.Add(2)
		go func() { defer wg.Done(); stale = ack(t, s.base, first.Messages[0], "completed", "") }()
		go func() { defer wg.Done(); _, again = pop(t, s.base, popPath("race", part), "") }()
		wg.Wait()
		if stale.Success {
			t.Fatalf("round %d: an ack under a lapsed lease succeeded", round)
		}
		if len(again.Messages) != 1 || again.Messages[0].TransactionID != "M1" {
			t.Fatalf("round %d: the new pop got %+v, want M1 again", round, again.Messages)
		}
		if a := ack(t, s.base, again.Messages[0], "completed", ""); !a.Success {
			t.Fatalf("round %d: ack under the new lease: %+v", round, a)
		}
		_, next := pop(t, s.base, popPath("race", part), "autoAck=true")
		if len(next.Messages) != 1 || next.Messages[0].TransactionID != "M2" {
			t.Fatalf("round %d: after M1, got %+v", round, next.Messages)
		}
	}
}

// TestOutOfOrderAcksNeverMoveTheCursorBack: acks inside one lease may come
// in any order; the cursor moves over the contiguous acked run only.
func TestOutOfOrderAcksNeverMoveTheCursorBack(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "ooo", "P", 1, 4)
	_, r := pop(t, s.base, popPath("ooo", "P"), "batch=3")
	if len(r.Messages) != 3 {
		t.Fatalf("popped %d", len(r.Messages))
	}
	for _, i := range []int{2, 0} {
		if a := ack(t, s.base, r.Messages[i], "completed", ""); !a.Success || a.LeaseReleased {
			t.Fatalf("ack %d: %+v", i, a)
		}
	}
	if a := ack(t, s.base, r.Messages[2], "completed", ""); a.Success || a.Error == nil || *a.Error != "Message already acknowledged" {
		t.Fatalf("a second ack of the same message: %+v", a)
	}
	if a := ack(t, s.base, r.Messages[1], "completed", ""); !a.Success || !a.LeaseReleased {
		t.Fatalf("last ack: %+v", a)
	}
	_, r = pop(t, s.base, popPath("ooo", "P"), "batch=10")
	if len(r.Messages) != 1 || r.Messages[0].TransactionID != "m-4" {
		t.Fatalf("after the acks: %+v", r.Messages)
	}
}

// TestLeaseExpiryCountsAsRetry: a consumer that never acks (it crashes)
// makes the message lapse retryLimit+1 times; then it is dead-lettered and
// the next message comes.
func TestLeaseExpiryCountsAsRetry(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "crash", map[string]any{"leaseTime": 1, "retryLimit": 1})
	push(t, s.base, body(item{"crash", "P", 1, "poison"}, item{"crash", "P", 2, "next"}))
	for i := 0; i < 2; i++ { // one delivery + one retry, each left to lapse
		code, r := pop(t, s.base, popPath("crash", "P"), "")
		if code != 200 || r.Messages[0].TransactionID != "poison" {
			t.Fatalf("delivery %d: %d %+v", i+1, code, r.Messages)
		}
		time.Sleep(1300 * time.Millisecond)
	}
	code, r := pop(t, s.base, popPath("crash", "P"), "")
	if code != 200 || r.Messages[0].TransactionID != "next" {
		t.Fatalf("after the retries lapsed: %d %+v, want the next message", code, r.Messages)
	}
	var dlq struct {
		Messages []struct{ TransactionID string }
	}
	getJSON(t, s.base+"/api/v1/dlq?queue=crash", &dlq)
	if len(dlq.Messages) != 1 || dlq.Messages[0].TransactionID != "poison" {
		t.Fatalf("dlq: %+v", dlq)
	}
}

// TestSeekWakesWaitingPop: a pop waiting with nothing to deliver is woken
// by a seek that rewinds its group.
func TestSeekWakesWaitingPop(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "sk", "P", 1, 3)
	if _, r := pop(t, s.base, popPath("sk", "P"), "consumerGroup=g&autoAck=true&batch=10"); len(r.Messages) != 3 {
		t.Fatalf("first read: %d", len(r.Messages))
	}
	done := make(chan popResp, 1)
	start := time.Now()
	go func() {
		_, r := pop(t, s.base, popPath("sk", ""), "consumerGroup=g&autoAck=true&batch=10&wait=true&timeout=20000")
		done <- r
	}()
	time.Sleep(300 * time.Millisecond)
	if code, rb := post(t, s.base, "/api/v1/consumer-groups/g/queues/sk/seek", []byte(`{"timestamp":"1970-01-01T00:00:00Z"}`)); code != 200 {
		t.Fatalf("seek: %d %s", code, rb)
	}
	r := <-done
	if len(r.Messages) != 3 || time.Since(start) > 5*time.Second {
		t.Fatalf("waiting pop after the seek: %d messages after %v", len(r.Messages), time.Since(start))
	}
}

// TestGroupDeleteWakesWaitingPops: pops of a group waiting on two queues
// are woken when the group is deleted on all queues at once, and start
// over by their subscription mode (all: from the first message).
func TestGroupDeleteWakesWaitingPops(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	done := make(chan popResp, 2)
	for _, q := range []string{"gd1", "gd2"} {
		pushN(t, s.base, q, "P", 1, 2)
		if _, r := pop(t, s.base, popPath(q, "P"), "consumerGroup=g&autoAck=true&batch=10"); len(r.Messages) != 2 {
			t.Fatalf("%s first read: %d", q, len(r.Messages))
		}
		go func() {
			_, r := pop(t, s.base, popPath(q, ""), "consumerGroup=g&autoAck=true&batch=10&wait=true&timeout=20000")
			done <- r
		}()
	}
	start := time.Now()
	time.Sleep(300 * time.Millisecond)
	if code, rb := del(t, s.base+"/api/v1/consumer-groups/g"); code != 200 {
		t.Fatalf("delete group: %d %s", code, rb)
	}
	for i := 0; i < 2; i++ {
		r := <-done
		if len(r.Messages) != 2 || time.Since(start) > 5*time.Second {
			t.Fatalf("waiting pop after the group delete: %d messages after %v", len(r.Messages), time.Since(start))
		}
	}
}
