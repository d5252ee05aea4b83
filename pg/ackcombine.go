package pg

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Whole-lease acks served together.
//
// A whole-lease ack (fastAck) is one small statement; what it costs
// PostgreSQL is mostly its transaction: the round trip and the commit. So
// concurrent whole-lease acks of one queue share one, as concurrent pops
// do (pg/popcombine.go): while one such transaction of the queue runs,
// further whole-lease acks of it queue, and when it ends the next
// transaction takes every queued one (up to ackCombineMax): BEGIN, a
// lock timeout (ackCombineLockTimeout: a cursor row held by a slow
// transaction must not hold up the acks of other clients; the
// transaction then fails and every call runs by itself; the ack in
// flight that the others queue behind has it too, see fastAckAlone), their
// fastAckSQL statements in
// (partition, group) order (the order the general path locks cursors in,
// so that two transactions never wait on each other in a cycle), and
// COMMIT, in one round trip. Each ack call is answered after that commit,
// so an ack is durable when answered, as before. A statement that
// changed nothing (the cursor row no longer as its pop left it) leaves
// its ack call to the general path, run by that call itself; a failed
// transaction leaves every call to run by itself. Queued acks may instead
// be taken by a leased pop transaction of the queue (takeQueuedAcks,
// pg/popcombine.go's serveLeasedWith), with the same statement, before
// its claims and under its one COMMIT; an ack that would run alone while
// such a pop transaction is in flight waits for it (fastAckBehindPop).

// ackCombineMax is the most ack calls one combined transaction serves.
const ackCombineMax = 16

// ackCombineLockTimeout bounds each lock wait of a combined ack
// transaction (SET LOCAL lock_timeout).
const ackCombineLockTimeout = "200ms"

type ackWaiter struct {
	reqs []AckRequest
	e    *leaseMemoEntry
	// deadline is the call's context's (zero: none); see combinedContext.
	deadline time.Time
	done     chan struct{}
	// applied: the statement completed the lease (res are the answers);
	// alone: the call runs fastAckAlone itself (the transaction failed).
	applied, alone bool
	taken          bool // picked up by a leader (under ackCombiner.mu)
}

type ackLine struct {
	inFlight bool
	queued   []*ackWaiter
}

// drop takes w out of l's queue, where it is still waiting (not taken);
// the caller holds ackCombiner.mu.
func (l *ackLine) drop(w *ackWaiter) {
	if i := slices.Index(l.queued, w); i >= 0 {
		l.queued = slices.Delete(l.queued, i, i+1)
	}
}

// ackOutcome is the answer of the ack call w once a transaction that took
// it has ended (w.done closed): its results when the statement completed
// its lease, its own fastAckAlone when the transaction failed, else
// (nil, false, nil): the call takes the general path.
func (s *Store) ackOutcome(ctx context.Context, w *ackWaiter) ([]AckResult, bool, error) {
	switch {
	case w.alone:
		return s.fastAckAlone(ctx, w.reqs, w.e)
	case w.applied:
		return fastAckResults(w.e, len(w.reqs)), true, nil
	}
	return nil, false, nil
}

// ackCombiner holds the queued whole-lease acks per queue name.
type ackCombiner struct {
	mu    sync.Mutex
	lines map[string]*ackLine
	// served counts the ack calls combined transactions applied (tests).
	served atomic.Int64
}

// fastAckCombined applies the whole-lease ack reqs (memo entry e) alone
// when no whole-lease ack transaction runs, else queued for the next one;
// it returns what fastAck returns.
func (s *Store) fastAckCombined(ctx context.Context, reqs []AckRequest, e *leaseMemoEntry) ([]AckResult, bool, error) {
	c := &s.ackCombine
	c.mu.Lock()
	if c.lines == nil {
		c.lines = make(map[string]*ackLine)
	}
	line := c.lines[e.queueName]
	if line == nil {
		line = &ackLine{}
		c.lines[e.queueName] = line
	}
	if !line.inFlight {
		line.inFlight = true
		if busy := s.combine.leasedBusy(e.queueName); busy != nil {
			c.mu.Unlock()
			return s.fastAckBehindPop(ctx, reqs, e, line, busy)
		}
		c.mu.Unlock()
		res, ok, err := s.fastAckAlone(ctx, reqs, e)
		go s.serveQueuedAcks(e.queueName)
		return res, ok, err
	}
	w := &ackWaiter{reqs: reqs, e: e, done: make(chan struct{})}
	w.deadline, _ = ctx.Deadline()
	line.queued = append(line.queued, w)
	c.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		c.mu.Lock()
		if !w.taken {
			line.drop(w)
			c.mu.Unlock()
			return nil, false, ctx.Err()
		}
		c.mu.Unlock()
		<-w.done // in a transaction already: its outcome decides
	}
	return s.ackOutcome(ctx, w)
}

// ackBehindPopWait is the longest a whole-lease ack that leads its
// queue's ack line waits, queued, for a leased pop transaction of the
// queue to take it (fastAckBehindPop): about one pop transaction on a
// loaded machine.
const ackBehindPopWait = 2 * time.Millisecond

