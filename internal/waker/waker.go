// Package waker wakes long-polling pops when their queue may have
// something new: a push committed (locally, or on another broker through
// PostgreSQL NOTIFY) or a lease was released. Waiters block on a channel;
// there is no polling loop per waiter.
//
// The Waker also tells the broker's LISTEN connection when it is needed
// (Wanted, Idle): only while a pop may be waiting here. Every other
// wake-up is local (this broker's own commits wake its waiters directly),
// so a broker without waiters need not receive every projection batch's
// NOTIFY back from PostgreSQL (docs/decisions.md, "A broker listens only
// while a pop waits").
package waker

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// Waker is a set of per-queue broadcast channels. The zero value is not
// usable; call New.
type Waker struct {
	mu       sync.Mutex
	chans    map[string]chan struct{}
	lastChan time.Time     // when Chan was last called
	wanted   chan struct{} // capacity 1: a token after Chan made a channel
	// gens count the Wake calls of the queues hashed to each (seed), and
	// every WakeAll (Generation).
	gens [genBuckets]atomic.Uint64
	seed maphash.Seed
	// total counts every Wake and WakeAll: the generation of "" (any
	// queue).
	total atomic.Uint64
}

// genBuckets is how many wake generation counters a Waker keeps; queues
// share them by hash (a wake-up of one queue moves the generation of the
// others in its bucket: a pop of those looks again once more than it had
// to, never less).
const genBuckets = 1024

// New returns an empty Waker.
func New() *Waker {
	return &Waker{chans: make(map[string]chan struct{}), wanted: make(chan struct{}, 1), seed: maphash.MakeSeed()}
}

// Chan returns a channel that is closed by the next Wake(queue) or
// WakeAll. Take it before checking the queue, so that no wake-up between
// the check and the wait is missed. A waiter that is woken takes a new
// channel before it checks again, so a queue with a waiter always has a
// channel here until the next wake-up.
func (w *Waker) Chan(queue string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastChan = time.Now()
	ch, ok := w.chans[queue]
	if !ok {
		ch = make(chan struct{})
		w.chans[queue] = ch
		select {
		case w.wanted <- struct{}{}:
		default:
		}
	}
	return ch
}

// Generation is queue's wake generation: it grows with every Wake of
// queue (and of the other queues that share its counter) and every
// WakeAll, counted before anyone is woken, so a look at the queue that
// starts after reading generation g sees every commit announced by the
// wake-ups up to g (wake-ups follow their commits). A waiting pop
// compares it with the generation a claim that found nothing started at
// (fastapi's wake gate). queue "" (no queue has that name) is any queue:
// its generation counts every wake-up, for a pop that waits on several
// queues (a pop by namespace or task).
func (w *Waker) Generation(queue string) uint64 {
	if queue == "" {
		return w.total.Load()
	}
	return w.gens[w.bucket(queue)].Load()
}

func (w *Waker) bucket(queue string) uint64 {
	return maphash.String(w.seed, queue) % genBuckets
}

// Wake wakes every waiter on queue.
func (w *Waker) Wake(queue string) {
	w.gens[w.bucket(queue)].Add(1)
	w.total.Add(1)
	w.mu.Lock()
	ch, ok := w.chans[queue]
	delete(w.chans, queue)
	w.mu.Unlock()
	if ok {
		close(ch)
	}
}

// WakeAll wakes every waiter on every queue, so that each looks again.
// The LISTEN connection calls it once LISTEN is in effect: a commit of
// another broker before that moment sent its NOTIFY to nobody here, and
// the waiters' second look finds what it stored.
func (w *Waker) WakeAll() {
	for i := range w.gens {
		w.gens[i].Add(1)
	}
	w.total.Add(1)
	w.mu.Lock()
	chans := w.chans
	w.chans = make(map[string]chan struct{})
	w.mu.Unlock()
	for _, ch := range chans {
		close(ch)
	}
}

// Wanted is signalled (a token in a channel of capacity 1) when Chan makes
// a new channel: a pop may wait from now on. A token may be stale; check
// Idle after taking it.
func (w *Waker) Wanted() <-chan struct{} { return w.wanted }

// Idle reports whether no pop can be waiting: no channel is held and Chan
// was not called for at least linger (so that a waiter between a wake-up
// and its next Chan counts as waiting).
func (w *Waker) Idle(linger time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.chans) == 0 && time.Since(w.lastChan) >= linger
}
