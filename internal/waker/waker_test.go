package waker

import (
	"testing"
	"time"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWakeClosesOnlyItsQueue: Wake closes the channel of its queue, once;
// a channel taken afterwards is a new one.
func TestWakeClosesOnlyItsQueue(t *testing.T) {
	w := New()
	a, b := w.Chan("a"), w.Chan("b")
	if w.Chan("a") != a {
		t.Fatal("a second Chan for a waiting queue is another channel")
	}
	w.Wake("a")
	if !closed(a) || closed(b) {
		t.Fatalf("after Wake(a): a closed %v, b closed %v", closed(a), closed(b))
	}
	w.Wake("a") // nobody waits: a no-op
	if a2 := w.Chan("a"); a2 == a || closed(a2) {
		t.Fatal("Chan after a wake-up is not a fresh channel")
	}
}

// TestWakeAllClosesEveryChannel: WakeAll makes every waiter look again.
func TestWakeAllClosesEveryChannel(t *testing.T) {
	w := New()
	chans := []<-chan struct{}{w.Chan("a"), w.Chan("b"), w.Chan("c")}
	w.WakeAll()
	for i, ch := range chans {
		if !closed(ch) {
			t.Fatalf("channel %d not closed by WakeAll", i)
		}
	}
	if closed(w.Chan("a")) {
		t.Fatal("a channel taken after WakeAll is closed")
	}
}

// TestWantedAndIdle: the LISTEN connection's demand. A new waiter leaves
// a token in Wanted; the Waker is idle only with no channel held and no
// Chan for linger.
func TestWantedAndIdle(t *testing.T) {
	w := New()
	if !w.Idle(time.Hour) {
		t.Fatal("a new Waker is not idle")
	}
	if closed(w.Wanted()) {
		t.Fatal("a token in Wanted before any waiter")
	}
	ch := w.Chan("a")
	if !closed(w.Wanted()) {
		t.Fatal("no token in Wanted after a new waiter")
	}
	if w.Idle(0) {
		t.Fatal("idle while a channel is held")
	}
	w.Chan("a") // the same channel: no new token
	if closed(w.Wanted()) {
		t.Fatal("a token for a queue that already had a waiter")
	}
	w.Wake("a")
	<-ch
	if w.Idle(time.Hour) {
		t.Fatal("idle right after a wake-up: the woken waiter may take a channel again")
	}
	if !w.Idle(0) {
		t.Fatal("not idle with no channel held and linger 0")
	}
	time.Sleep(20 * time.Millisecond)
	if !w.Idle(10 * time.Millisecond) {
		t.Fatal("not idle past linger without a waiter")
	}
}

// TestGeneration: a queue's generation grows with its own Wake and with
// WakeAll, before the waiters are woken, and never goes back.
func TestGeneration(t *testing.T) {
	t.Parallel()
	w := New()
	g0 := w.Generation("a")
	ch := w.Chan("a")
	done := make(chan uint64)
	go func() {
		<-ch
		done <- w.Generation("a") // read by a woken waiter
	}()
	w.Wake("a")
	if g := <-done; g <= g0 {
		t.Fatalf("after Wake: generation %d, before %d", g, g0)
	}
	g1 := w.Generation("a")
	w.WakeAll()
	if g := w.Generation("a"); g <= g1 {
		t.Fatalf("after WakeAll: generation %d, before %d", g, g1)
	}
	g2 := w.Generation("a")
	for i := range 5000 { // other queues move it or leave it, never back
		w.Wake(string(rune('b' + i%20)))
		if g := w.Generation("a"); g < g2 {
			t.Fatalf("generation went back: %d < %d", g, g2)
		}
	}
	// "" is any queue: every Wake and WakeAll moves it.
	any0 := w.Generation("")
	w.Wake("zz")
	w.WakeAll()
	if g := w.Generation(""); g != any0+2 {
		t.Fatalf("generation of any queue: %d after two wake-ups from %d", g, any0)
	}
}