// fastAckBehindPop is fastAckCombined for the call that leads line (no
// ack transaction of the queue in flight) while leased pop transactions
// of the queue run (busy is closed once none does): it queues on line,
// where the next leased pop transaction takes it with the others queued
// meanwhile (serveLeasedWith: one commit for acks and claims), and
// applies them itself (fastAckAlone, then the queued ones, as the line's
// leader does) if none has taken it once busy is closed or after
// ackBehindPopWait.
func (s *Store) fastAckBehindPop(ctx context.Context, reqs []AckRequest, e *leaseMemoEntry, line *ackLine, busy <-chan struct{}) ([]AckResult, bool, error) {
	c := &s.ackCombine
	w := &ackWaiter{reqs: reqs, e: e, done: make(chan struct{})}
	w.deadline, _ = ctx.Deadline()
	c.mu.Lock()
	line.queued = append(line.queued, w)
	c.mu.Unlock()
	t := time.NewTimer(ackBehindPopWait)
	defer t.Stop()
	var cerr error
	select {
	case <-w.done:
	case <-busy:
	case <-t.C:
	case <-ctx.Done():
		cerr = ctx.Err()
	}
	c.mu.Lock()
	taken := w.taken
	if !taken {
		line.drop(w)
	}
	c.mu.Unlock()
	// This call still leads the line: the queued calls are served after
	// it (serveQueuedAcks, which also ends the lead).
	defer func() { go s.serveQueuedAcks(e.queueName) }()
	switch {
	case !taken && cerr != nil:
		return nil, false, cerr
	case !taken:
		return s.fastAckAlone(ctx, reqs, e)
	}
	<-w.done
	return s.ackOutcome(ctx, w)
}

// serveQueuedAcks serves the queued whole-lease acks of queue, up to
// ackCombineMax per transaction, until none is queued; then no such
// transaction of the queue is in flight.
func (s *Store) serveQueuedAcks(queue string) {
	c := &s.ackCombine
	for {
		c.mu.Lock()
		line := c.lines[queue]
		if len(line.queued) == 0 {
			delete(c.lines, queue)
			c.mu.Unlock()
			return
		}
		n := min(len(line.queued), ackCombineMax)
		ws := append([]*ackWaiter(nil), line.queued[:n]...)
		line.queued = append(line.queued[:0], line.queued[n:]...)
		for _, w := range ws {
			w.taken = true
		}
		c.mu.Unlock()
		s.serveAcks(ws)
	}
}

// serveAcks applies ws in one transaction (see above) and completes them.
func (s *Store) serveAcks(ws []*ackWaiter) {
	if len(ws) == 1 {
		ws[0].alone = true
		close(ws[0].done)
		return
	}
	sortAckWaiters(ws)
	deadlines := make([]time.Time, len(ws))
	for i, w := range ws {
		deadlines[i] = w.deadline
	}
	ctx, cancel := combinedContext(deadlines)
	defer cancel()
	counts, err := s.fastAcksTx(ctx, ws)
	s.completeAcks(ws, counts, err)
}

// sortAckWaiters puts ws in (partition, group) order, the order their
// cursors are locked in (see above).
func sortAckWaiters(ws []*ackWaiter) {
	slices.SortFunc(ws, func(x, y *ackWaiter) int {
		if c := bytes.Compare(x.e.key.partition[:], y.e.key.partition[:]); c != 0 {
			return c
		}
		return strings.Compare(x.e.group, y.e.group)
	})
}

// takeQueuedAcks takes up to max whole-lease acks queued on queue's line
// (marked taken, out of the line) for a combined pop transaction to apply
// before its claims (serveLeased), in (partition, group) order; nil when
// none is queued. The caller completes them with completeAcks.
func (s *Store) takeQueuedAcks(queue string, max int) []*ackWaiter {
	c := &s.ackCombine
	c.mu.Lock()
	defer c.mu.Unlock()
	line := c.lines[queue]
	if line == nil || len(line.queued) == 0 {
		return nil
	}
	n := min(len(line.queued), max)
	ws := append([]*ackWaiter(nil), line.queued[:n]...)
	line.queued = append(line.queued[:0], line.queued[n:]...)
	for _, w := range ws {
		w.taken = true
	}
	sortAckWaiters(ws)
	return ws
}

// completeAcks completes the ack calls ws after their transaction: with
// err every call runs by itself; else counts[i] says whether ws[i]'s
// lease was completed (0: its call takes the general path).
func (s *Store) completeAcks(ws []*ackWaiter, counts []int, err error) {
	for i, w := range ws {
		switch {
		case err != nil:
			w.alone = true
		default:
			s.leases.forget(w.e.key.partition, w.e.key.lease)
			if counts[i] > 0 {
				s.leases.applied.Add(1)
				s.ackCombine.served.Add(1)
				w.applied = true
			}
		}
		close(w.done)
	}
	if err != nil {
		s.log.Debug("ack: combined whole-lease acks failed; they run one by one", "err", err)
	}
}

