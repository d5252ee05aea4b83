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
	"sync"
	"time"
)

// Waker is a set of per-queue broadcast channels. The zero value is not
// usable; call New.
type Waker struct {
	mu       sync.Mutex
	chans    map[string]chan struct{}
	lastChan time.Time     // when Chan was last called
	wanted   chan struct{} // capacity 1: a token after Chan made a channel
}

// New returns an empty Waker.
func New() *Waker {
	return &Waker{chans: make(map[string]chan struct{}), wanted: make(chan struct{}, 1)}
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

// Wake wakes every waiter on queue.
func (w *Waker) Wake(queue string) {
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
