package fastapi

import (
	"testing"
	"time"
)

// TestWakeGate: a claim that found nothing under a wake channel makes
// later waiting pops holding the same channel skip theirs, until its
// expiry, a wake-up (another channel) or a claim that delivered; claims
// after a wait run at most maxWokenClaims at a time, and one waiting for
// its turn sees the record the claim before it left.
func TestWakeGate(t *testing.T) {
	t.Parallel()
	var g wakeGate
	k := wakeKey{"q", "g", ""}
	ch1, ch2 := make(chan struct{}), make(chan struct{})

	if skip, _ := g.enter(k, ch1, false, nil); skip {
		t.Fatal("first claim skipped")
	}
	g.exit(k, ch1, true, time.Time{})
	skip, until := g.enter(k, ch1, true, nil)
	if !skip || time.Until(until) < popSafetyRecheck-time.Second {
		t.Fatalf("same channel after an empty claim: skip %v until %v", skip, until)
	}
	if skip, _ := g.enter(k, ch2, true, nil); skip {
		t.Fatal("a new wake channel skipped")
	}
	if skip, _ := g.enter(wakeKey{"q", "g", "p"}, ch1, true, nil); skip {
		t.Fatal("another partition's pop skipped")
	}
	g.exit(wakeKey{"q", "g", "p"}, ch1, false, time.Time{})
	g.exit(k, ch2, false, time.Time{}) // delivered: the record is gone
	if skip, _ := g.enter(k, ch1, true, nil); skip {
		t.Fatal("skipped after a claim that delivered")
	}
	g.exit(k, ch1, true, time.Now().Add(30*time.Millisecond)) // NextCheck bounds the record
	if skip, _ := g.enter(k, ch1, true, nil); !skip {
		t.Fatal("not skipped before NextCheck")
	}
	time.Sleep(40 * time.Millisecond)
	if skip, _ := g.enter(k, ch1, true, nil); skip {
		t.Fatal("skipped after NextCheck")
	}
	g.exit(k, ch1, false, time.Time{})

	// The cap: maxWokenClaims capped claims run; the next waits for one
	// to end, and skips when that one found nothing under its channel.
	for range maxWokenClaims {
		if skip, _ := g.enter(k, ch2, true, nil); skip {
			t.Fatal("skipped under the cap")
		}
	}
	if skip, _ := g.enter(k, ch2, false, nil); skip { // a first claim is not capped
		t.Fatal("uncapped claim skipped")
	}
	g.exit(k, ch2, false, time.Time{})
	got := make(chan bool)
	go func() {
		skip, _ := g.enter(k, ch2, true, nil)
		got <- skip
	}()
	select {
	case <-got:
		t.Fatal("a claim over the cap ran")
	case <-time.After(50 * time.Millisecond):
	}
	g.exit(k, ch2, true, time.Time{})
	if skip := <-got; !skip {
		t.Fatal("the waiting claim ran after an empty claim under its channel")
	}
	stop := make(chan struct{})
	go func() {
		skip, _ := g.enter(k, make(chan struct{}), true, stop)
		got <- skip
	}()
	close(stop)
	if skip := <-got; skip {
		t.Fatal("stopped wait skipped")
	}
	for range maxWokenClaims {
		g.exit(k, ch2, false, time.Time{})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.m) != 0 {
		t.Fatalf("entries left: %d", len(g.m))
	}
}
