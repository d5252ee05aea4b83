package pg

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pop combining.
//
// Most of what a wildcard pop of one partition costs PostgreSQL does not
// grow with its batch: the claim statement's setup, the round trips, the
// commit (measured on the development machine: the claim of 5 partitions
// × 100 messages takes 1.5 times the backend CPU of the claim of 1 × 100).
// So concurrent such pops are served together, as group commit serves
// concurrent writes: a pop that finds popCombineInFlight transactions of
// its key running queues, and when one ends, the pop that ran it takes
// the queued pops (as many as takeCombined picks) into one transaction.
// Nothing waits for company: a pop with no transaction of its key running
// runs alone at once, and a queued pop waits only for a transaction
// already running, popCombineHandoff at most, and never past its own
// deadline (combinedContext). Each pop still receives a contiguous run of
// one partition, in order, at most its batch; the rules per partition are
// a single pop's.
//
//   - autoAck pops of one (queue, batch), any groups: per consumer group
//     among them, one claimOneSQL claims one partition
//     per pop ($4 partitions of up to one batch each, the clean cursors
//     moved in the statement); with several groups the claims are sent
//     after BEGIN in one round trip (serveAutoAckGroups); the messages
//     are decoded, then COMMIT (the cursor moves cannot be given back,
//     see claimOneSQL), one commit for every group's pops.
//   - leased pops of one (queue, batch), any groups: BEGIN, each pop's
//     claimOneSQL under a lease of its own, and COMMIT in one round trip
//     (serveLeased), then each pop decodes as popOneTrip does. The
//     whole-lease acks of the queue queued at that moment go into the
//     same transaction, before the claims (serveLeasedWith); an ack that
//     arrives while a leased pop transaction runs queues for the next
//     one (fastAckBehindPop).
//
// A pop the combined transaction delivered nothing to (fewer partitions
// had something than pops were taken, some were being claimed by other
// pops, or, leased, its cursor needs the general rules) runs again alone,
// so that it waits for a busy partition instead of answering empty while
// messages are waiting; so does every pop of a transaction that failed.

// popCombineMax is the most pops one combined transaction serves, at most
// popCombineGroupMax of them of one consumer group, and more than
// popCombineGroupMax only when popCombineMax pops of their batch hold at
// most popCombineMessages messages (takeCombined). Measured with 50 consumers
// of 5 groups draining 10 partitions (batch 100, autoAck), 4 alternated
// pairs of at most 8 against at most 16 (no group share): 1.4-1.6 µs of
// PostgreSQL CPU per delivery against 1.7-1.9, 12-27% more deliveries a
// second; the rule kept, against 8, 3 pairs: 3-36% more deliveries a
// second, PostgreSQL CPU lower in 2. With 10 consumers of one group, 16
// pops a transaction (all of them, claiming every partition at once) was
// level or lower, so one group's share stays 8 (docs/decisions.md,
// "Sixteen pops a combined transaction").
const (
	popCombineMax      = 16
	popCombineGroupMax = 8
	popCombineMessages = 16000
)

// takeCombined picks, in queue order, the pops queued (all of one key, so
// of one batch size) that the next combined transaction serves: at most
// popCombineMax, at most popCombineGroupMax of one consumer group, and at
// most popCombineGroupMax in all when popCombineMax pops of their batch
// would hold over popCombineMessages messages (a batch over 1,000). A
// pop skipped for its group's share keeps its place at the head of what
// is left.
func takeCombined(queued []*popWaiter) (taken, left []*popWaiter) {
	limit := popCombineMax
	if len(queued) > 0 && queued[0].req.Batch > popCombineMessages/popCombineMax {
		limit = popCombineGroupMax
	}
	perGroup := make(map[string]int, 8)
	for _, w := range queued {
		if len(taken) < limit && perGroup[w.req.Group] < popCombineGroupMax {
			perGroup[w.req.Group]++
			taken = append(taken, w)
			continue
		}
		left = append(left, w)
	}
	return taken, left
}

