package fastapi

import (
	"testing"
	"time"
)

// TestWakeGate: a claim that found nothing at wake generation g makes the
// waiting pops of generation g or older skip theirs, until its expiry, a
// newer generation (a wake-up since) or a claim as new that delivered.
// Claims after a wait run at most maxWokenClaims at a time: one waiting in
// line is handed a turn that frees (first come first), skips when a claim
// at its generation or newer found nothing, and leaves the line when its
// timeout fires.
func TestWakeGate(t *testing.T) {
	t.Parallel()
	var g wakeGate
	k := wakeKey{queue: "q", group: "g", partition: ""}
	var never <-chan time.Time
	enter := func(k wakeKey, gen uint64, capped bool) gateOutcome {
		o, _ := g.enter(k, gen, capped, never, nil)
		return o
	}

	if o := enter(k, 4, false); o != gateClaim { // a claim of generation 4, still running
		t.Fatalf("first claim: %v", o)
	}
	if o := enter(k, 5, false); o != gateClaim {
		t.Fatalf("second claim: %v", o)
	}
	g.exit(k, 5, true, false, time.Time{})
	if o := enter(k, 5, false); o != gateClaim { // a first claim is never skipped
		t.Fatalf("a first claim after an empty one: %v", o)
	}
	g.exit(k, 5, true, false, time.Time{})
	o, until := g.enter(k, 5, true, never, nil)
	if o != gateSkip || time.Until(until) < popSafetyRecheck-time.Second {
		t.Fatalf("same generation after an empty claim: %v until %v", o, until)
	}
	if o := enter(k, 3, true); o != gateSkip {
		t.Fatalf("an older generation: %v", o)
	}
	if o := enter(k, 6, true); o != gateClaim {
		t.Fatalf("a newer generation: %v", o)
	}
	if o := enter(wakeKey{queue: "q", group: "g", partition: "p"}, 5, true); o != gateClaim {
		t.Fatalf("another partition's pop: %v", o)
	}
	g.exit(wakeKey{queue: "q", group: "g", partition: "p"}, 5, false, true, time.Time{})
	g.exit(k, 4, false, true, time.Time{}) // the older claim delivered: the record stays
	if o := enter(k, 5, true); o != gateSkip {
		t.Fatalf("after an older claim delivered: %v", o)
	}
	g.exit(k, 6, false, true, time.Time{}) // a newer one that delivered ends it
	if o := enter(k, 5, true); o != gateClaim {
		t.Fatalf("after a newer claim delivered: %v", o)
	}
	g.exit(k, 5, true, false, time.Now().Add(30*time.Millisecond)) // NextCheck bounds the record
	if o := enter(k, 5, true); o != gateSkip {
		t.Fatalf("before NextCheck: %v", o)
	}
	time.Sleep(40 * time.Millisecond)
	if o := enter(k, 5, true); o != gateClaim {
		t.Fatalf("after NextCheck: %v", o)
	}
	g.exit(k, 5, false, true, time.Time{})

	// The cap and the line.
	for range maxWokenClaims {
		if o := enter(k, 7, true); o != gateClaim {
			t.Fatalf("under the cap: %v", o)
		}
	}
	if o := enter(k, 7, false); o != gateClaim { // a first claim is not capped
		t.Fatalf("uncapped: %v", o)
	}
	got := make(chan gateOutcome, 3)
	inLine := func(gen uint64, expired <-chan time.Time) {
		go func() {
			o, _ := g.enter(k, gen, true, expired, nil)
			got <- o
		}()
		time.Sleep(20 * time.Millisecond)
	}
	inLine(7, never)
	inLine(9, never)
	g.exit(k, 7, false, true, time.Time{}) // 5 -> 4 claiming: still full
	select {
	case o := <-got:
		t.Fatalf("a claim over the cap returned %v", o)
	case <-time.After(30 * time.Millisecond):
	}
	g.exit(k, 7, false, true, time.Time{}) // a turn frees: the first in line
	if o := <-got; o != gateClaim {
		t.Fatalf("first in line: %v", o)
	}
	g.exit(k, 8, true, false, time.Time{}) // found nothing at 8: not the one of 9, which takes the freed turn
	if o := <-got; o != gateClaim {
		t.Fatalf("generation 9 in line after an empty claim at 8: %v", o)
	}
	inLine(8, never)
	inLine(9, never)
	g.exit(k, 9, true, false, time.Time{}) // found nothing at 9: both in line skip
	if o1, o2 := <-got, <-got; o1 != gateSkip || o2 != gateSkip {
		t.Fatalf("in line after an empty claim at 9: %v %v", o1, o2)
	}
	if o := enter(k, 10, false); o != gateClaim { // the cap is full again
		t.Fatalf("uncapped: %v", o)
	}
	inLine(10, time.After(50*time.Millisecond))
	if o := <-got; o != gateTimeout {
		t.Fatalf("in line past the deadline: %v", o)
	}
	for range maxWokenClaims {
		g.exit(k, 10, false, true, time.Time{})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.m) != 0 {
		t.Fatalf("entries left: %d", len(g.m))
	}
}