// fastAcksSQL is fastAckSQL for several whole leases in one statement:
// element i of the arrays ($1 partitions, $2 groups, $3 first and $4 last
// offsets, $5 lease ids) is one lease, with the conditions and effects
// fastAckSQL has for it; $6 and $7 are the NOTIFY channel and queue name
// (combined acks are of one queue). It returns the ordinal (1-based) of
// each element it applied. The cursors are locked one element after the
// other in array order (a LATERAL probe per element, FOR UPDATE), so the
// caller's (partition, group) order is the locking order, as it is with
// one statement per lease; a cursor row another transaction holds stops
// the statement there until lock_timeout. One statement instead of one
// per lease: measured on the development machine, most of a fastAckSQL
// call's PostgreSQL CPU is per statement (executor start-up and the
// protocol), not per cursor.
var fastAcksSQL = `WITH k AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::bigint[], $5::uuid[])
		WITH ORDINALITY AS k(pid, grp, first, last, lease, ord)
), locked AS (
	SELECT k.ord, k.pid, k.grp, k.first, k.last
	FROM k CROSS JOIN LATERAL (
		SELECT 1 FROM queen.consumer_cursors c
		WHERE c.partition_id = k.pid AND c.consumer_group = k.grp AND c.lease_id = k.lease
			AND c.lease_expires_at > now() AND c.cursor_offset = k.first AND c.lease_end = k.last AND c.acked = '{}'
			AND NOT EXISTS (SELECT 1 FROM queen.tombstones t WHERE t.partition_id = k.pid
				AND t.msg_offset BETWEEN k.first AND k.last)
			AND ` + offsetStoredSQL("k.pid", "k.first") + `
			AND ` + offsetStoredSQL("k.pid", "k.last") + `
		FOR UPDATE OF c) c
), u AS (
	UPDATE queen.consumer_cursors c SET cursor_offset = l.last + 1, retry_count = 0, lease_id = NULL,
		lease_expires_at = NULL, lease_end = NULL, acked = '{}', last_consumed_at = now(),
		total_consumed = c.total_consumed + (l.last - l.first + 1)
	FROM locked l
	WHERE c.partition_id = l.pid AND c.consumer_group = l.grp
	RETURNING l.ord
)
SELECT u.ord FROM u, LATERAL (SELECT pg_notify($6, $7)) n`

// queueFastAcks queues fastAcksSQL for the leases of ws (one queue) on b.
func queueFastAcks(b *pgx.Batch, ws []*ackWaiter) {
	n := len(ws)
	pids, groups := make([]pgtype.UUID, n), make([]string, n)
	firsts, lasts := make([]int64, n), make([]int64, n)
	leases := make([]pgtype.UUID, n)
	for i, w := range ws {
		e := w.e
		pids[i], groups[i] = pgtype.UUID{Bytes: e.key.partition, Valid: true}, e.group
		firsts[i], lasts[i] = e.first, e.last
		leases[i] = pgtype.UUID{Bytes: e.key.lease, Valid: true}
	}
	b.Queue(fastAcksSQL, pids, groups, firsts, lasts, leases, NotifyChannel, ws[0].e.queueName)
}

// fastAcksSetup is sent before fastAcksSQL in its transaction: the lock
// timeout of combined acks, and the statement's generic plan (planned
// once per connection; the planner would otherwise plan it afresh for
// each call, arrays being unknown in size to a generic plan's estimate:
// the LATERAL probes make both plans index lookups per element).
const fastAcksSetup = "SELECT set_config('lock_timeout', '" + ackCombineLockTimeout + "', true), " +
	"set_config('plan_cache_mode', 'force_generic_plan', true)"

// fastAcksTx sends BEGIN, the lock timeout, fastAcksSQL for every waiter
// and COMMIT in one round trip and returns each waiter's count (1 applied,
// 0 not).
func (s *Store) fastAcksTx(ctx context.Context, ws []*ackWaiter) ([]int, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// A connection released inside a transaction (an error below) is
	// closed by the pool, which rolls the transaction back.
	defer pc.Release()
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue(fastAcksSetup)
	queueFastAcks(&b, ws)
	b.Queue("COMMIT")
	br := pc.Conn().SendBatch(ctx, &b)
	counts := make([]int, len(ws))
	if _, err = br.Exec(); err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = readFastAcks(br, counts)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if st := pc.Conn().PgConn().TxStatus(); err == nil && st != 'I' {
		err = fmt.Errorf("commit did not end the transaction (status %q)", st)
	}
	return counts, err
}

// readFastAcks reads the result of fastAcksSQL from br into counts (one
// per lease of the statement, in its order: 1 applied, 0 not).
func readFastAcks(br pgx.BatchResults, counts []int) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	var ord int64
	_, err = pgx.ForEachRow(rows, []any{&ord}, func() error {
		if ord < 1 || ord > int64(len(counts)) {
			return fmt.Errorf("fast acks: ordinal %d of %d", ord, len(counts))
		}
		counts[ord-1] = 1
		return nil
	})
	return err
}
