package ingest

import (
	"sync"
	"sync/atomic"
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
// one). Waiters, with their channel and their WAL callbacks, are reused
// (sync.Pool): a push allocates none of them.
//
// A push sleeps once: its record goes to the WAL asynchronously
// (wal.Log.AppendGatheredAsync) and the WAL writer reports the group
// commit's outcome to the waiter (written), not to the push. Until then no
// value is sent that would answer the push before its record is durable:
// FailAll and a push leaving early (its context ends) mark such a waiter
// held, and written sends the value ("buffered", or "failed" when the
// write failed) once the outcome is known. A verdict needs no such care:
// the projector reads only durable records. A waiter goes back to the pool
// when both the push and the WAL writer are done with it (refs).
type Registry struct {
	mu      sync.Mutex
	waiters map[uint64]*waiter
	// reaping is true while the reaper goroutine runs; wakeAt is when it
	// wakes next (zero while it scans); kick wakes it early.
	reaping bool
	wakeAt  time.Time
	kick    chan struct{}
	pool    sync.Pool
	// draining is set by Drain: every durable record's push is answered
	// buffered without waiting for its verdict.
	draining atomic.Bool
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
	// durable is set by written once the record is fsynced; held, by a
	// sender (FailAll, cancel) that took w before that, which leaves the
	// send to written; failed, by written when the write failed (the value
	// it sends is nil), with the write's error in writeErr. All under
	// Registry.mu; the push reads failed and writeErr after its receive.
	durable, held, failed bool
	writeErr              error
	// deadline is zero until written starts the verdict timeout (or a
	// test calls expireAt); the reaper leaves a waiter without one alone.
	deadline time.Time
	// pipe and timeout are the push's, for written (the gate, the verdict
	// timeout); nil pipe: the gate is open.
	pipe    *Pipeline
	timeout time.Duration
	// refs counts who still uses w: the push, and the WAL writer from the
	// append until written returns. The last one puts w back in the pool.
	refs atomic.Int32
	// durableAt is when written learned that the record is fsynced
	// (monoSince; 0 before that, or after a failed write), for the push's
	// stage timing (Pipeline.ObserveStages). Atomic: a verdict can reach
	// the push before the writer's report does.
	durableAt atomic.Int64
	// assign is w.register and onWritten w.written as func values, made
	// once per waiter: the WAL writer calls assign with the record's index
	// before the record is written, onWritten with the outcome after.
	assign    func(uint64)
	onWritten func(uint64, error)
}

// monoBase is the process's reference instant for monoSince.
var monoBase = time.Now()

// monoSince returns t as nanoseconds since monoBase on the monotonic
// clock (wall-clock steps do not move it), at least 1 so that 0 can mean
// "not yet".
func monoSince(t time.Time) int64 { return max(int64(t.Sub(monoBase)), 1) }

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	r := &Registry{waiters: make(map[uint64]*waiter), kick: make(chan struct{}, 1)}
	r.pool.New = func() any {
		w := &waiter{r: r, ch: make(chan []Verdict, 1)}
		w.assign, w.onWritten = w.register, w.written
		return w
	}
	return r
}

// newWaiter returns a fresh waiter held by the caller alone, without a
// deadline until written (or expireAt) sets one.
func (r *Registry) newWaiter() *waiter {
	w := r.pool.Get().(*waiter)
	w.deadline, w.index, w.taken = time.Time{}, 0, false
	w.durable, w.held, w.failed, w.writeErr = false, false, false, nil
	w.pipe, w.timeout = nil, 0
	w.durableAt.Store(0)
	w.refs.Store(1)
	return w
}

// unref drops one user of w; the last one puts it back in the pool.
func (w *waiter) unref() {
	if w.refs.Add(-1) == 0 {
		w.pipe = nil
		w.r.pool.Put(w)
	}
}

