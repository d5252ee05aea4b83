// Package startstop is the lifecycle of the broker's long-running loops
// (the maintenance-flag refresh, retention, the LISTEN connection): one
// goroutine per service, started by Start and ended by Stop.
//
// The rules, which every service built on Loop inherits:
//   - Start launches the loop and returns once its goroutine runs. A second
//     Start returns ErrStarted, also after Stop: a service runs once.
//   - Stop cancels the loop's context and waits until the loop has
//     returned. It is idempotent, safe to call concurrently, and does
//     nothing before Start.
//   - The loop also ends when the context given to Start ends; Stop then
//     only waits for it.
//
// The projector keeps its own copy of this shape (it runs two goroutines).
package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted is returned by Start when the service was started before.
var ErrStarted = errors.New("startstop: already started")

// Loop runs one service's goroutine. The zero value is ready; a Loop must
// not be copied after first use.
type Loop struct {
	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// Start runs run in a new goroutine with a context derived from ctx that
// Stop cancels, and returns once that goroutine is running. run must
// return soon after its context ends. ErrStarted: Start was called before.
func (l *Loop) Start(ctx context.Context, run func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return ErrStarted
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	running := make(chan struct{})
	go func() {
		defer close(l.done)
		close(running)
		run(ctx)
	}()
	<-running
	return nil
}

// Stop cancels the loop and waits until it has returned. Idempotent; a
// no-op before Start.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Done is closed when the loop has returned; nil before Start.
func (l *Loop) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}