// popCombineInFlight is how many transactions of one key run at once
// before further pops of the key queue. One: measured with 10 consumers
// draining 10 partitions (batch 100), one transaction in flight took
// 4–5 µs of PostgreSQL CPU per delivery against 8–9 µs with two (bigger
// combined pops), at a higher rate.
const popCombineInFlight = 1

// popKey is what combined pops share: the queue and batch, and whether
// they are leased. Leased pops each have a claim statement of their own,
// with their own group and lease; autoAck pops share one claim statement
// per consumer group among them (serveBatch, byGroup). Pops of one group
// that ask for different subscriptions share it too: a subscription is
// recorded only by a group's first pop (the claim leaves that pop to the
// general path), and concurrent first pops of a new group were always
// a race for whose subscription is recorded.
type popKey struct {
	leased   bool
	queue    string
	batch    int
	maxBytes int64
}

// popWaiter is one queued pop: done is closed once res/err are set or
// alone is (the pop runs by itself).
type popWaiter struct {
	req PopRequest
	// deadline is the pop's context's (zero: none); see combinedContext.
	deadline time.Time
	done     chan struct{}
	res      *PopResult
	err      error
	alone    bool
	taken    bool // picked up by a leader (under popCombiner.mu)
}

type popLine struct {
	inFlight int
	queued   []*popWaiter
}

// popCombiner holds the queued autoAck pops per key.
type popCombiner struct {
	mu    sync.Mutex
	lines map[popKey]*popLine
	// served counts the pops served by combined transactions (tests).
	served atomic.Int64
	// servedGroups counts the autoAck pops served by combined
	// transactions of several consumer groups (serveAutoAckGroups; tests).
	servedGroups atomic.Int64
	// busy is, per queue name, its leased pop transactions in flight
	// (enterLeased, leaveLeased; see fastAckBehindPop).
	busy map[string]*queueBusy
}

// queueBusy counts a queue's leased pop transactions in flight; idle,
// when not nil, is closed once there are none.
type queueBusy struct {
	n    int
	idle chan struct{}
}

// enterLeased counts a leased pop transaction of queue as in flight until
// the matching leaveLeased.
func (c *popCombiner) enterLeased(queue string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy == nil {
		c.busy = make(map[string]*queueBusy)
	}
	b := c.busy[queue]
	if b == nil {
		b = &queueBusy{}
		c.busy[queue] = b
	}
	b.n++
}

// leaveLeased ends what enterLeased(queue) began.
func (c *popCombiner) leaveLeased(queue string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.busy[queue]
	if b.n--; b.n == 0 {
		if b.idle != nil {
			close(b.idle)
		}
		delete(c.busy, queue)
	}
}

// leasedBusy is nil when no leased pop transaction of queue is in flight,
// else a channel closed once none is.
func (c *popCombiner) leasedBusy(queue string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.busy[queue]
	if b == nil {
		return nil
	}
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	return b.idle
}

func combinable(req PopRequest) bool {
	return req.Partition == "" && req.Partitions == 1
}

func keyOf(req PopRequest) popKey {
	return popKey{leased: !req.AutoAck, queue: req.Queue, batch: req.Batch, maxBytes: req.MaxBytes}
}

// byGroup splits autoAck pops ws into runs of one consumer group each, in
// the order each group first appears (a pop keeps its place within its
// group's run). One claim statement serves a run: two statements for one
// group in one transaction would hand it the same partition twice (a
// transaction's own row locks do not make SKIP LOCKED skip them).
func byGroup(ws []*popWaiter) [][]*popWaiter {
	var out [][]*popWaiter
next:
	for _, w := range ws {
		for i, run := range out {
			if run[0].req.Group == w.req.Group {
				out[i] = append(run, w)
				continue next
			}
		}
		out = append(out, []*popWaiter{w})
	}
	return out
}

// combinedRequest is the one claim of autoAck pops ws of one group: one
// partition per pop, each up to the pops' batch.
func combinedRequest(ws []*popWaiter) PopRequest {
	req := ws[0].req
	req.Partitions, req.perPartition, req.Batch = len(ws), req.Batch, req.Batch*len(ws)
	return req
}