// TestWakeGateParking: past maxWatchers a waiting pop of a key parks; a
// claim that delivered wakes the first maxWokenClaims parked (not
// promoted), one that failed or found nothing wakes none, a watcher that
// leaves promotes the first parked, a woken pop that leaves without its
// claim wakes the next, a wait that ends otherwise leaves the line, and
// the key's entry goes once nobody joins it.
func TestWakeGateParking(t *testing.T) {
	var g wakeGate
	k := wakeKey{queue: "q", group: "g", partition: ""}
	for i := range maxWatchers {
		if !g.join(k) {
			t.Fatalf("pop %d of %d: parked, want watcher", i+1, maxWatchers)
		}
	}
	for range 2 {
		if g.join(k) {
			t.Fatal("a pop past maxWatchers watches")
		}
	}
	var slots []*parkSlot
	for range maxWokenClaims + 2 {
		slots = append(slots, g.park(k))
	}
	closed := func(s *parkSlot) bool {
		select {
		case <-s.done:
			return true
		default:
			return false
		}
	}
	if o, _ := g.enter(k, 1, true, nil, nil); o != gateClaim {
		t.Fatalf("enter: %v", o)
	}
	g.exit(k, 1, true, false, time.Time{}) // found nothing
	if o, _ := g.enter(k, 2, true, nil, nil); o != gateClaim {
		t.Fatalf("enter: %v", o)
	}
	g.exit(k, 2, false, false, time.Time{}) // failed
	for i, s := range slots {
		if closed(s) {
			t.Fatalf("slot %d woken by claims that delivered nothing", i)
		}
	}
	if o, _ := g.enter(k, 3, true, nil, nil); o != gateClaim {
		t.Fatalf("enter: %v", o)
	}
	g.exit(k, 3, false, true, time.Time{})
	for i, s := range slots {
		if closed(s) != (i < maxWokenClaims) {
			t.Fatalf("after a claim that delivered: slot %d woken %v", i, closed(s))
		}
		if i < maxWokenClaims && g.unpark(k, s) {
			t.Fatalf("slot %d: woken, reported promoted", i)
		}
	}
	g.leave(k, true, false) // a watcher answers: the first parked watches now
	if !closed(slots[maxWokenClaims]) || !g.unpark(k, slots[maxWokenClaims]) {
		t.Fatal("a watcher left: the first parked pop was not promoted")
	}
	last := slots[maxWokenClaims+1]
	if g.unpark(k, last) || closed(last) {
		t.Fatal("a wait ended by its timer: reported promoted")
	}
	// A woken pop whose client left passes its wake-up on.
	next := g.park(k)
	g.leave(k, false, true)
	if !closed(next) || g.unpark(k, next) {
		t.Fatal("a pop that left without its claim: the next parked was not woken (or was promoted)")
	}
	g.leave(k, true, false) // no one parked: nobody promoted
	if closed(last) {
		t.Fatal("a slot that left the line was woken")
	}
	for range maxWatchers - 1 {
		g.leave(k, true, false)
	}
	if len(g.m) != 0 {
		t.Fatalf("every pop left: %d entries kept", len(g.m))
	}
}

// A parked pop handed a wake-up (a claim of its key delivered) is out of
// the line while it claims; if every watcher answers meanwhile, nobody is
// promoted, and the pop parking again must watch: with no watcher, a push
// wakes nobody, and it would wait until its recheck or timeout.
func TestWakeGateParkWithoutWatchers(t *testing.T) {
	var g wakeGate
	k := wakeKey{queue: "q", group: "g"}
	for range maxWatchers {
		g.join(k)
	}
	if g.join(k) {
		t.Fatal("a pop past maxWatchers watches")
	}
	s := g.park(k)
	if o, _ := g.enter(k, 1, true, nil, nil); o != gateClaim {
		t.Fatalf("enter: %v", o)
	}
	g.exit(k, 1, false, true, time.Time{}) // a watcher's claim delivered
	if g.unpark(k, s) {
		t.Fatal("handed a wake-up: reported promoted")
	}
	for range maxWatchers { // every watcher answers while the pop claims
		g.leave(k, true, false)
	}
	s = g.park(k) // its claim found nothing: it waits again
	select {
	case <-s.done:
	default:
		t.Fatal("parked with no watcher of its key: no push would wake it")
	}
	if !g.unpark(k, s) {
		t.Fatal("not promoted to watcher")
	}
	g.leave(k, true, false)
	if len(g.m) != 0 {
		t.Fatalf("every pop left: %d entries kept", len(g.m))
	}
}
