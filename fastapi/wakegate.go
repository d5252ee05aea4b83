package fastapi

import (
	"slices"
	"sync"
	"time"
)

// maxWokenClaims is how many waiting pops of one (queue, consumer group,
// partition) claim at once (wakeGate). More than one, so that a push of
// many messages reaches several waiting consumers together (concurrent
// pops of a queue share a transaction, pg/popcombine.go); few, so that
// the rest wait for their answer instead of all claiming.
const maxWokenClaims = 4

// wakeGate keeps a wake-up from turning into one claim per waiting pop.
// Every pop waiting on a queue is woken by a push to it (the waker
// broadcasts per queue); before, each then claimed, so 3,000 consumers
// long-polling one queue made 3,000 claims of every push, most of them
// empty (the probe measured 7,726 PostgreSQL transactions for 80 pushes,
// the other clients' pushes held up to 440 ms). Now waiting pops of the
// same (queue, group, partition) claim at most maxWokenClaims at a time
// after a wait,
// and a claim that found nothing is remembered with the queue's wake
// channel that was current when it started: a waiting pop that holds
// that same channel (no wake-up since) skips its claim and waits, since a
// claim of its own would look at the same state. It is remembered until
// the claim's NextCheck (a lease that lapses, a delayed message that
// matures: changes that send no wake-up) or popSafetyRecheck, whichever
// comes first; after that the next claims run (maxWokenClaims at a time)
// and record anew.
//
// Only pops that wait (wait=true) on one queue go through it; a pop by
// namespace or task does not (its wake channel is its own). The zero
// value is ready to use.
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
}

type wakeState struct {
	inflight int
	// emptyCh is the wake channel that was current when the last claim
	// that found nothing started; valid until expires.
	emptyCh <-chan struct{}
	expires time.Time
	// queued are the capped claims waiting for a turn, first come first.
	queued []*wakeTurn
}

// wakeTurn is one claim waiting for a turn: done is closed when it is
// granted one (granted: exit counted it in inflight) or told to look
// again (a claim that found nothing ended: it may skip now).
type wakeTurn struct {
	done    chan struct{}
	granted bool
}

// enter is called by a waiting pop before it claims, with ch, the queue's
// wake channel it took before (Consumer.WaitChan). It returns skip true
// (and when the claim that found nothing expires) when a claim that found
// nothing started under ch and has not expired: the pop waits without
// claiming. Otherwise, when capped, it waits for a turn while
// maxWokenClaims of key claim (or until stop closes), and returns skip
// false; the caller then must call exit once its claim ends. A pop's first
// claim is not capped: only claims after a wait come in herds (every
// waiter woken at once, or its timer at a lease's lapse), and a consumer
// that finds messages at once never waits (the bench's fan-out runs ten
// consumers a group, each claiming as soon as it has answered).
func (g *wakeGate) enter(key wakeKey, ch <-chan struct{}, capped bool, stop <-chan struct{}) (skip bool, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		st := g.stateLocked(key)
		if st.emptyCh == ch && time.Now().Before(st.expires) {
			return true, st.expires
		}
		if !capped || st.inflight < maxWokenClaims {
			st.inflight++
			return false, time.Time{}
		}
		w := &wakeTurn{done: make(chan struct{})}
		st.queued = append(st.queued, w)
		g.mu.Unlock()
		select {
		case <-w.done:
			g.mu.Lock()
		case <-stop:
			g.mu.Lock()
			if !w.granted { // leave the line, and claim (the server stops)
				st.queued = slices.DeleteFunc(st.queued, func(x *wakeTurn) bool { return x == w })
				g.stateLocked(key).inflight++
			}
			return false, time.Time{}
		}
		if w.granted {
			return false, time.Time{}
		}
	}
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

// exit ends a claim that enter let run: started under ch, it found
// nothing (empty) or delivered or failed; next is its NextCheck (zero:
// none). An empty claim is remembered until next or popSafetyRecheck
// from now, whichever is first, and every claim waiting for a turn looks
// again (those under ch then skip); otherwise its turn goes to the first
// claim waiting, each woken goroutine once, not the whole line per claim.
func (g *wakeGate) exit(key wakeKey, ch <-chan struct{}, empty bool, next time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.m[key]
	st.inflight--
	if empty {
		exp := time.Now().Add(popSafetyRecheck)
		if !next.IsZero() && next.Before(exp) {
			exp = next
		}
		st.emptyCh, st.expires = ch, exp
		for _, w := range st.queued {
			close(w.done)
		}
		st.queued = nil
	} else {
		st.emptyCh = nil
		if len(st.queued) > 0 {
			w := st.queued[0]
			st.queued = st.queued[1:]
			w.granted = true
			st.inflight++
			close(w.done)
		}
	}
	if st.inflight == 0 && st.emptyCh == nil && len(st.queued) == 0 {
		delete(g.m, key)
	}
}

// sweepLocked deletes, once the map has doubled since the last sweep, the
// entries no claim holds whose remembered channel was closed (a wake-up
// came since: they can never match again) or whose record expired.
func (g *wakeGate) sweepLocked() {
	if len(g.m) < 2*g.swept+64 {
		return
	}
	now := time.Now()
	for k, st := range g.m {
		if st.inflight > 0 || len(st.queued) > 0 {
			continue
		}
		stale := !now.Before(st.expires)
		if !stale {
			select {
			case <-st.emptyCh:
				stale = true
			default:
			}
		}
		if stale {
			delete(g.m, k)
		}
	}
	g.swept = len(g.m)
}