// popCombined serves a combinable pop (see above): alone when fewer than
// popCombineInFlight transactions of its key run, else queued for the
// next one to finish. It returns what Pop returns.
func (s *Store) popCombined(ctx context.Context, req PopRequest) (*PopResult, error) {
	c := &s.combine
	key := keyOf(req)
	c.mu.Lock()
	if c.lines == nil {
		c.lines = make(map[popKey]*popLine)
	}
	line := c.lines[key]
	if line == nil {
		line = &popLine{}
		c.lines[key] = line
	}
	if line.inFlight < popCombineInFlight {
		line.inFlight++
		c.mu.Unlock()
		// Serve what queued meanwhile without holding up this pop's
		// answer, once it has ended or run popCombineHandoff.
		ended := make(chan struct{})
		go func() {
			untilHandoff(ended)
			s.serveQueued(key)
		}()
		res, err := s.popLeader(ctx, req, key)
		close(ended)
		return res, err
	}
	w := &popWaiter{req: req, done: make(chan struct{})}
	w.deadline, _ = ctx.Deadline()
	line.queued = append(line.queued, w)
	c.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		c.mu.Lock()
		if !w.taken {
			// Not picked up: leave the line; nothing was claimed for it.
			line.queued = removeWaiter(line.queued, w)
			c.mu.Unlock()
			return nil, ctx.Err()
		}
		c.mu.Unlock()
		<-w.done // claimed for it already: its result is on the way
	}
	if w.alone {
		return s.popAlone(ctx, req)
	}
	return w.res, w.err
}

// popLeader runs the pop that leads its key's line: a leased pop with
// whole-lease acks of its queue queued takes them into its transaction
// (serveLeasedWith); otherwise, or when that transaction delivered
// nothing to it or failed, popAlone.
func (s *Store) popLeader(ctx context.Context, req PopRequest, key popKey) (*PopResult, error) {
	if key.leased {
		if acks := s.takeQueuedAcks(req.Queue, ackCombineMax); len(acks) > 0 {
			w := &popWaiter{req: req, done: make(chan struct{})}
			w.deadline, _ = ctx.Deadline()
			s.serveLeasedWith([]*popWaiter{w}, acks)
			<-w.done
			if !w.alone {
				return w.res, w.err
			}
		}
	}
	return s.popAlone(ctx, req)
}

// finish completes w: with res or err, or (both nil) telling it to run
// by itself.
func (w *popWaiter) finish(res *PopResult, err error) {
	w.res, w.err, w.alone = res, err, res == nil && err == nil
	close(w.done)
}

