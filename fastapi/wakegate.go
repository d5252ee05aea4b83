package fastapi

import (
	"slices"
	"sync"
	"time"
)

// maxWokenClaims is how many waiting pops of one (queue, consumer group,
// partition) claim at once after a wait (wakeGate). More than one, so that
// a push of many messages reaches several waiting consumers together
// (concurrent pops of a queue share a transaction, pg/popcombine.go); few,
// so that the rest wait for their answer instead of all claiming.
const maxWokenClaims = 4

// wakeGate keeps a wake-up from turning into one claim per waiting pop.
// Every pop waiting on a queue is woken by a push to it (the waker
// broadcasts per queue); before, each then claimed, so 3,000 consumers
// long-polling one queue made 3,000 claims of every push, most of them
// empty (a probe measured 7,726 PostgreSQL transactions for 80 pushes,
// the other clients' pushes held up to 440 ms).
//
// Each claim is tagged with the wake generation read just before it
// (Consumer.WakeGeneration): the claim sees every commit announced by the
// wake-ups up to it. A claim that found nothing is remembered per (queue,
// group, partition) with its generation; a waiting pop whose own
// generation (read after its last wake-up) is not newer skips its claim
// and waits, since a claim of its own would find nothing either. The
// record lasts until the claim's NextCheck (a lease that lapses, a delayed
// message that matures: changes no wake-up announces) or
// popSafetyRecheck, whichever comes first. After a wait, at most
// maxWokenClaims of a key claim at once; the others wait in line, first
// come first served, and leave it when a claim found nothing for them
// (they skip), when a turn frees (they claim), or at their timeout.
//
// Only pops that wait (wait=true) go through it. A pop by namespace or
// task has a key of its own (its namespace and task, group) and the
// generation of any queue (waker.Generation("")): every wake-up anywhere
// makes its claim look again, but no more than maxWokenClaims of its key
// at once, and its parked pops wait for the watchers as a queue's do. (A
// probe's 200 of them, every one claiming at every push and every
// recheck, had held the connection pool: other clients' pushes took 5 s.)
// The zero value is ready to use.
type wakeGate struct {
	mu sync.Mutex
	m  map[wakeKey]*wakeState
	// swept is len(m) after the last sweep of stale entries.
	swept int
}

// wakeKey is who competes for the same messages: the waiting pops of one
// consumer group on one queue and partition ("" for a wildcard pop). A
// wildcard claim that finds nothing says nothing of one partition's pop
// and the other way round, so they are apart.
type wakeKey struct {
	queue, group, partition string
	// filtered: a pop by namespace and/or task; queue is its label.
	filtered bool
}

type wakeState struct {
	inflight int
	// watchers are the waiting pops of the key that wait on the queue's
	// wake channel (at most maxWatchers); parked are the others' current
	// waits, first come first (see join).
	watchers int
	parked   []*parkSlot
	// empty: a claim that started at generation emptyGen found nothing;
	// valid until expires.
	empty    bool
	emptyGen uint64
	expires  time.Time
	// queued are the capped claims waiting for a turn, first come first.
	queued []*wakeTurn
}

// wakeTurn is one claim waiting in line: done is closed when exit decided
// for it (outcome gateClaim, counted in inflight, or gateSkip until
// until).
type wakeTurn struct {
	gen     uint64
	done    chan struct{}
	outcome gateOutcome
	until   time.Time
}

// maxWatchers is how many waiting pops of one key wait on their queue's
// wake channel; the others park (join).
const maxWatchers = maxWokenClaims

// parkSlot is one wait of a parked pop: done is closed when the pop is
// handed a wake-up (a claim of its key delivered: there may be more) or
// promoted to watcher (promoted, set before done is closed).
type parkSlot struct {
	done     chan struct{}
	promoted bool
}

// join is called by a waiting pop of key at its first wait; it reports
// whether the pop is a watcher, one of at most maxWatchers of the key
// that wait on the queue's wake channel, or parked. A parked pop waits on
// a slot of its own (park) instead: a push wakes the watchers only, and
// not the thousands of pops a queue may have waiting (before, every push
// woke every one of them, and the collector scanning their stacks was
// most of the broker's CPU: docs/consume.md, "Long-poll"). The watchers stand for
// the parked pops: a claim of theirs that delivers hands the wake-up on to
// the first maxWokenClaims parked (exit), and a watcher that leaves
// (leave) promotes the first parked. A pop that joined must call leave
// when it answers, with whether it is a watcher then (unpark tells a
// promotion).
func (g *wakeGate) join(key wakeKey) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stateLocked(key)
	if st.watchers < maxWatchers {
		st.watchers++
		return true
	}
	return false
}

