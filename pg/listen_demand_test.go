package pg_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/internal/waker"
	"github.com/queenmq/queen-go/pg"
)

// onDemandBroker is the waiting side of two brokers on one database: a
// Waker and a Listener on demand (linger short, so that its connection
// comes and goes within the test), and version, what "the other broker"
// committed (a waiter checks it as a pop checks its queue).
type onDemandBroker struct {
	store   *pg.Store
	w       *waker.Waker
	l       *pg.Listener
	version atomic.Int64
}

func startOnDemand(t *testing.T, linger time.Duration) *onDemandBroker {
	t.Helper()
	b := &onDemandBroker{store: openStore(t), w: waker.New()}
	b.l = pg.NewListener(b.store, b.w.Wake, testenv.Logger)
	b.l.ListenOnDemand(b.w, linger)
	if err := b.l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.l.Stop)
	return b
}

// commit is the other broker's commit: the change, then its NOTIFY
// (through the pool, not the Listener's connection).
func (b *onDemandBroker) commit() {
	b.version.Add(1)
	b.store.NotifyQueue(context.Background(), "q")
}

// waitPast waits as a long-poll does (the channel taken before the
// check) until version is past seen; false after within without it.
func (b *onDemandBroker) waitPast(seen int64, within time.Duration, waiting chan<- struct{}) bool {
	timeout := time.After(within)
	for {
		ch := b.w.Chan("q")
		if b.version.Load() > seen {
			return true
		}
		if waiting != nil {
			close(waiting)
			waiting = nil
		}
		select {
		case <-ch:
		case <-timeout:
			return false
		}
	}
}

// TestListenerOnDemandNoLostWakeUp: a pop that starts waiting on a broker
// whose Listener is idle (no connection) is woken by the other broker's
// commit made right after its check, before this broker's LISTEN is in
// effect (that NOTIFY reaches nobody here: the Listener's WakeAll once
// LISTEN is in effect makes the waiter look again), and by one made at
// any moment while the connection comes and goes (a linger of a few
// milliseconds: idle closes racing new waiters). Each round has exactly
// one commit, so a lost wake-up is never rescued by a later one.
func TestListenerOnDemandNoLostWakeUp(t *testing.T) {
	const linger = 5 * time.Millisecond
	b := startOnDemand(t, linger)
	for round := range 40 {
		// Idle past the linger (the connection is closed at the next
		// look, every linger), or not, at random.
		time.Sleep(time.Duration(rand.IntN(4)) * 3 * linger)
		seen := b.version.Load()
		waiting := make(chan struct{})
		done := make(chan bool, 1)
		go func() { done <- b.waitPast(seen, 5*time.Second, waiting) }()
		<-waiting
		if round%2 == 1 {
			time.Sleep(time.Duration(rand.IntN(int(4 * linger))))
		}
		b.commit()
		if !<-done {
			t.Fatalf("round %d: the waiter was not woken within 5 s of the other broker's commit", round)
		}
	}
	b.l.Stop()
}

// TestListenerOnDemandReconnectsForWaiter: while a pop waits, a Listener
// on demand whose connection is killed (a PostgreSQL restart, a network
// cut) connects again, makes the waiter look again (commits in between
// notified nobody here) and delivers later NOTIFYs; a waiter that waits
// far past the linger keeps the connection.
func TestListenerOnDemandReconnectsForWaiter(t *testing.T) {
	const linger = 50 * time.Millisecond
	b := startOnDemand(t, linger)
	ch := b.w.Chan("q")
	waitClosed(t, ch, "a waiter when LISTEN took effect")
	ch = b.w.Chan("q") // the waiter looks again and waits
	time.Sleep(10 * linger)
	if n := listenBackends(t, b.store); n != 1 {
		t.Fatalf("%d LISTEN connections while a pop waits past the linger, want 1", n)
	}
	var killed int
	if err := b.store.Pool().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN `+pg.NotifyChannel+`'`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the LISTEN connection: %d terminated, %v", killed, err)
	}
	b.version.Add(1) // committed while this broker does not listen
	b.store.NotifyQueue(context.Background(), "q")
	waitClosed(t, ch, "a waiter after its LISTEN connection was killed")
	waitListenBackends(t, b.store, 1)
	seen := b.version.Load()
	done := make(chan bool, 1)
	waiting := make(chan struct{})
	go func() { done <- b.waitPast(seen, 5*time.Second, waiting) }()
	<-waiting
	b.commit()
	if !<-done {
		t.Fatal("a NOTIFY after the reconnection did not wake the waiter")
	}
	b.l.Stop()
}
