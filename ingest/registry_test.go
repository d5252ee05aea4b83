package ingest

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRegistryDeliver: a registered waiter receives its record's verdicts;
// Deliver for an index nobody waits for is dropped.
func TestRegistryDeliver(t *testing.T) {
	r := NewRegistry()
	w := assignedWaiter(r, 7)
	w.expireAt(time.Now().Add(time.Minute))
	if !r.Waiting(7) || r.Waiting(8) {
		t.Fatal("Waiting(7) should be true and Waiting(8) false")
	}
	r.Deliver(8, []Verdict{{}})
	r.Deliver(7, []Verdict{{Duplicate: true}})
	select {
	case v := <-w.ch:
		if len(v) != 1 || !v[0].Duplicate {
			t.Fatalf("got %v", v)
		}
	case <-time.After(time.Second):
		t.Fatal("no verdict")
	}
	w.done()
	if r.Waiting(7) {
		t.Fatal("still waiting after Deliver")
	}
}

// TestRegistryDeadline: a waiter past its deadline is answered nil (the
// push answers buffered) by the reaper, promptly, and a waiter without a
// deadline yet (its record is being written) is left alone.
func TestRegistryDeadline(t *testing.T) {
	r := NewRegistry()
	writing := assignedWaiter(r, 1)
	w := assignedWaiter(r, 2)
	start := time.Now()
	w.expireAt(start.Add(30 * time.Millisecond))
	select {
	case v := <-w.ch:
		if v != nil {
			t.Fatalf("got %v, want nil", v)
		}
		if d := time.Since(start); d < 30*time.Millisecond || d > 2*time.Second {
			t.Fatalf("answered after %v, want about 30ms", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("deadline not enforced")
	}
	w.done()
	if !r.Waiting(1) {
		t.Fatal("the waiter without a deadline was reaped")
	}
	writing.release()
	// The reaper leaves once nobody waits.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		reaping := r.reaping
		r.mu.Unlock()
		if !reaping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("reaper still running without waiters")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRegistryEarlierDeadlineWakesReaper: a deadline earlier than the
// reaper's planned wake-up is still kept.
func TestRegistryEarlierDeadlineWakesReaper(t *testing.T) {
	r := NewRegistry()
	long := assignedWaiter(r, 1)
	long.expireAt(time.Now().Add(time.Hour))
	time.Sleep(5 * time.Millisecond) // the reaper sleeps towards its next scan
	w := assignedWaiter(r, 2)
	start := time.Now()
	w.expireAt(start.Add(5 * time.Millisecond))
	<-w.ch
	if d := time.Since(start); d > time.Second {
		t.Fatalf("answered after %v", d)
	}
	w.done()
	long.release()
}

// TestRegistryReplacedIndex: after a failed write the index is reused by
// the next record; releasing the first waiter must not drop (or wait for)
// the second.
func TestRegistryReplacedIndex(t *testing.T) {
	r := NewRegistry()
	a := assignedWaiter(r, 5)
	b := assignedWaiter(r, 5)
	a.release() // must not block
	if !r.Waiting(5) {
		t.Fatal("the second waiter was dropped")
	}
	r.Deliver(5, []Verdict{{}})
	if v := <-b.ch; len(v) != 1 {
		t.Fatalf("got %v", v)
	}
	b.done()
}

// TestRegistryConcurrent: pushes registering, timing out, being released
// and answered by Deliver and FailAll at once each get exactly one answer
// and never hang; reused waiters never see another push's value (-race).
func TestRegistryConcurrent(t *testing.T) {
	r := NewRegistry()
	var next atomic.Uint64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var senders sync.WaitGroup
	senders.Add(1)
	go func() { // the projector
		defer senders.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := next.Load()
			if n > 0 {
				r.Deliver(uint64(rand.IntN(int(n)))+1, []Verdict{{}})
			}
			if rand.IntN(50) == 0 {
				r.FailAll()
			}
		}
	}()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				w := assignedWaiter(r, next.Add(1))
				if rand.IntN(4) == 0 {
					w.release() // a gate closed or the client left
					continue
				}
				w.expireAt(time.Now().Add(time.Duration(rand.IntN(200)) * time.Microsecond))
				select {
				case v := <-w.ch:
					if v != nil && len(v) != 1 {
						t.Errorf("got %v", v)
					}
					w.done()
				case <-time.After(10 * time.Second):
					t.Error("a waiter hung")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	senders.Wait()
	r.mu.Lock()
	n := len(r.waiters)
	r.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d waiters left registered", n)
	}
}

// assignedWaiter takes a waiter from r and assigns it the WAL index idx,
// as a push does once its record is appended.
func assignedWaiter(r *Registry, idx uint64) *waiter {
	w := r.newWaiter()
	w.assign(idx)
	return w
}