// park queues a wait of a parked pop of key (see join) and returns its
// slot; after the wait, call unpark. When the key has fewer than
// maxWatchers watchers, the slot comes back promoted (done closed): the
// watchers may all have left while this pop was out of the line (handed a
// wake-up by exit, it claimed), promoting nobody, and a pop parked then
// would wait with no watcher to wake it, every push missed until its
// timer (popSafetyRecheck) or timeout.
func (g *wakeGate) park(key wakeKey) *parkSlot {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stateLocked(key)
	slot := &parkSlot{done: make(chan struct{})}
	if st.watchers < maxWatchers {
		st.watchers++
		slot.promoted = true
		close(slot.done)
		return slot
	}
	st.parked = append(st.parked, slot)
	return slot
}

// unpark ends the wait of slot: it leaves the line if nothing woke it (a
// timer, the server's stop), and reports whether it was promoted to
// watcher.
func (g *wakeGate) unpark(key wakeKey, slot *parkSlot) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-slot.done:
		return slot.promoted
	default:
	}
	if st := g.m[key]; st != nil {
		st.parked = slices.DeleteFunc(st.parked, func(x *parkSlot) bool { return x == slot })
		g.dropIfIdleLocked(key, st)
	}
	return false
}

// leave ends the wait of a pop of key that joined: a watcher's place goes
// to the first parked pop; with passOn (the pop was woken but answers
// without claiming: its client left) the first parked pop is also woken,
// so that a wake-up handed to a departed consumer is not lost.
func (g *wakeGate) leave(key wakeKey, watcher, passOn bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.m[key]
	if st == nil {
		return
	}
	if watcher {
		st.watchers--
	}
	st.wakeParkedLocked(maxWatchers-st.watchers, true)
	if passOn {
		st.wakeParkedLocked(1, false)
	}
	g.dropIfIdleLocked(key, st)
}

// wakeParkedLocked wakes the first n parked pops (fewer when fewer are
// parked; none for n <= 0) and takes them out of the line; with promote
// they become watchers (g.mu held).
func (st *wakeState) wakeParkedLocked(n int, promote bool) {
	n = min(max(n, 0), len(st.parked))
	for _, slot := range st.parked[:n] {
		if promote {
			slot.promoted = true
			st.watchers++
		}
		close(slot.done)
	}
	clear(st.parked[:n])
	st.parked = st.parked[n:]
}

// gateOutcome is what enter tells a waiting pop to do.
type gateOutcome int

const (
	// gateClaim: claim now, then call exit.
	gateClaim gateOutcome = iota
	// gateSkip: a claim at least as new found nothing; wait (until the
	// time enter returns at the latest) without claiming.
	gateSkip
	// gateTimeout: the pop's timeout (or the server's stop) came while it
	// waited in line; answer 204 without claiming.
	gateTimeout
)

// skipsLocked reports whether a claim of generation gen would look at no
// newer state than an unexpired claim that found nothing.
func (st *wakeState) skipsLocked(gen uint64, now time.Time) bool {
	return st.empty && st.emptyGen >= gen && now.Before(st.expires)
}