// written is the WAL writer's report (wal.Log.AppendGatheredAsync) for
// w's record: err nil once it is fsynced. A failed write answers the push
// failed; a durable record answers it buffered at once when it was held or
// the gate is closed (no verdict would come), and otherwise starts the
// verdict timeout, which runs from durability so that a slow fsync does
// not eat the projector's time. It does not block, and drops the writer's
// reference.
func (w *waiter) written(_ uint64, err error) {
	r := w.r
	var now time.Time
	if err == nil {
		now = time.Now()
		w.durableAt.Store(monoSince(now))
	}
	open := err == nil && !r.draining.Load() && (w.pipe == nil || w.pipe.accepting())
	send, kick := false, false
	r.mu.Lock()
	switch {
	case err != nil:
		if w.index != 0 && r.waiters[w.index] == w {
			delete(r.waiters, w.index)
		}
		send = !w.taken || w.held
		w.taken, w.failed, w.writeErr = true, true, err
	case w.held:
		w.durable, send = true, true
	case w.taken: // the verdict is on its way (or there)
		w.durable = true
	case !open:
		w.durable = true
		if r.waiters[w.index] == w {
			delete(r.waiters, w.index)
		}
		w.taken, send = true, true
	default:
		w.durable = true
		w.deadline = now.Add(w.timeout)
		kick = !r.wakeAt.IsZero() && w.deadline.Before(r.wakeAt)
	}
	r.mu.Unlock()
	if kick {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	if send {
		w.ch <- nil
	}
	w.unref()
}

// cancel is for a push that stops waiting before its value came (its
// context ended). It reports whether a value will still come on w.ch (the
// push must receive it before it answers): yes when a sender took w, or
// when the record is not yet durable (w is then held: written sends);
// no when w was still registered with its record durable (it is dropped;
// the push answers buffered).
func (w *waiter) cancel() (wait bool) {
	r := w.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.index != 0 && r.waiters[w.index] == w {
		delete(r.waiters, w.index)
	}
	switch {
	case w.taken:
		return true
	case !w.durable:
		w.taken, w.held = true, true
		return true
	default:
		w.taken = true
		return false
	}
}

// expireAt sets the time after which the reaper answers w nil (tests;
// the push path's deadline is set by written).
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
	r.mu.Lock()
	w.index = index
	if w.taken { // held by cancel before its record was assigned
		r.mu.Unlock()
		return
	}
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
	w.unref()
}

// done returns w, whose value has been received, to the pool (once the
// WAL writer is done with it too).
func (w *waiter) done() { w.unref() }

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
// when PostgreSQL fails or it pauses); one whose record is not durable yet
// is held, and answered when the WAL reports (written).
func (r *Registry) FailAll() {
	r.mu.Lock()
	w := r.waiters
	r.waiters = make(map[uint64]*waiter, len(w))
	for i, x := range w {
		x.taken = true
		if !x.durable {
			x.held = true
			delete(w, i)
		}
	}
	r.mu.Unlock()
	for _, x := range w {
		x.ch <- nil
	}
}

// FailAfter answers "buffered" every waiting push whose record comes after
// the WAL record at index, as FailAll does (one not durable yet once its
// write is reported); pushes of records up to index keep waiting. The
// projector calls it before it sends a batch that will take seconds
// (projector.DefaultMaxWaitBatchBytes), which ends at index.
func (r *Registry) FailAfter(index uint64) {
	r.mu.Lock()
	var send []*waiter
	for i, x := range r.waiters {
		if i <= index {
			continue
		}
		delete(r.waiters, i)
		x.taken = true
		if !x.durable {
			x.held = true
			continue
		}
		send = append(send, x)
	}
	r.mu.Unlock()
	for _, x := range send {
		x.ch <- nil
	}
}

// Drain is for a server shutting down, whose pushes wait without a
// context that ends (Pipeline.Push): every push waiting for a verdict is
// answered buffered now (FailAll: a push whose record is not durable yet
// once its write is reported, failed if it failed), and every later push
// as soon as its record is durable, without waiting for a verdict. It is
// what a push waiting under a context that ends at shutdown got, and it
// is not undone: the Registry's broker is stopping. Safe to call more
// than once.
func (r *Registry) Drain() {
	r.draining.Store(true)
	r.FailAll()
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
