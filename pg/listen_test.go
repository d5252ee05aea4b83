package pg_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queenmq/queen-go/internal/startstop"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/internal/waker"
	"github.com/queenmq/queen-go/pg"
)

// listenBundle is a Listener on a fresh database and the queue names it
// delivered.
type listenBundle struct {
	store *pg.Store
	l     *pg.Listener
	woken chan string
	calls atomic.Int64
}

func setupListener(t *testing.T) *listenBundle {
	t.Helper()
	b := &listenBundle{store: openStore(t), woken: make(chan string, 64)}
	b.l = pg.NewListener(b.store, func(q string) {
		b.calls.Add(1)
		select {
		case b.woken <- q:
		default:
		}
	}, testenv.Logger)
	t.Cleanup(b.l.Stop)
	return b
}

// waitWoken sends NOTIFYs for queue every 50 ms (a notification sent
// before LISTEN took effect is not delivered) until the Listener delivers
// queue, or fails after 15 s.
func (b *listenBundle) waitWoken(t *testing.T, queue string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		b.store.NotifyQueue(context.Background(), queue)
		select {
		case q := <-b.woken:
			if q == queue {
				return
			}
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the listener did not deliver a wake-up for %q", queue)
		}
	}
}

// TestListenerDeliversNotifications: a NOTIFY on NotifyChannel reaches
// wake with the queue name; after Stop nothing is delivered and no
// goroutine is left.
func TestListenerDeliversNotifications(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	b := setupListener(t)
	if err := b.l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.waitWoken(t, "orders")
	b.l.Stop()
	b.l.Stop() // idempotent
	before := b.calls.Load()
	for range 5 {
		b.store.NotifyQueue(context.Background(), "orders")
	}
	time.Sleep(200 * time.Millisecond) // a delivery would come within ms
	if n := b.calls.Load(); n != before {
		t.Fatalf("%d wake-ups after Stop", n-before)
	}
	b.store.Close()
}

func TestListenerLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	b := setupListener(t)
	b.l.Stop() // before Start: a no-op
	if err := b.l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.l.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("second Start: %v, want startstop.ErrStarted", err)
	}
	b.l.Stop()
	b.l.Stop()
	b.store.Close()
}

// TestListenerReconnects: when its connection is killed (as a PostgreSQL
// restart or a network cut would), the Listener connects and LISTENs
// again, and later notifications arrive.
func TestListenerReconnects(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	b := setupListener(t)
	if err := b.l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.waitWoken(t, "before")
	var killed int
	err := b.store.Pool().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN `+pg.NotifyChannel+`'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminate the LISTEN connection: %d terminated, %v", killed, err)
	}
	b.waitWoken(t, "after")
	b.l.Stop()
	b.store.Close()
}

// TestListenerPostgresAway: with nothing listening at the database's
// address, Start returns at once, the Listener keeps retrying, and Stop
// ends it promptly.
func TestListenerPostgresAway(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	store, err := pg.Open(pg.Config{URL: deadURL(t), Logger: testenv.Logger, ConnectTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := pg.NewListener(store, func(string) { t.Error("woken without a database") }, testenv.Logger)
	started := time.Now()
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(started); d > time.Second {
		t.Fatalf("Start took %v without PostgreSQL", d)
	}
	time.Sleep(300 * time.Millisecond) // a few failed connects and backoffs
	stopped := time.Now()
	l.Stop()
	if d := time.Since(stopped); d > 2*time.Second {
		t.Fatalf("Stop took %v", d)
	}
	store.Close()
}

// deadURL is a PostgreSQL URL at a loopback port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", addr)
}

// listenBackends counts the connections of the store's database whose
// last statement was LISTEN on NotifyChannel (a Listener's connection).
func listenBackends(t *testing.T, s *pg.Store) int {
	t.Helper()
	var n int
	err := s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN `+pg.NotifyChannel+`'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitListenBackends polls until listenBackends is want, or fails after 15 s.
func waitListenBackends(t *testing.T, s *pg.Store, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		n := listenBackends(t, s)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d LISTEN connections, want %d", n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitClosed fails unless ch is closed within 15 s.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: not woken", what)
	}
}

// TestListenerOnDemand: a Listener on demand holds no connection while no
// pop waits (a broker without waiters is not sent its own NOTIFYs back);
// a waiter makes it connect, and once LISTEN is in effect every waiter is
// woken to look again (a commit before that moment notified nobody here);
// notifications then arrive; with no waiter for the linger it closes the
// connection, and a new waiter brings it back.
func TestListenerOnDemand(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	store := openStore(t)
	w := waker.New()
	l := pg.NewListener(store, w.Wake, testenv.Logger)
	l.ListenOnDemand(w, 200*time.Millisecond)
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	time.Sleep(300 * time.Millisecond) // an eager Listener would be listening by now
	if n := listenBackends(t, store); n != 0 {
		t.Fatalf("%d LISTEN connections without a waiter, want 0", n)
	}

	first := w.Chan("orders")
	waitClosed(t, first, "a waiter when LISTEN took effect")
	if n := listenBackends(t, store); n != 1 {
		t.Fatalf("%d LISTEN connections with a waiter, want 1", n)
	}
	next := w.Chan("orders")
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(15 * time.Second)
notified:
	for {
		store.NotifyQueue(context.Background(), "orders")
		select {
		case <-next:
			break notified
		case <-tick.C:
		case <-deadline:
			t.Fatal("a NOTIFY did not wake the waiter")
		}
	}

	waitListenBackends(t, store, 0) // nobody took a channel since: idle past the linger
	again := w.Chan("orders")
	waitClosed(t, again, "a waiter after the connection was closed for idleness")
	if n := listenBackends(t, store); n != 1 {
		t.Fatalf("%d LISTEN connections with a waiter again, want 1", n)
	}
	l.Stop()
	store.Close()
}