// enter is called by a waiting pop before it claims, with gen, the wake
// generation it read after taking its wake channel. When capped (a claim
// after a wait) it returns gateSkip (and when the record expires) when an
// unexpired claim of generation gen or newer found nothing. Otherwise it
// returns gateClaim, except when capped and maxWokenClaims of key claim
// already: then it waits in line
// until exit decides for it (gateClaim or gateSkip), expired fires (the
// pop's timeout: one timer a request, not one a wait) or stop closes
// (gateTimeout). After gateClaim the caller must call exit once its claim
// ends. A pop's first claim is neither skipped nor held back: only claims
// after a wait come in herds (every waiter woken at once, or its timer at
// a lease's lapse), a consumer that finds messages at once never waits
// (the bench's fan-out runs ten consumers a group, each claiming as soon
// as it has answered), and a record can be wrong in one way: a claim that
// found every candidate partition locked by pops in flight answers empty
// while those pops leave messages behind. With no wake-up to come (autoAck
// pops of a quiet queue release no lease), a record that turned away
// first claims too would leave such messages until it expired.
func (g *wakeGate) enter(key wakeKey, gen uint64, capped bool, expired <-chan time.Time, stop <-chan struct{}) (gateOutcome, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stateLocked(key)
	if capped && st.skipsLocked(gen, time.Now()) {
		return gateSkip, st.expires
	}
	if !capped || st.inflight < maxWokenClaims {
		st.inflight++
		return gateClaim, time.Time{}
	}
	w := &wakeTurn{gen: gen, done: make(chan struct{})}
	st.queued = append(st.queued, w)
	g.mu.Unlock()
	decided := false
	select {
	case <-w.done:
		decided = true
	case <-expired:
	case <-stop:
	}
	g.mu.Lock()
	select {
	case <-w.done: // decided meanwhile
		decided = true
	default:
	}
	if decided {
		return w.outcome, w.until
	}
	st.queued = slices.DeleteFunc(st.queued, func(x *wakeTurn) bool { return x == w })
	g.dropIfIdleLocked(key, st)
	return gateTimeout, time.Time{}
}

// stateLocked is key's entry, made when missing (g.mu held).
func (g *wakeGate) stateLocked(key wakeKey) *wakeState {
	if g.m == nil {
		g.m = make(map[wakeKey]*wakeState)
	}
	st := g.m[key]
	if st == nil {
		g.sweepLocked()
		st = &wakeState{}
		g.m[key] = st
	}
	return st
}

// exit ends a claim that enter let run, of generation gen: it found
// nothing (empty; next is its NextCheck, zero when none), delivered, or
// failed (neither). A claim that found nothing is remembered (when no
// newer one is) until next or popSafetyRecheck from now, whichever is
// first, and the claims in line that it covers skip; one that delivered,
// as new as the record or newer, ends the record, and wakes the first
// maxWokenClaims parked pops (join). Then free turns go to the first in
// line.
func (g *wakeGate) exit(key wakeKey, gen uint64, empty, delivered bool, next time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.m[key]
	st.inflight--
	now := time.Now()
	switch {
	case empty && (!st.empty || gen >= st.emptyGen || !now.Before(st.expires)):
		exp := now.Add(popSafetyRecheck)
		if !next.IsZero() && next.Before(exp) {
			exp = next
		}
		st.empty, st.emptyGen, st.expires = true, gen, exp
	case !empty && st.empty && gen >= st.emptyGen:
		st.empty = false
	}
	if delivered {
		// Delivered: there may be more, for the parked pops (join) too.
		st.wakeParkedLocked(maxWokenClaims, false)
	}
	kept := st.queued[:0]
	for _, w := range st.queued {
		switch {
		case st.skipsLocked(w.gen, now):
			w.outcome, w.until = gateSkip, st.expires
			close(w.done)
		case st.inflight < maxWokenClaims:
			w.outcome = gateClaim
			st.inflight++
			close(w.done)
		default:
			kept = append(kept, w)
		}
	}
	clear(st.queued[len(kept):])
	st.queued = kept
	g.dropIfIdleLocked(key, st)
}

// dropIfIdleLocked deletes key's entry when nothing claims, waits or is
// remembered there.
func (g *wakeGate) dropIfIdleLocked(key wakeKey, st *wakeState) {
	if st.inflight == 0 && !st.empty && len(st.queued) == 0 && st.watchers == 0 && len(st.parked) == 0 {
		delete(g.m, key)
	}
}

// sweepLocked deletes, once the map has doubled since the last sweep, the
// entries no claim holds or waits on whose record expired.
func (g *wakeGate) sweepLocked() {
	if len(g.m) < 2*g.swept+64 {
		return
	}
	now := time.Now()
	for k, st := range g.m {
		if st.inflight == 0 && len(st.queued) == 0 && st.watchers == 0 && len(st.parked) == 0 && !now.Before(st.expires) {
			delete(g.m, k)
		}
	}
	g.swept = len(g.m)
}
