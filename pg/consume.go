package pg

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/queenmq/queen-go/internal/textcut"
)

// QueueModeGroup is the consumer group of queue mode (competing consumers
// sharing one cursor), Queen's default group name.
const QueueModeGroup = "__QUEUE_MODE__"

// Subscription modes of a named consumer group (where it starts in a
// partition it has no cursor for).
const (
	SubscribeAll       = "all"       // from the first stored offset
	SubscribeNew       = "new"       // from the group's creation time
	SubscribeTimestamp = "timestamp" // from a given time
)

// DefaultLeaseSeconds is the lease of a queue whose leaseTime is 0.
const DefaultLeaseSeconds = 60

// PopRequest asks for messages of one queue for one consumer group.
type PopRequest struct {
	Queue string
	// Partition is the partition name, or "" for any partition.
	Partition string
	// Group is the consumer group (QueueModeGroup for queue mode).
	Group string
	// Batch is the most messages to return in total (>= 1).
	Batch int
	// Partitions is how many partitions a wildcard pop may claim (>= 1).
	Partitions int
	// AutoAck moves the cursor past what is delivered in the pop's own
	// transaction (at-most-once); no lease is taken.
	AutoAck bool
	// SubscriptionMode and SubscriptionFrom fix where a new named group
	// starts (SubscribeAll by default); ignored once the group exists.
	SubscriptionMode string
	SubscriptionFrom *time.Time
	// NewFrom, with SubscribeNew, is where a group this pop records starts
	// instead of now(): a waiting pop sets it to when it began waiting, so
	// that a group whose first pop waited on a queue that did not exist
	// yet is recorded from then, and receives the message whose push
	// created the queue and woke it (docs/consume.md, "Subscriptions").
	NewFrom *time.Time

	// MaxBytes bounds what the pop delivers, in bytes of the messages'
	// stored form; 0 takes the Store's (Config.MaxPopBytes). At least one
	// message is delivered however large (boundedTakeSQL).
	MaxBytes int64

	// perPartition, when > 0, caps what one partition delivers (a
	// combined pop: pg/popcombine.go); Batch caps the total.
	perPartition int
}

// PoppedMessage is one delivered message.
type PoppedMessage struct {
	StoredMessage
	LeaseID uuid.UUID // uuid.Nil for autoAck
}

// PopResult is what a pop delivered; Messages is empty when there was
// nothing to deliver (HTTP 204).
type PopResult struct {
	LeaseID  uuid.UUID
	Messages []PoppedMessage
	// Claimed are the partitions that delivered messages, in claim order.
	Claimed []ClaimedPartition
	// NextCheck, when not zero and nothing was delivered, is the earliest
	// time something held back becomes deliverable without any new event
	// (a lease lapses, a delayed message or a window buffer matures); a
	// waiting pop sleeps until then or until it is woken.
	NextCheck time.Time

	leaseSeconds int // the queue's lease time (for the lease memo)
	// leaseSeed is the lease id before the pop leased a cursor (a seed,
	// pg/leasekey.go); leaseBound says LeaseID is the seed bound to the
	// first cursor the pop leased.
	leaseSeed  uuid.UUID
	leaseBound bool
}

// leaseFor is the lease id the pop writes on a cursor row with lease key
// key: its seed bound to the first cursor it leases (pg/leasekey.go), the
// same id for every later one; uuid.Nil for an autoAck pop.
func (r *PopResult) leaseFor(key int64) uuid.UUID {
	if r.LeaseID == uuid.Nil {
		return uuid.Nil
	}
	if !r.leaseBound {
		r.LeaseID, r.leaseBound = bindLeaseID(r.leaseSeed, key), true
	}
	return r.LeaseID
}

// resetLease makes r hold its seed again (a pop run again from the start).
func (r *PopResult) resetLease() {
	r.LeaseID, r.leaseBound = r.leaseSeed, false
}

func (r *PopResult) checkAt(t time.Time) {
	if !t.IsZero() && (r.NextCheck.IsZero() || t.Before(r.NextCheck)) {
		r.NextCheck = t
	}
}

// ClaimedPartition names a partition a pop delivered from.
type ClaimedPartition struct {
	ID   uuid.UUID
	Name string
}

type queueRow struct {
	id                    uuid.UUID
	name                  string
	leaseTime, retryLimit int
	delayed, windowBuffer int
}

func (s *Store) queueByName(ctx context.Context, tx dbtx, name string) (*queueRow, error) {
	var q queueRow
	var id pgtype.UUID
	err := tx.QueryRow(ctx, `SELECT id, name, lease_time, retry_limit, delayed_processing, window_buffer
		FROM queen.queues WHERE name = $1`, name).
		Scan(&id, &q.name, &q.leaseTime, &q.retryLimit, &q.delayed, &q.windowBuffer)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	q.id = id.Bytes
	if q.leaseTime <= 0 {
		q.leaseTime = DefaultLeaseSeconds
	}
	return &q, nil
}

// Pop delivers up to req.Batch messages in exact offset order per
// partition, under one lease per (partition, group) (docs/consume.md, "The
// model: a cursor and a lease per (partition, consumer group)" and "Lease
// expiry, retries, dead letters"): a partition whose lease for the group is
// live delivers nothing; an expired lease counts as a failed delivery of the
// message at the cursor and, past the queue's retryLimit, sends it to the DLQ
// and moves the cursor past it.
func (s *Store) Pop(ctx context.Context, req PopRequest) (*PopResult, error) {
	if req.Batch < 1 {
		req.Batch = 1
	}
	if req.Partitions < 1 || req.Partition != "" {
		req.Partitions = 1
	}
	if req.MaxBytes <= 0 {
		req.MaxBytes = cmp.Or(s.maxPopBytes, DefaultMaxPopBytes)
	}
	req.perPartition = 0
	if combinable(req) {
		return s.popCombined(ctx, req)
	}
	return s.popAlone(ctx, req)
}

// popAlone is Pop in a transaction of its own (req normalized by Pop; a
// combined pop has perPartition set).
func (s *Store) popAlone(ctx context.Context, req PopRequest) (*PopResult, error) {
	res := &PopResult{}
	if !req.AutoAck {
		s.combine.enterLeased(req.Queue)
		defer s.combine.leaveLeased(req.Queue)
		seed, err := newLeaseSeed(req.Partitions > 1)
		if err != nil {
			return nil, err
		}
		res.LeaseID, res.leaseSeed = seed, seed
	}
	// A foreign-key violation means the queue was deleted while the pop
	// ran (its group or cursor insert met the deleted row): run again, and
	// the rerun finds no queue and delivers nothing, as a pop of an unknown
	// queue does.
	err := withRetry(true, func() error {
		res.Messages, res.Claimed, res.NextCheck = nil, nil, time.Time{}
		res.resetLease()
		return s.popTx(ctx, req, res)
	})
	if err != nil {
		return nil, fmt.Errorf("pg: pop: %w", err)
	}
	s.leases.rememberPop(res, req.Group, req.Queue, res.leaseSeconds)
	return res, nil
}

