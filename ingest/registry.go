package ingest

import (
	"sync"
	"time"
)

// Registry connects pushes waiting for a verdict with the projector that
// delivers it, keyed by WAL index. It is safe for concurrent use.
//
// A push waits on its own waiter's channel and nothing else: the verdict
// timeout is not a timer per push but a deadline in the waiter, enforced by
// one reaper goroutine per Registry that sleeps until the earliest deadline
// and answers the expired waiters "not stored yet" (nil), as the projector
// does when it fails. The reaper runs only while pushes wait (it exits
// after reaperLinger without waiters and is started again by the next
// one). Waiters, with their channel and their WAL callback, are reused
// (sync.Pool): a push allocates none of them.
type Registry struct {
	mu      sync.Mutex
	waiters map[uint64]*waiter
	// reaping is true while the reaper goroutine runs; wakeAt is when it
	// wakes next (zero while it scans); kick wakes it early.
	reaping bool
	wakeAt  time.Time
	kick    chan struct{}
	pool    sync.Pool
}

// reaperLinger is how long the reaper stays without waiters before it
// exits; reaperMinSleep is its shortest sleep, which bounds how late past
// its deadline a push is answered (plus scheduling).
const (
	reaperLinger   = 50 * time.Millisecond
	reaperMinSleep = time.Millisecond
)

// waiter is one push waiting for the verdicts of its WAL record.
type waiter struct {
	r *Registry
	// ch receives exactly one value per registration: the verdicts, or
	// nil for "answer buffered". Capacity 1: a sender never blocks.
	ch chan []Verdict
	// index is the WAL index w is registered under (0: not registered;
	// WAL indexes start at 1); taken is set, under Registry.mu, by the
	// sender that removed w from the map and will send on ch.
	index uint64
	taken bool
	// deadline is zero until expireAt.
	deadline time.Time
	// assign is w.register as a func value, made once per waiter: the WAL
	// writer calls it with the record's index before the record is written.
	assign func(uint64)
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	r := &Registry{waiters: make(map[uint64]*waiter), kick: make(chan struct{}, 1)}
	r.pool.New = func() any {
		w := &waiter{r: r, ch: make(chan []Verdict, 1)}
		w.assign = w.register
		return w
	}
	return r
}

// newWaiter returns a fresh waiter, without a deadline until expireAt.
func (r *Registry) newWaiter() *waiter {
	w := r.pool.Get().(*waiter)
	w.deadline, w.index, w.taken = time.Time{}, 0, false
	return w
}

// expireAt sets the time after which the reaper answers w nil.
func (w *waiter) expireAt(deadline time.Time) {
	r := w.r
	r.mu.Lock()
	w.deadline = deadline
	kick := !r.wakeAt.IsZero() && deadline.Before(r.wakeAt)
	r.mu.Unlock()
	if kick {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// register adds w under index (called from the WAL writer goroutine).
func (w *waiter) register(index uint64) {
	r := w.r
	w.index = index
	r.mu.Lock()
	r.waiters[index] = w
	start := !r.reaping
	r.reaping = true
	r.mu.Unlock()
	if start {
		go r.reap()
	}
}

// release drops w's registration if it is still there; if a sender took it
// first, it waits for that sender's value (it comes at once). Either way w
// goes back to the pool: nothing will send on it again. After a failed
// write the index is reused by the next record, whose waiter must stay
// (and may have replaced w in the map), hence the identity check.
func (w *waiter) release() {
	r := w.r
	r.mu.Lock()
	if w.index != 0 && r.waiters[w.index] == w {
		delete(r.waiters, w.index)
	}
	taken := w.taken
	r.mu.Unlock()
	if taken {
		<-w.ch
	}
	r.pool.Put(w)
}

// done returns w, whose value has been received, to the pool.
func (w *waiter) done() { w.r.pool.Put(w) }

// Deliver hands the verdicts of the WAL record at index (one per item, in
// item order) to its waiting push, if any. A nil slice means "not stored
// yet" and the push answers buffered.
func (r *Registry) Deliver(index uint64, v []Verdict) {
	r.mu.Lock()
	w, ok := r.waiters[index]
	if ok {
		delete(r.waiters, index)
		w.taken = true
	}
	r.mu.Unlock()
	if ok {
		w.ch <- v
	}
}

// Waiting reports whether a push still waits for the verdicts of the WAL
// record at index (the projector keeps a large record's verdicts piece by
// piece only while someone will read them).
func (r *Registry) Waiting(index uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.waiters[index]
	return ok
}

// FailAll answers every waiting push "buffered" (the projector calls it
// when PostgreSQL fails or it pauses).
func (r *Registry) FailAll() {
	r.mu.Lock()
	w := r.waiters
	r.waiters = make(map[uint64]*waiter, len(w))
	for _, x := range w {
		x.taken = true
	}
	r.mu.Unlock()
	for _, x := range w {
		x.ch <- nil
	}
}

// reap answers nil to every waiter past its deadline, sleeping until the
// earliest one; it returns after reaperLinger without waiters.
func (r *Registry) reap() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var idleSince time.Time
	var expired []*waiter
	for {
		now := time.Now()
		r.mu.Lock()
		next := now.Add(reaperLinger)
		for i, w := range r.waiters {
			switch {
			case w.deadline.IsZero(): // its record is being written
			case !w.deadline.After(now):
				delete(r.waiters, i)
				w.taken = true
				expired = append(expired, w)
			case w.deadline.Before(next):
				next = w.deadline
			}
		}
		if len(r.waiters) == 0 {
			if idleSince.IsZero() {
				idleSince = now
			} else if now.Sub(idleSince) >= reaperLinger {
				r.reaping, r.wakeAt = false, time.Time{}
				r.mu.Unlock()
				sendNil(expired)
				return
			}
		} else {
			idleSince = time.Time{}
		}
		r.wakeAt = next
		r.mu.Unlock()
		sendNil(expired)
		clear(expired)
		expired = expired[:0]
		t.Reset(max(next.Sub(now), reaperMinSleep))
		select {
		case <-t.C:
		case <-r.kick:
		}
		r.mu.Lock()
		r.wakeAt = time.Time{}
		r.mu.Unlock()
	}
}

func sendNil(ws []*waiter) {
	for _, w := range ws {
		w.ch <- nil
	}
}
