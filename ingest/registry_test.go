package ingest

import (
	"errors"
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
	writing := writingWaiter(r, 1)
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
// its record durable, as a push's is once the WAL writer has fsynced it
// (before written starts the verdict timeout).
func assignedWaiter(r *Registry, idx uint64) *waiter {
	w := writingWaiter(r, idx)
	w.timeout = time.Hour // until the test's expireAt
	w.written(idx, nil)
	return w
}

// writingWaiter is a push's waiter whose record has the WAL index idx and
// is being written: the WAL writer still holds it, written has not run.
func writingWaiter(r *Registry, idx uint64) *waiter {
	w := r.newWaiter()
	w.refs.Add(1)
	w.assign(idx)
	return w
}

// noValue fails t if w has a value within a short while.
func noValue(t *testing.T, w *waiter, what string) {
	t.Helper()
	select {
	case v := <-w.ch:
		t.Fatalf("%s: got %v before the record was durable", what, v)
	case <-time.After(20 * time.Millisecond):
	}
}

// TestRegistryNoAnswerBeforeDurable: a push is never answered before the
// WAL writer has reported its record (the push sleeps once, so nothing
// else orders its answer after the fsync). FailAll, and a push whose
// context ends, hold a waiter whose record is being written; written then
// sends nil (buffered) when the write succeeded, nil with failed when it
// failed; a waiter cancelled before its index was assigned is never
// registered. A durable record's waiter gets its deadline from written;
// with the gate closed it is answered buffered at once.
func TestRegistryNoAnswerBeforeDurable(t *testing.T) {
	t.Parallel()
	get := func(t *testing.T, w *waiter) ([]Verdict, bool) {
		t.Helper()
		select {
		case v := <-w.ch:
			failed := w.failed
			w.done()
			return v, failed
		case <-time.After(5 * time.Second):
			t.Fatal("no value")
			return nil, false
		}
	}
	for _, tc := range []struct {
		name       string
		before     func(r *Registry, w *waiter) // with the record being written
		err        error
		wantFailed bool
	}{
		{"FailAll then durable", func(r *Registry, _ *waiter) { r.FailAll() }, nil, false},
		{"FailAll then write failed", func(r *Registry, _ *waiter) { r.FailAll() }, errors.New("disk full"), true},
		{"Drain then durable", func(r *Registry, _ *waiter) { r.Drain() }, nil, false},
		{"Drain then write failed", func(r *Registry, _ *waiter) { r.Drain() }, errors.New("disk full"), true},
		{"cancel then durable", func(_ *Registry, w *waiter) {
			if !w.cancel() {
				panic("cancel before durability must wait for written")
			}
		}, nil, false},
		{"cancel then write failed", func(_ *Registry, w *waiter) { w.cancel() }, errors.New("disk full"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRegistry()
			w := writingWaiter(r, 3)
			tc.before(r, w)
			noValue(t, w, tc.name)
			if r.Waiting(3) {
				t.Fatal("a held waiter is still registered")
			}
			w.written(3, tc.err)
			if v, failed := get(t, w); v != nil || failed != tc.wantFailed {
				t.Fatalf("got %v, failed %v; want nil, failed %v", v, failed, tc.wantFailed)
			}
		})
	}
	t.Run("cancel before assign", func(t *testing.T) {
		r := NewRegistry()
		w := r.newWaiter()
		w.refs.Add(1)
		if !w.cancel() {
			t.Fatal("cancel before the index is assigned must wait for written")
		}
		w.assign(4)
		if r.Waiting(4) {
			t.Fatal("a cancelled waiter was registered")
		}
		w.written(4, nil)
		if v, failed := get(t, w); v != nil || failed {
			t.Fatalf("got %v, failed %v", v, failed)
		}
	})
	t.Run("durable starts the deadline", func(t *testing.T) {
		r := NewRegistry()
		w := writingWaiter(r, 5)
		w.timeout = 20 * time.Millisecond
		r.mu.Lock()
		set := !w.deadline.IsZero()
		r.mu.Unlock()
		if set {
			t.Fatal("deadline set before durability")
		}
		w.written(5, nil)
		if !r.Waiting(5) {
			t.Fatal("a durable record's push no longer waits for its verdict")
		}
		if v, failed := get(t, w); v != nil || failed { // the reaper's nil
			t.Fatalf("got %v, failed %v", v, failed)
		}
	})
	t.Run("verdict before written", func(t *testing.T) {
		r := NewRegistry()
		w := writingWaiter(r, 6)
		r.Deliver(6, []Verdict{{}}) // the projector read the durable record first
		v := <-w.ch
		w.done()
		if len(v) != 1 || w.refs.Load() != 1 {
			t.Fatalf("got %v, refs %d; want one verdict and the writer's reference kept", v, w.refs.Load())
		}
		w.written(6, nil)
		if w.refs.Load() != 0 {
			t.Fatalf("refs %d after written", w.refs.Load())
		}
	})
	t.Run("gate closed", func(t *testing.T) {
		r := NewRegistry()
		w := writingWaiter(r, 7)
		w.pipe = &Pipeline{Gate: closedGate{}, Maintenance: func() bool { return false }}
		w.written(7, nil)
		if r.Waiting(7) {
			t.Fatal("still registered with the gate closed")
		}
		if v, failed := get(t, w); v != nil || failed {
			t.Fatalf("got %v, failed %v", v, failed)
		}
	})
}

// TestRegistryDrain: Drain answers the pushes waiting for a verdict
// buffered (nil) at once, and a record that becomes durable afterwards is
// answered buffered as soon as it is written, without a verdict and
// without being registered for one; a second Drain changes nothing.
func TestRegistryDrain(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	waiting := writingWaiter(r, 1)
	waiting.written(1, nil) // durable: waits for its verdict
	if !r.Waiting(1) {
		t.Fatal("a durable record's push does not wait for its verdict")
	}
	later := writingWaiter(r, 2)
	r.Drain()
	for _, w := range []*waiter{waiting} {
		select {
		case v := <-w.ch:
			if v != nil || w.failed {
				t.Fatalf("waiting push got %v, failed %v; want nil (buffered)", v, w.failed)
			}
			w.done()
		case <-time.After(5 * time.Second):
			t.Fatal("Drain did not answer the waiting push")
		}
	}
	noValue(t, later, "record still being written at Drain")
	later.written(2, nil)
	select {
	case v := <-later.ch:
		if v != nil || later.failed {
			t.Fatalf("push written after Drain got %v, failed %v", v, later.failed)
		}
		later.done()
	case <-time.After(5 * time.Second):
		t.Fatal("a push written after Drain was not answered")
	}
	r.Drain()
	after := writingWaiter(r, 3)
	after.written(3, nil)
	if r.Waiting(3) {
		t.Fatal("a record durable after Drain waits for a verdict")
	}
	if v := <-after.ch; v != nil {
		t.Fatalf("got %v", v)
	}
	after.done()
}

type closedGate struct{}

func (closedGate) Accepting() bool { return false }

// TestRegistryFailAfter: FailAfter(2) answers buffered (nil) at once the
// durable record after index 2 that waits for its verdict, holds the one
// still being written until written reports it (nil then, not before),
// and leaves the records up to index 2 waiting for their verdicts.
func TestRegistryFailAfter(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	own := assignedWaiter(r, 2) // in the batch: keeps waiting
	earlier := assignedWaiter(r, 1)
	behind := assignedWaiter(r, 3)
	writing := writingWaiter(r, 4)
	r.FailAfter(2)
	select {
	case v := <-behind.ch:
		if v != nil || behind.failed {
			t.Fatalf("the durable push behind the batch got %v, failed %v; want nil (buffered)", v, behind.failed)
		}
		behind.done()
	case <-time.After(5 * time.Second):
		t.Fatal("FailAfter did not answer the durable push behind the batch")
	}
	noValue(t, writing, "record behind the batch still being written")
	if r.Waiting(3) || r.Waiting(4) {
		t.Fatal("a push behind the batch is still registered")
	}
	if !r.Waiting(1) || !r.Waiting(2) {
		t.Fatal("a push of the batch no longer waits for its verdict")
	}
	writing.written(4, nil)
	select {
	case v := <-writing.ch:
		if v != nil || writing.failed {
			t.Fatalf("got %v, failed %v; want nil (buffered)", v, writing.failed)
		}
		writing.done()
	case <-time.After(5 * time.Second):
		t.Fatal("the held push was not answered once durable")
	}
	r.Deliver(2, []Verdict{{}})
	r.Deliver(1, []Verdict{{}})
	for _, w := range []*waiter{own, earlier} {
		if v := <-w.ch; len(v) != 1 {
			t.Fatalf("a push of the batch got %v, want its verdict", v)
		}
		w.done()
	}
}