// popTx runs one pop's transaction on a connection of its own. A leased
// wildcard pop of one partition first tries popOneTrip (BEGIN, the claim
// that also writes the cursor, COMMIT: one round trip). Otherwise, or when
// that wrote nothing, a wildcard pop begins with claim (BEGIN and
// claimOneSQL or claimSQL, one round trip) and, in the common case, ends
// with its cursor writes, if the claim did not do them, and COMMIT (a
// second); the general path (a named partition, or the cases the claim
// leaves to it) runs its statements one by one in the same transaction
// and ends the same way.
func (s *Store) popTx(ctx context.Context, req PopRequest, res *PopResult) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection released inside a transaction (any error below) is
	// closed by the pool, which rolls the transaction back.
	defer pc.Release()
	tx := pc.Conn()
	if req.Partition == "" && req.Partitions == 1 && !req.AutoAck {
		if done, err := s.popOneTrip(ctx, tx, req, res); err != nil || done {
			return err
		}
		res.Messages, res.Claimed = nil, nil
		res.resetLease()
	}
	var w pgx.Batch // cursor writes, sent with COMMIT
	var q *queueRow
	general, waitFirst := true, false
	if req.Partition == "" {
		c, err := claim(ctx, tx, req, res.leaseSeed, false)
		if err != nil {
			return err
		}
		if q = c.q; q == nil {
			return commitPop(ctx, tx, &w)
		}
		res.leaseSeconds = q.leaseTime
		if c.fast {
			general = false
			// The cursors the claim wrote (all of them, in the common
			// case) are decoded straight into res.Messages, grown once for
			// all of them: a combined pop's runs share one slice, which
			// serveBatch hands out in parts, instead of one slice per
			// cursor appended to a growing one.
			res.Messages = growForClaimed(res.Messages, c.cursors)
			for _, cc := range c.cursors {
				if cc.updated {
					n := len(res.Messages)
					if res.Messages, err = s.deliverClaimed(res.Messages, q, cc.name, req, res.leaseFor(cc.leaseKey), cc); err != nil {
						return err
					}
					if len(res.Messages) > n {
						res.Claimed = append(res.Claimed, ClaimedPartition{cc.id, cc.name})
					}
					continue
				}
				msgs, err := s.popPartition(ctx, tx, q, cc.id, cc.name, req, res, cc.take, 0, true, false, cc, &w)
				if err != nil {
					return err
				}
				if len(msgs) > 0 {
					res.Claimed = append(res.Claimed, ClaimedPartition{cc.id, cc.name})
					res.Messages = appendPopped(res.Messages, msgs)
				}
			}
			// Every candidate was locked by pops in flight: wait for the
			// first one's lock rather than answer empty (this pop holds no
			// lock yet, so the wait cannot close a deadlock cycle).
			general, waitFirst = len(c.cursors) == 0 && c.candidates > 0, true
		}
	} else {
		if _, err := tx.Exec(ctx, "BEGIN"); err != nil {
			return err
		}
		if q, err = s.queueByName(ctx, tx, req.Queue); err != nil || q == nil {
			if err != nil {
				return err
			}
			return commitPop(ctx, tx, &w)
		}
		res.leaseSeconds = q.leaseTime
	}
	if general {
		if err := s.popGeneral(ctx, tx, q, req, res, waitFirst, &w); err != nil {
			return err
		}
	}
	if len(res.Messages) == 0 && req.Partition == "" {
		// Leased partitions are not candidates; learn when the first
		// lease of this group on the queue lapses.
		var exp *time.Time
		if err := tx.QueryRow(ctx, `SELECT min(c.lease_expires_at) FROM queen.consumer_cursors c
			JOIN queen.partitions p ON p.id = c.partition_id
			WHERE p.queue_id = $1 AND c.consumer_group = $2 AND c.lease_expires_at > now()`, q.id, req.Group).Scan(&exp); err != nil {
			return err
		}
		if exp != nil {
			res.checkAt(*exp)
		}
	}
	return commitPop(ctx, tx, &w)
}

// popOneTrip is a leased wildcard pop of one partition in one round trip
// when claimOneSQL can write the cursor itself (the common case: see
// claimOneSQL): BEGIN, the claim and COMMIT are sent together, and the
// messages are decoded after the commit. done false: the claim wrote
// nothing (no clean cursor, a fresh partition, every candidate locked by
// other pops, delayed processing or a window buffer) and its transaction
// changed nothing; the caller runs the pop again the general way. An
// error after the commit (a segment that does not decode, a payload that
// does not decrypt) gives the lease back (ReleaseLease: no delivery
// attempt counted, as for a pop whose client left). autoAck pops never
// come here: their cursor write cannot be given back, so they commit
// only once the messages are decoded.
func (s *Store) popOneTrip(ctx context.Context, tx *pgx.Conn, req PopRequest, res *PopResult) (bool, error) {
	c, err := claim(ctx, tx, req, res.leaseSeed, true)
	if err != nil {
		return false, err
	}
	return s.deliverCommitted(ctx, tx, req, res, c)
}

// deliverCommitted is the second half of popOneTrip, after the commit of
// claim c: done false when c wrote nothing (see popOneTrip); else the
// messages decoded into res, or the error of a segment that does not
// decode or a payload that does not decrypt, the lease then given back.
func (s *Store) deliverCommitted(ctx context.Context, tx dbtx, req PopRequest, res *PopResult, c *claimResult) (bool, error) {
	q := c.q
	if q == nil {
		return true, nil
	}
	if !c.fast || len(c.cursors) == 0 {
		return false, nil
	}
	for _, cc := range c.cursors {
		if !cc.updated {
			return false, nil
		}
	}
	res.leaseSeconds = q.leaseTime
	var w pgx.Batch // stays empty: every cursor was written by the claim
	for _, cc := range c.cursors {
		msgs, err := s.popPartition(ctx, tx, q, cc.id, cc.name, req, res, cc.take, 0, true, false, cc, &w)
		if err == nil && w.Len() > 0 {
			err = fmt.Errorf("pop of partition %s queued a cursor write after its claim committed", cc.id)
		}
		if err != nil {
			if _, rerr := s.ReleaseLease(ctx, res.LeaseID); rerr != nil {
				s.log.Warn("pop: could not give back the lease of a failed pop; it lapses by itself", "err", rerr)
			}
			return false, err
		}
		if len(msgs) > 0 {
			res.Claimed = append(res.Claimed, ClaimedPartition{cc.id, cc.name})
			res.Messages = appendPopped(res.Messages, msgs)
		}
	}
	return true, nil
}

