package pg

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
)

// leasedPop is a PopResult of n messages of one partition from offset
// first under a fresh lease.
func leasedPop(pid uuid.UUID, first int64, n int) *PopResult {
	res := &PopResult{LeaseID: uuid.Must(uuid.NewV7())}
	for i := range n {
		m := PoppedMessage{LeaseID: res.LeaseID}
		m.PartitionID, m.Offset, m.Partition = pid, first+int64(i), "p"
		m.TransactionID = fmt.Sprintf("tx-%d", first+int64(i))
		res.Messages = append(res.Messages, m)
	}
	return res
}

// TestLeaseMemoBounded: the memo never holds more than its byte bound,
// drops the oldest entries first, drops expired ones, and answers by
// (partition, lease) or, without a lease, the newest lease of (partition,
// group).
func TestLeaseMemoBounded(t *testing.T) {
	pid := uuid.Must(uuid.NewV7())
	one := &leaseMemoEntry{ids: make([]byte, 100*len("tx-1000")), ends: make([]uint32, 100), group: "g", queueName: "q", partName: "p"}
	m := newLeaseMemo(10 * one.size())
	var pops []*PopResult
	for i := range 50 {
		res := leasedPop(pid, int64(1000+100*i), 100)
		m.rememberPop(res, "g", "q", 60)
		pops = append(pops, res)
		if _, b := m.len(); b > m.maxBytes {
			t.Fatalf("after %d pops the memo holds %d bytes, bound %d", i+1, b, m.maxBytes)
		}
	}
	if n, _ := m.len(); n == 0 || n > 10 {
		t.Fatalf("memo holds %d entries, want 1..10", n)
	}
	if m.get(pid, "g", &pops[0].LeaseID) != nil {
		t.Fatal("the oldest lease was not dropped")
	}
	last := pops[len(pops)-1]
	e := m.get(pid, "g", &last.LeaseID)
	if e == nil || e.first != 5900 || e.last != 5999 {
		t.Fatalf("newest lease: %+v", e)
	}
	if off := e.offsetOf("tx-5950", 50); off != 5950 {
		t.Fatalf("offsetOf with the right hint = %d", off)
	}
	if off := e.offsetOf("tx-5950", 3); off != 5950 {
		t.Fatalf("offsetOf with a wrong hint = %d", off)
	}
	if off := e.offsetOf("tx-1", 0); off != -1 {
		t.Fatalf("offsetOf an unknown id = %d", off)
	}
	if got := m.get(pid, "g", nil); got != e {
		t.Fatal("without a lease, get is not the newest lease of (partition, group)")
	}
	if m.get(pid, "other", &last.LeaseID) != nil || m.get(pid, "other", nil) != nil {
		t.Fatal("an entry answered for another group")
	}
	m.forget(pid, last.LeaseID)
	if m.get(pid, "g", &last.LeaseID) != nil || m.get(pid, "g", nil) != nil {
		t.Fatal("forget left the entry")
	}

	// Expired entries go at the next insert, whatever the room.
	m2 := newLeaseMemo(1 << 20)
	old := leasedPop(pid, 0, 10)
	m2.rememberPop(old, "g", "q", 0)
	time.Sleep(time.Millisecond)
	m2.rememberPop(leasedPop(pid, 10, 10), "g", "q", 60)
	if m2.get(pid, "g", &old.LeaseID) != nil {
		t.Fatal("an expired entry was kept")
	}

	// A run with a hole (deleted offsets inside the lease) and an
	// autoAck pop are not remembered.
	holed := leasedPop(pid, 0, 5)
	holed.Messages = append(holed.Messages[:2], holed.Messages[3:]...)
	m2.rememberPop(holed, "g", "q", 60)
	if m2.get(pid, "g", &holed.LeaseID) != nil {
		t.Fatal("a lease with a hole was remembered")
	}
	auto := leasedPop(pid, 0, 5)
	auto.LeaseID = uuid.Nil
	m2.rememberPop(auto, "g", "q", 60)
	if n, _ := m2.len(); n != 1 {
		t.Fatalf("memo holds %d entries, want 1", n)
	}
}
