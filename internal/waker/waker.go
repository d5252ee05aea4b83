// Package waker wakes long-polling pops when their queue may have
// something new: a push committed (locally, or on another broker through
// PostgreSQL NOTIFY) or a lease was released. Waiters block on a channel;
// there is no polling loop per waiter.
package waker

import "sync"

// Waker is a set of per-queue broadcast channels. The zero value is not
// usable; call New.
type Waker struct {
	mu    sync.Mutex
	chans map[string]chan struct{}
}

// New returns an empty Waker.
func New() *Waker { return &Waker{chans: make(map[string]chan struct{})} }

// Chan returns a channel that is closed by the next Wake(queue). Take it
// before checking the queue, so that no wake-up between the check and the
// wait is missed.
func (w *Waker) Chan(queue string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.chans[queue]
	if !ok {
		ch = make(chan struct{})
		w.chans[queue] = ch
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