// appendPopped is append(to, msgs...), except that msgs itself (which
// popPartition allocates per call) is taken when to is empty: a pop of one
// partition does not copy its messages a second time.
func appendPopped(to, msgs []PoppedMessage) []PoppedMessage {
	if len(to) == 0 {
		return msgs
	}
	return append(to, msgs...)
}

// commitTimeout bounds the round trip of a pop's or ack's COMMIT
// (commitPop, claim with commit), which does not end with the caller's
// context.
const commitTimeout = 30 * time.Second

// commitContext is the context of a round trip that carries a pop's or
// ack's COMMIT: ctx's values, without its deadline or cancellation,
// ending after commitTimeout (commitPop says why).
func commitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
}

// commitPop sends the pop's (or ack's) cursor writes w with COMMIT, in
// one round trip, and checks that the transaction ended. The round trip
// runs under ctx's values but not its deadline or cancellation, bounded
// by commitTimeout instead: once COMMIT is sent, cutting the wait short
// does not stop PostgreSQL from committing, it only keeps the outcome from
// the broker, and an autoAck pop whose cursor moves committed unseen has
// consumed its messages without delivering them (a waiting pop's attempt
// gets as little as a second, which a loaded machine's commit can take:
// docs/consume.md, "When a commit is slow or its outcome unknown"). An
// error here is the server's answer (nothing committed), or a lost
// connection (08xxx, EOF, commitTimeout): the outcome is then unknown.
func commitPop(ctx context.Context, tx *pgx.Conn, w *pgx.Batch) error {
	w.Queue("COMMIT")
	ctx, cancel := commitContext(ctx)
	defer cancel()
	if err := tx.SendBatch(ctx, w).Close(); err != nil {
		return err
	}
	if st := tx.PgConn().TxStatus(); st != 'I' {
		return fmt.Errorf("commit did not end the transaction (status %q)", st)
	}
	return nil
}