func removeWaiter(q []*popWaiter, w *popWaiter) []*popWaiter {
	for i, x := range q {
		if x == w {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}

// serveQueued is called for a pop of key that has finished its own
// transaction (or run popCombineHandoff): while pops of key are queued,
// it takes what takeCombined picks of them and serves them in one
// transaction, the next batch once that has ended or run
// popCombineHandoff; then it leaves the line (one transaction of key
// fewer in flight; one that outlived popCombineHandoff is no longer
// counted).
func (s *Store) serveQueued(key popKey) {
	c := &s.combine
	for {
		c.mu.Lock()
		line := c.lines[key]
		if len(line.queued) == 0 {
			line.inFlight--
			if line.inFlight == 0 {
				delete(c.lines, key)
			}
			c.mu.Unlock()
			return
		}
		batch, left := takeCombined(line.queued)
		line.queued = append(line.queued[:0], left...)
		for _, w := range batch {
			w.taken = true
		}
		c.mu.Unlock()
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			s.serveBatch(batch)
		}()
		untilHandoff(ended)
	}
}

// popCombineHandoff is how long a transaction of a key may run before the
// pops queued behind it are served without waiting for it: a pop waiting
// for a busy partition's cursor (every candidate locked, see popTx) or
// for a slow PostgreSQL must not hold up the pops of its key that other
// partitions could serve. Far longer than a pop's transaction takes
// normally (milliseconds), so it does not change what is combined.
const popCombineHandoff = 200 * time.Millisecond

// untilHandoff returns once ended is closed or popCombineHandoff has
// passed.
func untilHandoff(ended <-chan struct{}) {
	t := time.NewTimer(popCombineHandoff)
	defer t.Stop()
	select {
	case <-ended:
	case <-t.C:
	}
}

// serveBatch runs one combined pop for ws (len >= 1) and completes each
// waiter: with one partition's messages, or alone (run by itself) when
// the combined pop had none left for it or failed.
func (s *Store) serveBatch(ws []*popWaiter) {
	if !ws[0].req.AutoAck {
		s.serveLeased(ws)
		return
	}
	if len(ws) == 1 {
		ws[0].finish(nil, nil)
		return
	}
	if groups := byGroup(ws); len(groups) > 1 {
		s.serveAutoAckGroups(groups)
		return
	}
	finish := func(w *popWaiter, res *PopResult) { w.finish(res, nil) }
	req := combinedRequest(ws)
	ctx, cancel := combinedContext(popDeadlines(ws))
	defer cancel()
	res, err := s.popAlone(ctx, req)
	if err != nil {
		s.log.Debug("pop: combined pop failed; its pops run one by one", "err", err)
		for _, w := range ws {
			finish(w, nil)
		}
		return
	}
	msgs := res.Messages
	for i, w := range ws {
		if i >= len(res.Claimed) {
			finish(w, nil)
			continue
		}
		n := 0
		for n < len(msgs) && msgs[n].PartitionID == res.Claimed[i].ID {
			n++
		}
		s.combine.served.Add(1)
		finish(w, &PopResult{Messages: msgs[:n:n], Claimed: res.Claimed[i : i+1 : i+1]})
		msgs = msgs[n:]
	}
}

// popCombineTimeout bounds a combined pop's or ack's transaction.
const popCombineTimeout = 30 * time.Second

// combinedContext is the context of a combined transaction serving calls
// whose contexts end at deadlines (zero: no deadline): it ends at the
// earliest of them, popCombineTimeout from now at the latest, and is not
// cancelled by a caller leaving. A call taken into the transaction waits
// for its outcome, so the transaction must not run past any of their
// deadlines (an HTTP pop's or ack's database timeout, a long-poll's
// timeout): should PostgreSQL not answer, every call is then answered by
// its own deadline, as a call alone is. A transaction cut short this way
// failed, and each call runs by itself under its own context.
func combinedContext(deadlines []time.Time) (context.Context, context.CancelFunc) {
	end := time.Now().Add(popCombineTimeout)
	for _, d := range deadlines {
		if !d.IsZero() && d.Before(end) {
			end = d
		}
	}
	return context.WithDeadline(context.Background(), end)
}

func popDeadlines(ws []*popWaiter) []time.Time {
	out := make([]time.Time, len(ws))
	for i, w := range ws {
		out[i] = w.deadline
	}
	return out
}

// serveLeased serves leased pops ws (len >= 1) in one transaction and one
// round trip, with the whole-lease acks queued on their queue
// (serveLeasedWith): BEGIN, each pop's claimOneSQL with a lease of its
// own, and COMMIT, sent together; then, as popOneTrip does, each pop whose claim
// wrote its cursor decodes its messages (its lease given back if they do
// not decode), and the others, whose claims changed nothing, run by
// themselves. Two pops of one group claim different partitions: the
// second claim sees the first one's lease. Should the transaction fail,
// its leases are given back and every pop runs by itself.
func (s *Store) serveLeased(ws []*popWaiter) {
	s.serveLeasedWith(ws, s.takeQueuedAcks(ws[0].req.Queue, ackCombineMax))
}

// serveLeasedWith is serveLeased (ws len >= 1) whose transaction first
// applies the whole-lease acks acks (of the same queue, in (partition,
// group) order, taken from the ack line: takeQueuedAcks), as a combined
// ack transaction would, and completes them (completeAcks): a pop and an
// ack cycle's two commits become one when they arrive together. The acks
// come before the claims, so that a partition one of them releases can be
// claimed by these pops. Should the transaction fail, every ack and every
// pop runs by itself.
func (s *Store) serveLeasedWith(ws []*popWaiter, acks []*ackWaiter) {
	deadlines := popDeadlines(ws)
	for _, a := range acks {
		deadlines = append(deadlines, a.deadline)
	}
	ctx, cancel := combinedContext(deadlines)
	defer cancel()
	s.combine.enterLeased(ws[0].req.Queue)
	defer s.combine.leaveLeased(ws[0].req.Queue)
	leases := make([]uuid.UUID, len(ws)) // seeds (pg/leasekey.go)
	for i := range ws {
		id, err := newLeaseSeed(false)
		if err != nil {
			for _, w := range ws {
				w.finish(nil, nil)
			}
			s.completeAcks(acks, nil, err)
			return
		}
		leases[i] = id
	}
	claims, counts, conn, err := s.claimLeased(ctx, ws, leases, acks)
	s.completeAcks(acks, counts, err)
	if err != nil {
		s.log.Debug("pop: combined leased pop failed; its pops run one by one", "err", err)
		for _, w := range ws {
			w.finish(nil, nil)
		}
		if conn == nil {
			return
		}
		conn.Release()
		// The commit may have happened: no lease of these pops is to
		// stay. Given back after the pops were let go (they need not
		// wait for it), under a context of its own (ctx may be what
		// ended the transaction).
		rctx, rcancel := context.WithTimeout(context.Background(), popCombineTimeout)
		defer rcancel()
		for i, id := range leases {
			if _, rerr := s.releaseSeed(rctx, ws[i].req.Queue, ws[i].req.Group, id); rerr != nil {
				s.log.Warn("pop: could not give back the lease of a failed pop; it lapses by itself", "err", rerr)
			}
		}
		return
	}
	defer conn.Release()
	for i, w := range ws {
		res := &PopResult{LeaseID: leases[i], leaseSeed: leases[i]}
		done, err := s.deliverCommitted(ctx, conn.Conn(), w.req, res, claims[i])
		switch {
		case err != nil:
			w.finish(nil, fmt.Errorf("pg: pop: %w", err))
		case !done:
			w.finish(nil, nil)
		default:
			s.leases.rememberPop(res, w.req.Group, w.req.Queue, res.leaseSeconds)
			s.combine.served.Add(1)
			w.finish(res, nil)
		}
	}
}

// claimLeased sends BEGIN, the claims of ws under leases and COMMIT in
// one round trip and returns the claims, read after the commit. conn,
// when not nil, is to be released by the caller (closed by the pool if
// the transaction did not end).
func (s *Store) claimLeased(ctx context.Context, ws []*popWaiter, leases []uuid.UUID, acks []*ackWaiter) ([]*claimResult, []int, *pgxpool.Conn, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	var b pgx.Batch
	b.Queue("BEGIN")
	if len(acks) > 0 {
		b.Queue(fastAcksSetup)
		queueFastAcks(&b, acks)
	}
	for i, w := range ws {
		queueClaim(&b, w.req, leases[i])
	}
	b.Queue("COMMIT")
	br := pc.Conn().SendBatch(ctx, &b)
	claims := make([]*claimResult, len(ws))
	counts := make([]int, len(acks))
	_, err = br.Exec()
	if err == nil && len(acks) > 0 {
		if _, err = br.Exec(); err == nil {
			err = readFastAcks(br, counts)
		}
	}
	if err == nil {
		for i := range ws {
			var rows pgx.Rows
			if rows, err = br.Query(); err != nil {
				break
			}
			if claims[i], err = scanClaim(rows); err != nil {
				break
			}
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if st := pc.Conn().PgConn().TxStatus(); err == nil && st != 'I' {
		err = fmt.Errorf("commit did not end the transaction (status %q)", st)
	}
	return claims, counts, pc, err
}

// serveAutoAckGroups serves autoAck pops of one queue and batch that
// belong to several consumer groups (groups: one run of pops per group,
// byGroup, at least two runs) in one transaction, so that the groups
// of a fan-out share a commit instead of paying one each: BEGIN and one
// claimOneSQL per group ($4 = its pops, each up to the batch; the clean
// cursors moved in the statement) in one round trip, then every moved
// cursor's messages are decoded, and only then COMMIT (an autoAck cursor
// move cannot be given back: a segment that does not decode rolls the
// whole transaction back). Each moved cursor goes to one pop of its
// group, in claim order. The pops of a group whose claim wrote no cursor
// for them (a new group or partition, a lapsed lease, a deleted offset,
// every candidate locked: the cases claimOneSQL leaves to the general
// path, its transaction changing nothing for them), and every pop when
// the transaction fails, run by themselves (popAlone), as serveBatch's
// pops of one group do.
func (s *Store) serveAutoAckGroups(groups [][]*popWaiter) {
	var all []*popWaiter
	for _, g := range groups {
		all = append(all, g...)
	}
	alone := func(ws []*popWaiter) {
		for _, w := range ws {
			w.finish(nil, nil)
		}
	}
	ctx, cancel := combinedContext(popDeadlines(all))
	defer cancel()
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		s.log.Debug("pop: combined autoAck pop failed; its pops run one by one", "err", err)
		alone(all)
		return
	}
	conn := pc.Conn()
	claims, err := claimGroups(ctx, conn, groups)
	// delivered[g][i] is the answer of groups[g][i]; the pops of a group
	// past its answers run by themselves.
	delivered := make([][]*PopResult, len(groups))
	for gi := 0; err == nil && gi < len(groups); gi++ {
		ws, c := groups[gi], claims[gi]
		if c.q == nil || !c.fast {
			continue // nothing written for them: they run by themselves
		}
		msgs := growForClaimed(nil, c.cursors)
		for _, cc := range c.cursors {
			if !cc.updated || len(delivered[gi]) == len(ws) {
				continue
			}
			n := len(msgs)
			if msgs, err = s.deliverClaimed(msgs, c.q, cc.name, ws[0].req, uuid.Nil, cc); err != nil {
				break
			}
			delivered[gi] = append(delivered[gi], &PopResult{Messages: msgs[n:len(msgs):len(msgs)],
				Claimed: []ClaimedPartition{{cc.id, cc.name}}})
		}
	}
	if err == nil {
		var w pgx.Batch
		err = commitPop(ctx, conn, &w)
	}
	if err != nil {
		s.log.Debug("pop: combined autoAck pop failed; its pops run one by one", "err", err)
		// The pops run again by themselves only once this transaction's
		// cursor locks are gone: rolled back here (a connection released
		// inside a transaction is closed by the pool, which would roll it
		// back only once that close has gone through).
		if conn.PgConn().TxStatus() != 'I' {
			rctx, rcancel := context.WithTimeout(context.Background(), popCombineRollback)
			_, _ = conn.Exec(rctx, "ROLLBACK")
			rcancel()
		}
		pc.Release()
		alone(all)
		return
	}
	pc.Release()
	for gi, ws := range groups {
		for i, w := range ws {
			if i >= len(delivered[gi]) {
				w.finish(nil, nil)
				continue
			}
			s.combine.served.Add(1)
			s.combine.servedGroups.Add(1)
			w.finish(delivered[gi][i], nil)
		}
	}
}

// popCombineRollback bounds the ROLLBACK of a failed combined autoAck
// transaction (serveAutoAckGroups); past it the connection is closed,
// which rolls back as well.
const popCombineRollback = 5 * time.Second

// claimGroups begins a transaction on conn and runs one autoAck
// claimOneSQL per run of groups (each run's pops one partition each, up
// to their batch), in one round trip; it returns the claims in the order
// of groups. The transaction stays open.
func claimGroups(ctx context.Context, conn *pgx.Conn, groups [][]*popWaiter) ([]*claimResult, error) {
	var b pgx.Batch
	b.Queue("BEGIN")
	for _, ws := range groups {
		queueClaim(&b, combinedRequest(ws), uuid.Nil)
	}
	br := conn.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	claims := make([]*claimResult, len(groups))
	for i := range groups {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		if claims[i], err = scanClaim(rows); err != nil {
			return nil, err
		}
	}
	return claims, br.Close()
}
