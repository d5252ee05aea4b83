package pg

import (
	"context"
	"iter"
	"slices"
	"sync"
)

// PreparePartitions creates, on the caller's goroutine, the queues and
// partitions among names (queue, partition pairs) that the partition id
// cache does not hold, and caches their ids, with their next offsets as
// prediction guesses (projectPredicted), as the projector's own lookup
// would. The push route calls it before a push's WAL append
// (ingest.Pipeline.Prepare), so that a push naming many new queues or
// partitions creates them on its own time, beside the other producers'
// pushes, instead of in the projector's single serialized path, where
// every other producer's verdict waited behind the creation (a
// hostile-input probe, 2026-12-07: a client pushing 1,000 new queues per
// request in a loop took another client's push p50 from 4.6 to 123 ms;
// docs/decisions.md, "New queues are created before the WAL append").
//
// It is an optimization only, never needed for correctness: whatever it
// did not create (an error, ctx ending, the schema not applied yet) the
// projector creates as before, and an id it cached that a queue delete
// made stale is looked up again by the projector (Project's retry). It
// returns how many of its pairs were missing (0 when every pair was
// cached, or fewer than minMissing were: those it leaves to the
// projector) and ctx's or PostgreSQL's error.
//
// Concurrent calls are combined (prepareCombiner): at most prepareCreators
// creations run at once (each holds a pool connection for its
// statements), each for every call queued when it started; the others
// wait until ctx ends. The caller bounds ctx (a short timeout): with
// PostgreSQL slow or away the push goes on to the WAL and the projector.
func (s *Store) PreparePartitions(ctx context.Context, names iter.Seq2[string, string], minMissing int) (int, error) {
	// The distinct pairs first, without the lock: a push naming fewer
	// than minMissing of them (most pushes, whatever their length) cannot
	// miss that many, and takes no lock and no cache lookup.
	var keys []partKey
	seen := make(map[partKey]struct{})
	var last partKey
	first := true
	for q, p := range names {
		k := partKey{q, p}
		// The items of a push often come in runs of one partition.
		if !first && k == last {
			continue
		}
		first, last = false, k
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		keys = append(keys, k)
	}
	if len(keys) < minMissing {
		return 0, nil
	}
	var missQ, missP []string
	s.mu.Lock()
	if !s.schemaOK {
		s.mu.Unlock()
		return 0, nil
	}
	for _, k := range keys {
		if _, ok := s.partIDs.get(k); ok {
			continue
		}
		missQ = append(missQ, k.queue)
		missP = append(missP, k.partition)
	}
	s.mu.Unlock()
	if len(missQ) == 0 || len(missQ) < minMissing {
		return 0, nil
	}
	return s.prepare.create(ctx, s, &prepareWaiter{queues: missQ, partitions: missP, done: make(chan struct{})})
}

// prepareMaxPairs bounds the pairs one combined creation takes (it takes
// at least one push's, however many).
const prepareMaxPairs = 10_000

// prepareWaiter is one PreparePartitions call's missing pairs, waiting to
// be created; done is closed once a creator has tried (err its outcome).
type prepareWaiter struct {
	queues, partitions []string
	done               chan struct{}
	err                error
}

// prepareCombiner combines the creations of concurrent PreparePartitions
// calls: a call queues its pairs and waits for a turn (Store.prepareTurns)
// or for another call to have created them; a call that gets a turn takes
// every queued call's pairs (up to prepareMaxPairs) and creates them in
// one short transaction, as the projector did for a batch of pushes, so
// that many pushes of a few new partitions each (queen-bench
// push-16x100-p1M-new: 100 new partitions per push) cost about what they
// did in the projector, not one transaction each. Every queued call's
// goroutine keeps trying for a turn until it is served, so none is left
// behind.
type prepareCombiner struct {
	mu      sync.Mutex
	pending []*prepareWaiter
}

// create queues w and returns once w's pairs were created (by this call
// or another), or ctx ended: the number of w's pairs and the error.
func (c *prepareCombiner) create(ctx context.Context, s *Store, w *prepareWaiter) (int, error) {
	c.mu.Lock()
	c.pending = append(c.pending, w)
	c.mu.Unlock()
	for {
		select {
		case <-w.done:
			if w.err != nil {
				return 0, w.err
			}
			return len(w.queues), nil
		case s.prepareTurns <- struct{}{}:
			if batch := c.take(); len(batch) > 0 {
				c.serve(ctx, s, batch)
			}
			<-s.prepareTurns
			c.mu.Lock()
			queued := slices.Contains(c.pending, w)
			c.mu.Unlock()
			if !queued {
				// Served, by this call or by another that took w and
				// is still running: its done comes (trying for turns
				// meanwhile would only spin).
				<-w.done
			}
		case <-ctx.Done():
			c.mu.Lock()
			if i := slices.Index(c.pending, w); i >= 0 {
				c.pending = slices.Delete(c.pending, i, i+1)
				c.mu.Unlock()
				return 0, ctx.Err()
			}
			c.mu.Unlock()
			// Taken by a creator already: its outcome comes soon.
			<-w.done
			if w.err != nil {
				return 0, w.err
			}
			return len(w.queues), nil
		}
	}
}

// take removes and returns the queued waiters, at least one (if any) and
// no more than prepareMaxPairs pairs beyond the first.
func (c *prepareCombiner) take() []*prepareWaiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, pairs := 0, 0
	for n < len(c.pending) && (n == 0 || pairs+len(c.pending[n].queues) <= prepareMaxPairs) {
		pairs += len(c.pending[n].queues)
		n++
	}
	batch := slices.Clone(c.pending[:n])
	c.pending = slices.Delete(c.pending, 0, n)
	return batch
}

// serve creates the pairs of batch in one transaction, caches their ids
// and guesses, and closes every waiter's done.
func (c *prepareCombiner) serve(ctx context.Context, s *Store, batch []*prepareWaiter) {
	var qs, ps []string
	seen := make(map[partKey]struct{})
	for _, w := range batch {
		for i := range w.queues {
			k := partKey{w.queues[i], w.partitions[i]}
			if _, ok := seen[k]; !ok {
				seen[k] = struct{}{}
				qs, ps = append(qs, k.queue), append(ps, k.partition)
			}
		}
	}
	found, err := s.ensurePartitions(ctx, nil, qs, ps)
	if err == nil {
		s.mu.Lock()
		s.guessLookedUp(found)
		// Cached under the scanned names: the callers' strings may alias
		// request bodies that are reused once the pushes return.
		for k, st := range found {
			s.partIDs.put(k, st.id)
		}
		s.mu.Unlock()
	}
	for _, w := range batch {
		w.err = err
		close(w.done)
	}
}

// prepareCreators is how many combined creations run at once: one, so
// that pushes naming new queues hold at most one of the pool's
// connections (the projector and pops need the others), and concurrent
// pushes' pairs are created together.
const prepareCreators = 1