// popGeneral is the pop path for a named partition and for what claimSQL
// leaves to it: it records a named group's subscription, lists the
// candidates, and pops them one by one (creating a group's cursor where
// its subscription starts). waitFirst makes a wildcard pop wait for the
// first candidate's lock instead of skipping it (see popTx). Cursor writes
// are queued on w.
func (s *Store) popGeneral(ctx context.Context, tx dbtx, q *queueRow, req PopRequest, res *PopResult, waitFirst bool, w *pgx.Batch) error {
	if req.Group != QueueModeGroup {
		if err := ensureSubscription(ctx, tx, q.id, req); err != nil {
			return err
		}
	}
	type cand struct {
		id    uuid.UUID
		name  string
		fresh bool
	}
	var cands []cand
	if req.Partition != "" {
		var id pgtype.UUID
		err := tx.QueryRow(ctx, `SELECT id FROM queen.partitions WHERE queue_id = $1 AND name = $2`, q.id, req.Partition).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		cands = append(cands, cand{id.Bytes, req.Partition, true})
	} else {
		// Partitions with something past the group's cursor and no live
		// lease, least recently consumed first.
		rows, err := tx.Query(ctx, `SELECT p.id, p.name, c.partition_id IS NULL FROM queen.partitions p
		LEFT JOIN queen.consumer_cursors c ON c.partition_id = p.id AND c.consumer_group = $2
		WHERE p.queue_id = $1 AND p.next_offset > coalesce(c.cursor_offset, 0)
		  AND (c.lease_id IS NULL OR c.lease_expires_at <= now())
		ORDER BY c.last_consumed_at NULLS FIRST, p.id LIMIT $3`, q.id, req.Group, req.Partitions*4+16)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id pgtype.UUID
			var c cand
			if err := rows.Scan(&id, &c.name, &c.fresh); err != nil {
				rows.Close()
				return err
			}
			c.id = id.Bytes
			cands = append(cands, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	budget := req.Batch - len(res.Messages)
	// The pop's byte bound (PopRequest.MaxBytes): what is left of it for
	// each partition in turn; a partition reached once it is spent is not
	// read.
	bytesLeft := req.MaxBytes
	for i := range res.Messages {
		bytesLeft -= int64(messageLen(&res.Messages[i].Message))
	}
	for i, c := range cands {
		if budget == 0 || len(res.Claimed) == req.Partitions || bytesLeft <= 0 {
			break
		}
		skipLocked := req.Partition == "" && !(waitFirst && i == 0)
		take := budget
		if req.perPartition > 0 {
			take = min(take, req.perPartition)
		}
		msgs, err := s.popPartition(ctx, tx, q, c.id, c.name, req, res, take, bytesLeft, skipLocked, c.fresh, nil, w)
		if err != nil {
			return err
		}
		if len(msgs) > 0 {
			res.Claimed = append(res.Claimed, ClaimedPartition{c.id, c.name})
			res.Messages = appendPopped(res.Messages, msgs)
			budget -= len(msgs)
			for i := range msgs {
				bytesLeft -= int64(messageLen(&msgs[i].Message))
			}
		}
	}
	return nil
}

// ensureSubscription records a named group's subscription on first use
// (the mode is fixed at first join).
func ensureSubscription(ctx context.Context, tx dbtx, queueID uuid.UUID, req PopRequest) error {
	mode, from := SubscribeAll, (*time.Time)(nil)
	switch {
	case req.SubscriptionFrom != nil:
		mode, from = SubscribeTimestamp, req.SubscriptionFrom
	case req.SubscriptionMode == SubscribeNew:
		mode = SubscribeNew
	}
	if mode == SubscribeNew {
		_, err := tx.Exec(ctx, `INSERT INTO queen.consumer_groups (queue_id, consumer_group, subscription_mode, subscription_from)
			VALUES ($1, $2, $3, coalesce($4::timestamptz, now())) ON CONFLICT DO NOTHING`, queueID, req.Group, mode, req.NewFrom)
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO queen.consumer_groups (queue_id, consumer_group, subscription_mode, subscription_from)
		VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, queueID, req.Group, mode, from)
	return err
}

type cursorRow struct {
	offset       int64
	leaseID      *uuid.UUID
	leaseExpires *time.Time
	live         bool
	leaseEnd     int64
	retries      int
	acked        []int64
	nextOffset   int64
	lastMsgAt    *time.Time
	// leaseKey is the row's lease_key (pg/leasekey.go).
	leaseKey int64
}

// lockCursor returns the group's cursor row for a partition, locked,
// creating it where the group's subscription says it starts. skipLocked
// makes a wildcard pop pass over partitions another pop is working on
// (nil, nil); with it, a cursor is created only when create says the
// partition had none (a cursor that exists but is locked is skipped, not
// waited for through an insert that conflicts with it).
func lockCursor(ctx context.Context, tx dbtx, queueID, partID uuid.UUID, group string, skipLocked, create bool) (*cursorRow, error) {
	lock := "FOR UPDATE OF c"
	if skipLocked {
		lock += " SKIP LOCKED"
	}
	q := `SELECT c.cursor_offset, c.lease_id, c.lease_expires_at, coalesce(c.lease_expires_at > now(), false), coalesce(c.lease_end, -1),
		c.retry_count, c.acked, p.next_offset, p.last_message_at, c.lease_key
		FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id
		WHERE c.partition_id = $1 AND c.consumer_group = $2 ` + lock
	for attempt := 0; attempt < 2; attempt++ {
		var c cursorRow
		var lease pgtype.UUID
		err := tx.QueryRow(ctx, q, partID, group).Scan(&c.offset, &lease, &c.leaseExpires, &c.live, &c.leaseEnd, &c.retries, &c.acked, &c.nextOffset, &c.lastMsgAt, &c.leaseKey)
		if err == nil {
			c.leaseID = optUUID(lease)
			return &c, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		if attempt == 1 || (skipLocked && !create) {
			return nil, nil // locked by another pop (SKIP LOCKED)
		}
		start, err := startOffset(ctx, tx, queueID, partID, group)
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset)
			VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, partID, group, start); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// startOffset is where a group without a cursor starts in a partition:
// offset 0 for queue mode and SubscribeAll, else the first segment
// committed at or after the subscription time.
func startOffset(ctx context.Context, tx dbtx, queueID, partID uuid.UUID, group string) (int64, error) {
	if group == QueueModeGroup {
		return 0, nil
	}
	var mode string
	var from *time.Time
	err := tx.QueryRow(ctx, `SELECT subscription_mode, subscription_from FROM queen.consumer_groups
		WHERE queue_id = $1 AND consumer_group = $2`, queueID, group).Scan(&mode, &from)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (mode == SubscribeAll || from == nil)) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var off int64
	err = tx.QueryRow(ctx, `SELECT coalesce(
			(SELECT min(base_offset) FROM queen.segments WHERE partition_id = $1 AND created_at >= $2),
			(SELECT next_offset FROM queen.partitions WHERE id = $1))`, partID, *from).Scan(&off)
	return off, err
}

// fetch returns the stored messages of a partition with offsets in
// [from, to], in order; offsets whose segment is gone are skipped, and so
// are deleted ones (queen.tombstones, pg/tombstone.go).
func fetch(ctx context.Context, tx dbtx, partID uuid.UUID, from, to int64) ([]StoredMessage, error) {
	return fetchBounded(ctx, tx, partID, from, to, 0)
}

// fetchBounded is fetch reading segments only while the ones before stay
// under maxBytes (segmentBytesSQL summed in offset order; 0: no bound):
// the first segment is always read, and the messages returned end with
// the segment that reached the bound (a pop's read: boundedTakeSQL).
func fetchBounded(ctx context.Context, tx dbtx, partID uuid.UUID, from, to, maxBytes int64) ([]StoredMessage, error) {
	rows, err := tx.Query(ctx, `SELECT g.base_offset, g.last_offset, g.body,
		ARRAY(SELECT t.msg_offset FROM queen.tombstones t WHERE t.partition_id = $1
			AND t.msg_offset >= greatest(g.base_offset, $2) AND t.msg_offset <= least(g.last_offset, $3)) AS deleted
		FROM (SELECT sg.base_offset, sg.last_offset, sg.body,
				sum(`+segmentBytesSQL+`) OVER (ORDER BY sg.base_offset) - `+segmentBytesSQL+` AS before
			FROM queen.segments sg
			WHERE sg.partition_id = $1 AND sg.base_offset <= $3 AND sg.base_offset >= `+segmentStartSQL("$1", "$2")+`) g
		WHERE $4::bigint <= 0 OR g.before < $4::bigint
		ORDER BY g.base_offset`, partID, from, to, maxBytes)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StoredMessage
	for rows.Next() {
		var base, last int64
		var body []byte
		var deleted []int64
		if err := rows.Scan(&base, &last, &body, &deleted); err != nil {
			return nil, err
		}
		n := len(out)
		if out, err = appendSegmentOffsets(out, partID, base, last, body, from, to); err != nil {
			return nil, err
		}
		if len(deleted) > 0 {
			out = append(out[:n], slices.DeleteFunc(out[n:], func(m StoredMessage) bool { return slices.Contains(deleted, m.Offset) })...)
		}
	}
	return out, rows.Err()
}

// popPartition delivers up to budget messages of one partition; see Pop.
// pre, when set, is the partition's cursor as claimSQL locked it, with the
// segments of the offsets to deliver; otherwise the cursor is locked here
// (skipLocked, create: see lockCursor) and the segments fetched. The
// cursor's write is queued on w, sent with the pop's COMMIT. maxBytes > 0
// bounds what it delivers in stored bytes (messageLen), at least one
// message however large (the general path's part of the pop's byte bound;
// a claim statement bounded pre's take already, and its callers pass 0).
func (s *Store) popPartition(ctx context.Context, tx dbtx, q *queueRow, partID uuid.UUID, partName string,
	req PopRequest, res *PopResult, budget int, maxBytes int64, skipLocked, create bool, pre *claimedCursor, w *pgx.Batch) ([]PoppedMessage, error) {
	if pre != nil && pre.updated {
		// The claim statement wrote the cursor (under the pop's seed bound
		// to it): decode its offsets straight into the answer.
		return s.deliverClaimed(nil, q, partName, req, res.leaseFor(pre.leaseKey), pre)
	}
	leaseID := res.LeaseID
	var c *cursorRow
	var err error
	if pre != nil {
		c = &pre.cursorRow
	} else if c, err = lockCursor(ctx, tx, q.id, partID, req.Group, skipLocked, create); err != nil || c == nil {
		return nil, err
	}
	if c.leaseID != nil && c.live {
		if c.leaseExpires != nil {
			res.checkAt(*c.leaseExpires)
		}
		return nil, nil // one lease per (partition, group)
	}
	cursor, retries := c.offset, c.retries
	if c.leaseID != nil && c.leaseEnd >= cursor {
		// The lease lapsed with messages unacked: a failed delivery.
		retries++
		if retries > q.retryLimit {
			moved, err := deadLetter(ctx, tx, partID, req.Group, cursor, "lease expired: retries exhausted", retries-1)
			if err != nil {
				return nil, err
			}
			if moved {
				cursor++
			}
			retries = 0
		}
	}
	var msgs []StoredMessage
	if cursor < c.nextOffset && windowActive(q, c.lastMsgAt) {
		res.checkAt(c.lastMsgAt.Add(time.Duration(q.windowBuffer) * time.Second))
	}
	// A run of deleted offsets (tombstones) or offsets retention removed
	// at the cursor is passed over and read past, up to maxSkipReads times:
	// under the byte bound (fetchBounded) one read may hold nothing but
	// deleted messages, and a pop that answered nothing for them, with live
	// messages after them, left a long-poll waiting for a wake-up that
	// would not come.
	for reads := 0; cursor < c.nextOffset && !windowActive(q, c.lastMsgAt); reads++ {
		to := min(cursor+int64(budget)-1, c.nextOffset-1)
		// pre holds the segments of offsets c.offset..c.offset+take-1
		// only: a cursor moved past a dead-lettered message reads the
		// rest itself.
		if pre != nil && !pre.deleted && cursor >= c.offset && to <= c.offset+int64(pre.take)-1 {
			sp := storedScratch.Get().(*[]StoredMessage)
			msgs, err = pre.messages(*sp, cursor, to)
			if err == nil {
				*sp = msgs // what releaseStored clears
			}
			// msgs is copied into the answer (out, below) before this
			// returns.
			defer releaseStored(sp)
		} else {
			bound := maxBytes
			if reads > 0 && bound <= 0 {
				// Past what the claim bounded: the pop's own bound.
				bound = req.MaxBytes
			}
			msgs, err = fetchBounded(ctx, tx, partID, cursor, to, bound)
		}
		if err != nil {
			return nil, err
		}
		if q.delayed > 0 {
			cutoff := time.Now().Add(-time.Duration(q.delayed) * time.Second).UnixMicro()
			n := 0
			for n < len(msgs) && msgs[n].CreatedAtMicros <= cutoff {
				n++
			}
			if n < len(msgs) {
				res.checkAt(time.UnixMicro(msgs[n].CreatedAtMicros).Add(time.Duration(q.delayed) * time.Second))
			}
			msgs = msgs[:n]
		}
		if len(msgs) == 0 && cursor <= to {
			// Nothing deliverable: either delayed, or retention removed the
			// offsets at the cursor. Skip what retention removed.
			from := cursor
			if first, err := firstStoredOffset(ctx, tx, partID, cursor); err != nil {
				return nil, err
			} else if first > cursor {
				cursor = first
			}
			// Deleted messages (tombstones) at the cursor are passed over.
			if next, err := skipDeleted(ctx, tx, partID, cursor, to); err != nil {
				return nil, err
			} else if next > cursor {
				cursor, retries = next, 0
			}
			if cursor > from && cursor < c.nextOffset {
				if reads < maxSkipReads {
					continue // read on past them
				}
				res.checkAt(time.Now()) // a waiting pop looks again at once
			}
		}
		break
	}
	if len(msgs) == 0 {
		if pre != nil && pre.updated {
			return nil, fmt.Errorf("claim wrote the cursor of partition %s for offsets %d..%d, but none were read",
				partID, c.offset, c.offset+int64(pre.take)-1)
		}
		if cursor != c.offset || retries != c.retries || c.leaseID != nil || len(c.acked) > 0 {
			w.Queue(`UPDATE queen.consumer_cursors SET cursor_offset = greatest(cursor_offset, $3),
			retry_count = $4, lease_id = NULL, lease_expires_at = NULL, lease_end = NULL, acked = '{}'
			WHERE partition_id = $1 AND consumer_group = $2`, partID, req.Group, cursor, retries)
		}
		return nil, nil
	}
	// A lease covers a contiguous run from the cursor: stop at a gap
	// (deleted messages inside the run are no gap: acks pass over them).
	for i := 1; i < len(msgs); i++ {
		if msgs[i].Offset != msgs[i-1].Offset+1 {
			if n, err := skipDeleted(ctx, tx, partID, msgs[i-1].Offset+1, msgs[i].Offset-1); err != nil {
				return nil, err
			} else if n == msgs[i].Offset {
				continue
			}
			msgs = msgs[:i]
			break
		}
	}
	if maxBytes > 0 {
		msgs = msgs[:withinBytes(msgs, maxBytes)]
	}
	first, last := msgs[0].Offset, msgs[len(msgs)-1].Offset
	if pre != nil && pre.updated {
		// claimOneSQL wrote the cursor for exactly these offsets.
		if first != c.offset || last != c.offset+int64(pre.take)-1 || int64(len(msgs)) != last-first+1 {
			return nil, fmt.Errorf("claim wrote the cursor of partition %s for offsets %d..%d, but %d..%d (%d messages) were read",
				partID, c.offset, c.offset+int64(pre.take)-1, first, last, len(msgs))
		}
	} else if req.AutoAck {
		w.Queue(`UPDATE queen.consumer_cursors SET cursor_offset = greatest(cursor_offset, $3), retry_count = 0,
			lease_id = NULL, lease_expires_at = NULL, lease_end = NULL, acked = '{}',
			last_consumed_at = now(), total_consumed = total_consumed + $4
			WHERE partition_id = $1 AND consumer_group = $2`, partID, req.Group, last+1, len(msgs))
	} else {
		leaseID = res.leaseFor(c.leaseKey)
		w.Queue(`UPDATE queen.consumer_cursors SET cursor_offset = greatest(cursor_offset, $3), retry_count = $4,
			lease_id = $5, lease_expires_at = now() + make_interval(secs => $6), lease_end = $7, acked = '{}'
			WHERE partition_id = $1 AND consumer_group = $2`, partID, req.Group, first, retries,
			pgtype.UUID{Bytes: leaseID, Valid: true}, float64(q.leaseTime), last)
	}
	out := make([]PoppedMessage, len(msgs))
	for i, m := range msgs {
		if m.Encrypted {
			one := []Message{m.Message}
			if err := s.decrypt(one); err != nil {
				return nil, err
			}
			m.Message = one[0]
		}
		m.Queue, m.Partition = q.name, partName
		out[i] = PoppedMessage{StoredMessage: m, LeaseID: leaseID}
		if req.AutoAck {
			out[i].LeaseID = uuid.Nil
		}
	}
	return out, nil
}

// maxSkipReads bounds the reads of one partition's pop past deleted or
// removed offsets that held nothing deliverable (popPartition).
const maxSkipReads = 8

// withinBytes is how many of msgs a pop delivers under a bound of
// maxBytes: their stored lengths (messageLen) are summed in order, and the
// pop ends with the message that brings the sum to maxBytes (so at least
// one, however large), as a claim ends with such a segment
// (boundedTakeSQL).
func withinBytes(msgs []StoredMessage, maxBytes int64) int {
	var sum int64
	for i := range msgs {
		sum += int64(messageLen(&msgs[i].Message))
		if sum >= maxBytes {
			return i + 1
		}
	}
	return len(msgs)
}

func windowActive(q *queueRow, lastMsgAt *time.Time) bool {
	return q.windowBuffer > 0 && lastMsgAt != nil && time.Since(*lastMsgAt) < time.Duration(q.windowBuffer)*time.Second
}

// skipDeleted returns the first offset in [from, to+1] from which on the
// offsets are not all deleted (tombstones): from itself when from is not
// deleted.
func skipDeleted(ctx context.Context, tx dbtx, partID uuid.UUID, from, to int64) (int64, error) {
	if to < from {
		return from, nil
	}
	deleted, err := tombstonedIn(ctx, tx, partID, from, to)
	if err != nil {
		return from, err
	}
	for _, d := range deleted {
		if d != from {
			break
		}
		from++
	}
	return from, nil
}

// firstStoredOffset is the first stored offset >= from, or from when none.
func firstStoredOffset(ctx context.Context, tx dbtx, partID uuid.UUID, from int64) (int64, error) {
	var off *int64
	err := tx.QueryRow(ctx, `SELECT min(base_offset) FROM queen.segments WHERE partition_id = $1 AND base_offset >= $2`,
		partID, from).Scan(&off)
	if err != nil || off == nil {
		return from, err
	}
	return *off, nil
}

// deadLetter records the message at offset as a dead letter of group. It
// returns false when the message no longer exists (retention removed it),
// in which case only the cursor moves.
func deadLetter(ctx context.Context, tx dbtx, partID uuid.UUID, group string, offset int64, reason string, retries int) (bool, error) {
	reason = DeadLetterError(reason)
	msgs, err := fetch(ctx, tx, partID, offset, offset)
	if err != nil {
		return false, err
	}
	if len(msgs) == 0 {
		return true, nil
	}
	m := msgs[0]
	_, err = tx.Exec(ctx, `INSERT INTO queen.dead_letters (partition_id, consumer_group, msg_offset, message_id, transaction_id, error, retry_count)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, partID, group, offset, pgtype.UUID{Bytes: m.ID, Valid: true},
		[]byte(m.TransactionID), reason, retries)
	return err == nil, err
}

// MaxDeadLetterError is the most bytes of a dead letter's error text that
// are stored (DeadLetterError).
const MaxDeadLetterError = 8 << 10

// deadLetterErrorSQL is how a listing reads a dead letter's error column
// col: at most MaxDeadLetterError characters of it ("" for none), since
// error texts stored before DeadLetterError cut them may be megabytes.
func deadLetterErrorSQL(col string) string {
	return "left(coalesce(" + col + ", ''), " + strconv.Itoa(MaxDeadLetterError) + ")"
}

// DeadLetterError returns the error text a dead letter stores for err (an
// ack's `error`, or the broker's own reason): err itself up to
// MaxDeadLetterError bytes; a longer one cut at a UTF-8 boundary, with
// " … (truncated from N bytes)" in place of the rest, within that length.
// The text is informational and an ack is not refused for it (a client's
// stack trace may be long), but a dead letter must not store megabytes
// that every DLQ listing then reads back (a 25 MiB error made /dlq answer
// 210 MB and the broker grow past 1 GB).
func DeadLetterError(err string) string {
	if len(err) <= MaxDeadLetterError {
		return err
	}
	marker := fmt.Sprintf(" … (truncated from %d bytes)", len(err))
	return textcut.Prefix(err, MaxDeadLetterError-len(marker)) + marker
}

// Ack statuses (POST /api/v1/ack).
const (
	AckCompleted = "completed"
	AckSuccess   = "success"
	AckFailed    = "failed"
	AckDLQ       = "dlq"
	AckRetry     = "retry"
)

// AckRequest acknowledges one delivered message.
type AckRequest struct {
	TransactionID string
	PartitionID   uuid.UUID
	// LeaseID, when set, must be the live lease the message was delivered
	// under.
	LeaseID *uuid.UUID
	Status  string
	Group   string
	Error   string
}

// AckResult is the outcome of one ack. Error is "" on success.
type AckResult struct {
	Success       bool
	Error         string
	QueueName     string
	PartitionName string
	LeaseReleased bool
	DLQ           bool
}

// Ack errors reported per item (Queen's texts).
const (
	ErrTextNotFound     = "Message not found"
	ErrTextAlreadyAcked = "Message already acknowledged"
	ErrTextInvalidLease = "Invalid or expired lease"
	ErrTextBadStatus    = "Invalid status"
)

// Ack applies acks in one transaction, in order; each gets a result. An ack
// is accepted only under the live lease the message was delivered under
// (docs/consume.md, "Ack": an ack under an expired or foreign lease changes
// nothing). completed/success move the cursor over the contiguous acked run
// (never backwards) and release the lease once all is acked; failed releases
// the lease and counts a retry of the message at the cursor, which goes to
// the DLQ past the queue's retryLimit; dlq dead-letters the message and
// counts it as consumed; retry releases the lease without counting.
func (s *Store) Ack(ctx context.Context, reqs []AckRequest) ([]AckResult, error) {
	// The common batch ack (a whole lease this broker handed out) in one
	// statement; anything else, or a conflict there, the general way.
	if res, ok, err := s.fastAck(ctx, reqs); err != nil && !retryable(err, true) {
		return nil, fmt.Errorf("pg: ack: %w", err)
	} else if ok {
		return res, nil
	}
	out := make([]AckResult, len(reqs))
	// As in Pop, a foreign-key violation is a concurrent queue delete: the
	// rerun finds the partition gone (ErrTextNotFound per ack).
	err := withRetry(true, func() error {
		res, err := s.ackTx(ctx, reqs)
		if err != nil {
			return err
		}
		copy(out, res)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pg: ack: %w", err)
	}
	return out, nil
}

// ackTx runs Ack's transaction in two round trips: BEGIN with the load
// of every cursor (ackLoadSQL), then the cursor writes, a NOTIFY per
// queue whose lease was released (waking the pops waiting on it on every
// broker, at commit) and COMMIT.
func (s *Store) ackTx(ctx context.Context, reqs []AckRequest) ([]AckResult, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// A connection released inside a transaction (any error below) is
	// closed by the pool, which rolls the transaction back.
	defer pc.Release()
	tx := pc.Conn()
	var w pgx.Batch
	res, err := applyAcks(ctx, tx, reqs, true, &w)
	if err != nil {
		return nil, err
	}
	woken := map[string]bool{}
	for _, r := range res {
		if r.LeaseReleased && !woken[r.QueueName] {
			woken[r.QueueName] = true
			w.Queue("SELECT pg_notify($1, $2)", NotifyChannel, r.QueueName)
		}
	}
	if err := commitPop(ctx, tx, &w); err != nil {
		return nil, err
	}
	return res, nil
}

// ackKey names the cursor an ack applies to.
type ackKey struct {
	pid   uuid.UUID
	group string
}

// ackState is one cursor as the acks of one call see it: loaded (and
// locked) once, changed in memory by each ack, written once by flush. A
// batch ack of n messages is therefore a few round trips, not 3n.
type ackState struct {
	gone                bool // the partition does not exist
	queueName, partName string
	retryLimit          int
	c                   *cursorRow // nil: the group has no cursor here
	msgs                []StoredMessage
	deleted             []int64 // deleted offsets of a live lease (loadAckCursors)
	cursor              int64
	retries             int
	acked               []int64
	released, dirty     bool
	consumed            int
	// dead is the dead letter the ack being applied wrote; applyAcks moves
	// it to the batch's, which flush inserts with the cursor writes, in
	// the acks' order, in one statement (no round trip of its own).
	dead []deadLetterRow
}

// deadLetterRow is one row of queen.dead_letters an ack batch writes: the
// cursor (key), a message of its lease (offset, id and transactionId, from
// the messages load read), the error text stored (DeadLetterError) and
// the retries counted.
type deadLetterRow struct {
	key     ackKey
	offset  int64
	id      uuid.UUID
	txid    string
	reason  string
	retries int
}

// deadLetterFor records on st the dead letter of the lease's message at
// offset. A message that is not among the lease's messages (deleted) is
// dead-lettered without a row, as deadLetter does when fetch finds none.
func (st *ackState) deadLetterFor(offset int64, reason string, retries int) {
	for i := range st.msgs {
		if m := &st.msgs[i]; m.Offset == offset {
			st.dead = append(st.dead, deadLetterRow{offset: offset, id: m.ID, txid: m.TransactionID,
				reason: DeadLetterError(reason), retries: retries})
			return
		}
	}
}

type ackBatch map[ackKey]*ackState

// load locks and reads the cursors of reqs in a fixed (partition, group)
// order, so that concurrent batch acks cannot deadlock on each other, with
// the messages of each live lease: one statement (ackLoadSQL), sent with
// BEGIN when begin is set. A group without a cursor on a partition has no
// lease there (c nil: every ack is ErrTextInvalidLease); no cursor is
// created for it.
func (b ackBatch) load(ctx context.Context, tx dbtx, reqs []AckRequest, begin bool) error {
	var keys []ackKey
	for _, r := range reqs {
		k := ackKey{r.PartitionID, r.Group}
		if _, ok := b[k]; !ok {
			b[k] = nil
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y ackKey) int {
		if c := bytes.Compare(x.pid[:], y.pid[:]); c != 0 {
			return c
		}
		return strings.Compare(x.group, y.group)
	})
	loaded, err := loadAckCursors(ctx, tx, keys, begin)
	if err != nil {
		return err
	}
	for i, k := range keys {
		st := loaded[i]
		if st.c != nil {
			st.cursor, st.retries, st.acked = st.c.offset, st.c.retries, slices.Clone(st.c.acked)
			// Deleted messages of the lease count as acked.
			st.acked = append(st.acked, st.deleted...)
		}
		b[k] = st
	}
	return nil
}

// apply applies one ack to its loaded cursor (see Ack for the rules).
func (b ackBatch) apply(ctx context.Context, tx dbtx, r AckRequest) (AckResult, error) {
	var res AckResult
	switch r.Status {
	case "", AckCompleted, AckSuccess, AckFailed, AckDLQ, AckRetry:
	default:
		res.Error = ErrTextBadStatus
		return res, nil
	}
	st := b[ackKey{r.PartitionID, r.Group}]
	if st.gone {
		res.Error = ErrTextNotFound
		return res, nil
	}
	res.QueueName, res.PartitionName = st.queueName, st.partName
	c := st.c
	if c == nil || c.leaseID == nil || !c.live || st.released || (r.LeaseID != nil && *r.LeaseID != *c.leaseID) {
		res.Error = ErrTextInvalidLease
		return res, nil
	}
	off := int64(-1)
	acknowledged := false
	for _, m := range st.msgs {
		if m.TransactionID != r.TransactionID {
			continue
		}
		if m.Offset < st.cursor || slices.Contains(st.acked, m.Offset) {
			acknowledged = true
			continue
		}
		off = m.Offset
		break
	}
	if off < 0 {
		res.Error = ErrTextNotFound
		if acknowledged {
			res.Error = ErrTextAlreadyAcked
		}
		return res, nil
	}
	st.dirty = true
	switch r.Status {
	case "", AckCompleted, AckSuccess, AckDLQ:
		if r.Status == AckDLQ {
			reason := r.Error
			if reason == "" {
				reason = "sent to DLQ by consumer"
			}
			st.deadLetterFor(off, reason, st.retries)
			res.DLQ = true
		}
		st.acked = append(st.acked, off)
		moved := false
		for slices.Contains(st.acked, st.cursor) {
			cur := st.cursor
			st.acked = slices.DeleteFunc(st.acked, func(x int64) bool { return x == cur })
			st.cursor++
			st.consumed++
			moved = true
		}
		if moved {
			st.retries = 0
		}
		st.released = st.cursor > c.leaseEnd
	case AckFailed:
		st.retries++
		if st.retries > st.retryLimit {
			reason := r.Error
			if reason == "" {
				reason = "Retries exhausted"
			}
			st.deadLetterFor(st.cursor, reason, st.retries-1)
			res.DLQ = true
			st.cursor++
			st.consumed++
			st.retries = 0
		}
		st.released = true
	case AckRetry:
		st.released = true
	}
	res.Success, res.LeaseReleased = true, st.released
	return res, nil
}

// flush queues on w the write of every changed cursor (the cursor only
// grows: greatest).
func (b ackBatch) flush(w *pgx.Batch, dead []deadLetterRow) {
	if n := len(dead); n > 0 {
		pids, groups := make([]uuid.UUID, n), make([]string, n)
		offs, ids, txids, reasons, retries := make([]int64, n), make([]uuid.UUID, n), make([][]byte, n), make([]string, n), make([]int32, n)
		for i, d := range dead {
			pids[i], groups[i] = d.key.pid, d.key.group
			offs[i], ids[i], txids[i], reasons[i], retries[i] = d.offset, d.id, []byte(d.txid), d.reason, int32(d.retries)
		}
		// In the acks' order, so /dlq (newest id first) lists them as they
		// were sent.
		w.Queue(`INSERT INTO queen.dead_letters (partition_id, consumer_group, msg_offset, message_id, transaction_id, error, retry_count)
			SELECT unnest($1::uuid[]), unnest($2::text[]), unnest($3::bigint[]), unnest($4::uuid[]), unnest($5::bytea[]),
				unnest($6::text[]), unnest($7::int[])`, pids, groups, offs, ids, txids, reasons, retries)
	}
	for k, st := range b {
		if st == nil || !st.dirty {
			continue
		}
		if st.released {
			w.Queue(`UPDATE queen.consumer_cursors SET cursor_offset = greatest(cursor_offset, $3), retry_count = $4,
				lease_id = NULL, lease_expires_at = NULL, lease_end = NULL, acked = '{}',
				last_consumed_at = CASE WHEN $5 > 0 THEN now() ELSE last_consumed_at END, total_consumed = total_consumed + $5
				WHERE partition_id = $1 AND consumer_group = $2`, k.pid, k.group, st.cursor, st.retries, st.consumed)
		} else {
			acked := st.acked
			if acked == nil {
				acked = []int64{}
			}
			w.Queue(`UPDATE queen.consumer_cursors SET cursor_offset = greatest(cursor_offset, $3), retry_count = $4,
				acked = $5, last_consumed_at = CASE WHEN $6 > 0 THEN now() ELSE last_consumed_at END,
				total_consumed = total_consumed + $6
				WHERE partition_id = $1 AND consumer_group = $2`, k.pid, k.group, st.cursor, st.retries, acked, st.consumed)
		}
	}
}

// applyAcks runs acks in order inside tx: load (locking, in key order;
// after BEGIN in the same round trip when begin is set), apply each, and
// queue the cursor writes on w for the caller to send.
func applyAcks(ctx context.Context, tx dbtx, reqs []AckRequest, begin bool, w *pgx.Batch) ([]AckResult, error) {
	b := ackBatch{}
	if err := b.load(ctx, tx, reqs, begin); err != nil {
		return nil, err
	}
	out := make([]AckResult, len(reqs))
	var dead []deadLetterRow // in the acks' order
	for i, r := range reqs {
		res, err := b.apply(ctx, tx, r)
		if err != nil {
			return nil, err
		}
		out[i] = res
		if k := (ackKey{r.PartitionID, r.Group}); b[k] != nil && len(b[k].dead) > 0 {
			for _, d := range b[k].dead {
				d.key = k
				dead = append(dead, d)
			}
			b[k].dead = b[k].dead[:0]
		}
	}
	b.flush(w, dead)
	return out, nil
}

// ReleaseLease frees every cursor held under leaseID as if the pop that
// took it had delivered nothing: no delivery attempt is counted (the next
// pop does not see a lapsed lease) and the messages are offered again at
// once. For a pop whose answer never reached its client. The rows are
// found through the lease key the id carries (pg/leasekey.go). It returns
// how many cursors it freed.
func (s *Store) ReleaseLease(ctx context.Context, leaseID uuid.UUID) (int64, error) {
	where, args := leaseRowsSQL(leaseID, 2)
	tag, err := s.pool.Exec(ctx, `UPDATE queen.consumer_cursors c
		SET lease_id = NULL, lease_expires_at = NULL, lease_end = NULL, acked = '{}'
		WHERE `+where, append([]any{pgtype.UUID{Bytes: leaseID, Valid: true}}, args...)...)
	if err != nil {
		return 0, fmt.Errorf("pg: release lease: %w", err)
	}
	return tag.RowsAffected(), nil
}

// releaseSeed is ReleaseLease for a pop of queue and group that may have
// leased a cursor under seed (newLeaseSeed) without learning which one (a
// combined transaction whose outcome is unknown): every cursor of that
// queue and group whose lease id is seed bound to any key is freed. One
// probe per partition of the queue.
func (s *Store) releaseSeed(ctx context.Context, queue, group string, seed uuid.UUID) (int64, error) {
	lo, hi := bindLeaseID(seed, 0), bindLeaseID(seed, 1<<62-1)
	tag, err := s.pool.Exec(ctx, `UPDATE queen.consumer_cursors c
		SET lease_id = NULL, lease_expires_at = NULL, lease_end = NULL, acked = '{}'
		FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
		WHERE q.name = $1 AND c.partition_id = p.id AND c.consumer_group = $2 AND c.lease_id BETWEEN $3 AND $4`,
		queue, group, pgtype.UUID{Bytes: lo, Valid: true}, pgtype.UUID{Bytes: hi, Valid: true})
	if err != nil {
		return 0, fmt.Errorf("pg: release lease: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ExtendLease pushes the expiry of every live cursor row under leaseID
// (found through its lease key, pg/leasekey.go) to at least now +
// seconds. It returns the new expiry, or an error text: "Lease not found"
// or "Lease already expired".
func (s *Store) ExtendLease(ctx context.Context, leaseID uuid.UUID, seconds int) (time.Time, string, error) {
	key, multi, keyed := leaseTarget(leaseID)
	scan := !keyed
	switch {
	case !keyed && leaseID.Version() != 7:
		// Without a lease key the rows are found by a scan of the whole
		// cursor table (two here), which a client can ask for with any id:
		// 50 clients extending a random UUID held every pool connection.
		// Only a UUIDv7 can be a lease minted before lease keys (this
		// broker mints bound v8 ids only).
		return time.Time{}, "Lease not found", nil
	case multi:
		// A multi-partition lease's rows are looked for in every
		// partition of the key row's queue, which PostgreSQL plans as a
		// scan of the cursor table (it estimates lease_id = $1 at one
		// row): a forged id naming any key cost as much as a random one.
		// A genuine lease still holds its key row unless that partition
		// was released first; only the rest wait for the turn.
		var held bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.consumer_cursors
			WHERE lease_key = $1 AND lease_id = $2)`, key, pgtype.UUID{Bytes: leaseID, Valid: true}).Scan(&held); err != nil {
			return time.Time{}, "", err
		}
		scan = !held
	}
	if scan {
		// Scans of the cursor table take turns, so that they never hold
		// more than one connection.
		select {
		case legacyLeaseScan <- struct{}{}:
			defer func() { <-legacyLeaseScan }()
		case <-ctx.Done():
			return time.Time{}, "", fmt.Errorf("pg: extend lease: waiting for a lease scan: %w", ctx.Err())
		}
	}
	id := pgtype.UUID{Bytes: leaseID, Valid: true}
	where, extra := leaseRowsSQL(leaseID, 3)
	var exp *time.Time
	err := s.pool.QueryRow(ctx, `UPDATE queen.consumer_cursors c
		SET lease_expires_at = greatest(lease_expires_at, now() + make_interval(secs => $2))
		WHERE `+where+` AND c.lease_expires_at > now() RETURNING c.lease_expires_at`,
		append([]any{id, float64(seconds)}, extra...)...).Scan(&exp)
	if err == nil && exp != nil {
		// More rows may have been updated (a multi-partition lease); one
		// expiry is reported.
		return *exp, "", nil
	}
	if !errors.Is(err, pgx.ErrNoRows) && err != nil {
		return time.Time{}, "", err
	}
	where, extra = leaseRowsSQL(leaseID, 2)
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM queen.consumer_cursors c WHERE `+where,
		append([]any{id}, extra...)...).Scan(&n); err != nil {
		return time.Time{}, "", err
	}
	if n > 0 {
		return time.Time{}, "Lease already expired", nil
	}
	return time.Time{}, "Lease not found", nil
}
