package pg

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// dbtx is what the consume statements run on: a pgx.Tx, or a connection
// inside a transaction whose BEGIN was pipelined with its first statement
// (Pop).
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// claimSQL is a wildcard pop's first statement, sent in one round trip
// with BEGIN: it reads the queue, picks the candidates as the general
// path does (partitions with something past the group's cursor and no
// live lease, least recently consumed first), locks the cursors of up to
// $4 of them (FOR UPDATE SKIP LOCKED, so concurrent pops spread over the
// partitions instead of queueing on one), shares the batch $5 among them
// in claim order, bounds the shares by the pop's byte bound $6 (the
// segments' plain bytes summed in claim order: a cursor's share ends with
// the segment that reaches it, and later cursors get nothing; see
// boundedTakeSQL), and returns with each locked cursor the segments that
// hold its share. One row per (cursor, segment); one row with NULL cursor
// columns when nothing was locked; no row when the queue does not exist.
//
// It locks nothing (fast = false) and the caller takes the general path,
// in the same transaction, when that path has work this statement does
// not do: a named group's first pop on the queue (its subscription is
// recorded), a candidate partition without a cursor for the group (the
// cursor is created where the subscription starts), or a queue with
// delayed processing or a window buffer (which hold messages back by
// time). The lease and delivery rules themselves are applied by
// popPartition to what this returns, exactly as on the general path.
var claimSQL = `WITH q AS (
	SELECT qu.id, qu.name, qu.lease_time, qu.retry_limit, qu.delayed_processing, qu.window_buffer,
		($2 = '` + QueueModeGroup + `' OR EXISTS (SELECT 1 FROM queen.consumer_groups g
			WHERE g.queue_id = qu.id AND g.consumer_group = $2)) AS joined
	FROM queen.queues qu WHERE qu.name = $1
), cand AS (
	SELECT p.id, p.name, p.next_offset, c.partition_id IS NULL AS fresh, c.last_consumed_at,
		coalesce(c.cursor_offset, 0) AS cursor_offset
	FROM q JOIN queen.partitions p ON p.queue_id = q.id
	LEFT JOIN queen.consumer_cursors c ON c.partition_id = p.id AND c.consumer_group = $2
	WHERE p.next_offset > coalesce(c.cursor_offset, 0) AND (c.lease_id IS NULL OR c.lease_expires_at <= now())
	ORDER BY c.last_consumed_at NULLS FIRST, p.id LIMIT $3
), fast AS (
	SELECT q.joined AND q.delayed_processing = 0 AND q.window_buffer = 0
		AND NOT EXISTS (SELECT 1 FROM cand WHERE cand.fresh)
		AND NOT EXISTS (SELECT 1 FROM cand JOIN queen.tombstones t
			ON t.partition_id = cand.id AND t.msg_offset >= cand.cursor_offset) AS ok FROM q
), locked AS (
	SELECT c.partition_id, cand.name, cand.next_offset, cand.last_consumed_at AS consumed_at,
		c.cursor_offset, c.lease_id, c.lease_expires_at, coalesce(c.lease_expires_at > now(), false) AS live,
		coalesce(c.lease_end, -1) AS lease_end, c.retry_count, c.acked, c.lease_key
	FROM cand JOIN queen.consumer_cursors c ON c.partition_id = cand.id AND c.consumer_group = $2
	WHERE (SELECT ok FROM fast) AND c.cursor_offset < cand.next_offset
		AND (c.lease_id IS NULL OR c.lease_expires_at <= now())
	ORDER BY cand.last_consumed_at NULLS FIRST, cand.id LIMIT $4
	FOR UPDATE OF c SKIP LOCKED
), claim AS (
	SELECT l.*, row_number() OVER (ORDER BY l.consumed_at NULLS FIRST, l.partition_id) AS ord,
		least(l.next_offset - l.cursor_offset, $5::bigint) AS avail
	FROM locked l
), share AS (
	SELECT claim.*, greatest(least(avail, $5::bigint - coalesce(sum(avail) OVER (ORDER BY ord
		ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::bigint), 0) AS share
	FROM claim
), sized AS (
	SELECT sh.ord, x.last_offset, sum(x.bytes) OVER (ORDER BY sh.ord, x.base_offset) - x.bytes AS before
	FROM share sh CROSS JOIN LATERAL (
		SELECT sg.base_offset, sg.last_offset, ` + segmentBytesSQL + ` AS bytes FROM queen.segments sg
		WHERE sg.partition_id = sh.partition_id AND sg.base_offset <= sh.cursor_offset + sh.share - 1
			AND sg.base_offset >= ` + segmentStartSQL("sh.partition_id", "sh.cursor_offset") + `) x
	WHERE sh.share > 0
), bounded AS (
	SELECT sh.*, CASE WHEN sh.share = 0 OR NOT EXISTS (SELECT 1 FROM sized z WHERE z.ord = sh.ord) THEN sh.share
		ELSE greatest(least(sh.share, coalesce((SELECT max(z.last_offset) FROM sized z WHERE z.ord = sh.ord AND z.before < $6::bigint),
			sh.cursor_offset - 1) - sh.cursor_offset + 1), 0) END AS take
	FROM share sh
)
SELECT q.id, q.name, q.lease_time, q.retry_limit, q.delayed_processing, q.window_buffer, (SELECT ok FROM fast),
	(SELECT count(*) FROM cand),
	b.partition_id, b.name, b.next_offset, b.cursor_offset, b.lease_id, b.lease_expires_at, b.live, b.lease_end,
	b.retry_count, b.acked, b.lease_key, b.take, false, false, s.base_offset, s.last_offset, s.body
FROM q
LEFT JOIN bounded b ON b.take > 0
LEFT JOIN LATERAL (
	SELECT sg.base_offset, sg.last_offset, sg.body FROM queen.segments sg
	WHERE sg.partition_id = b.partition_id AND sg.base_offset <= b.cursor_offset + b.take - 1
		AND sg.base_offset >= ` + segmentStartSQL("b.partition_id", "b.cursor_offset") + `
	ORDER BY sg.base_offset
) s ON true
ORDER BY b.ord, s.base_offset`

// claimOneSQL is claimSQL for pops of one partition each: one pop ($4 is
// 1), or a combined pop (pg/popcombine.go: $4 pops, one partition each).
// Each cursor locked takes up to $5 (the batch of one pop: no sharing),
// in claim order, and no more than the byte bound $9 allows
// (boundedTakeSQL). It is lighter than claimSQL, and does the pop's cursor
// write in the same statement where it is already known: the locked cursor is "clean" when it holds no lease (not even a
// lapsed one, whose retry count the general rules must apply), no offset
// at or past it is deleted (tombstones), and the segment holding it is
// stored (retention removed nothing at the cursor); then every offset
// cursor..cursor+take-1 is stored and delivered, and the statement writes
// the cursor as popPartition would: with $6 (autoAck) the cursor moves
// past them and counts them consumed; otherwise the lease $7 (a seed,
// bound in SQL to the row's lease_key as bindLeaseID binds it, so the
// caller knows the id written: pg/leasekey.go) covers them
// for the queue's lease time ($8 when it is 0). The row then says updated,
// and all the pop's transaction still needs is COMMIT (sent with the claim
// by a leased pop, popOneTrip; after decoding by an autoAck pop, whose
// cursor move cannot be given back). A cursor that is not clean is
// returned locked, not written (deleted says a tombstone is at or past
// it: its messages must be read with fetch, which leaves deleted ones
// out), and popPartition applies the general rules to it. Fresh
// candidates, a group not yet subscribed, delayed processing and window
// buffers make it lock nothing (fast false), as claimSQL does.
var claimOneSQL = `WITH q AS (
	SELECT qu.id, qu.name, qu.lease_time, qu.retry_limit, qu.delayed_processing, qu.window_buffer,
		($2 = '` + QueueModeGroup + `' OR EXISTS (SELECT 1 FROM queen.consumer_groups g
			WHERE g.queue_id = qu.id AND g.consumer_group = $2)) AS joined
	FROM queen.queues qu WHERE qu.name = $1
), cand AS (
	SELECT p.id, p.name, p.next_offset, c.partition_id IS NULL AS fresh, c.last_consumed_at
	FROM q JOIN queen.partitions p ON p.queue_id = q.id
	LEFT JOIN queen.consumer_cursors c ON c.partition_id = p.id AND c.consumer_group = $2
	WHERE p.next_offset > coalesce(c.cursor_offset, 0) AND (c.lease_id IS NULL OR c.lease_expires_at <= now())
	ORDER BY c.last_consumed_at NULLS FIRST, p.id LIMIT $3
), fast AS (
	SELECT q.joined AND q.delayed_processing = 0 AND q.window_buffer = 0
		AND NOT EXISTS (SELECT 1 FROM cand WHERE cand.fresh) AS ok FROM q
), locked AS (
	SELECT cd.ord, c.partition_id, cd.name, cd.next_offset, c.cursor_offset, c.lease_id, c.lease_expires_at,
		coalesce(c.lease_expires_at > now(), false) AS live, coalesce(c.lease_end, -1) AS lease_end, c.retry_count,
		c.acked, c.lease_key, least(cd.next_offset - c.cursor_offset, $5::bigint,
			CASE WHEN $5::bigint > 1 AND cd.next_offset - c.cursor_offset > 1 THEN
				` + boundedTakeSQL("c.partition_id", "c.cursor_offset", "least(cd.next_offset - c.cursor_offset, $5::bigint)", "$9::bigint") + ` END) AS take,
		EXISTS (SELECT 1 FROM queen.tombstones t WHERE t.partition_id = c.partition_id
			AND t.msg_offset >= c.cursor_offset) AS deleted
	FROM (SELECT *, row_number() OVER (ORDER BY cand.last_consumed_at NULLS FIRST, cand.id) AS ord
		FROM cand WHERE (SELECT ok FROM fast) ORDER BY cand.last_consumed_at NULLS FIRST, cand.id) cd
	CROSS JOIN LATERAL (SELECT * FROM queen.consumer_cursors c
		WHERE c.partition_id = cd.id AND c.consumer_group = $2 AND c.cursor_offset < cd.next_offset
			AND (c.lease_id IS NULL OR c.lease_expires_at <= now())
		FOR UPDATE SKIP LOCKED) c
	LIMIT $4
), upd AS (
	UPDATE queen.consumer_cursors c SET acked = '{}',
		cursor_offset = CASE WHEN $6 THEN l.cursor_offset + l.take ELSE l.cursor_offset END,
		retry_count = CASE WHEN $6 THEN 0 ELSE c.retry_count END,
		lease_id = CASE WHEN $6 THEN NULL ELSE ` + leaseIDSQL("$7::uuid", "c.lease_key") + ` END,
		lease_expires_at = CASE WHEN $6 THEN NULL
			ELSE now() + make_interval(secs => (SELECT CASE WHEN q.lease_time > 0 THEN q.lease_time
				ELSE $8::int END FROM q)) END,
		lease_end = CASE WHEN $6 THEN NULL ELSE l.cursor_offset + l.take - 1 END,
		last_consumed_at = CASE WHEN $6 THEN now() ELSE c.last_consumed_at END,
		total_consumed = c.total_consumed + CASE WHEN $6 THEN l.take ELSE 0 END
	FROM locked l
	WHERE c.partition_id = l.partition_id AND c.consumer_group = $2 AND l.lease_id IS NULL AND NOT l.deleted
		AND ` + offsetStoredSQL("l.partition_id", "l.cursor_offset") + `
	RETURNING c.partition_id
)
SELECT q.id, q.name, q.lease_time, q.retry_limit, q.delayed_processing, q.window_buffer, (SELECT ok FROM fast),
	(SELECT count(*) FROM cand),
	b.partition_id, b.name, b.next_offset, b.cursor_offset, b.lease_id, b.lease_expires_at, b.live, b.lease_end,
	b.retry_count, b.acked, b.lease_key, b.take, b.partition_id IN (SELECT partition_id FROM upd), b.deleted,
	s.base_offset, s.last_offset, s.body
FROM q
LEFT JOIN locked b ON true
LEFT JOIN LATERAL (
	SELECT sg.base_offset, sg.last_offset, sg.body FROM queen.segments sg
	WHERE NOT b.deleted AND sg.partition_id = b.partition_id AND sg.base_offset <= b.cursor_offset + b.take - 1
		AND sg.base_offset >= ` + segmentStartSQL("b.partition_id", "b.cursor_offset") + `
) s ON true
ORDER BY b.ord, s.base_offset`

// claimedCursor is one cursor claimSQL locked, with the segments holding
// offsets cursor..cursor+take-1.
type claimedCursor struct {
	id   uuid.UUID
	name string
	cursorRow
	take int
	segs []claimedSegment
	// updated: claimOneSQL wrote the cursor for offsets
	// cursor..cursor+take-1 (delivered under the pop's lease, or consumed
	// with autoAck); popPartition queues no write of its own.
	updated bool
	// deleted: an offset at or past the cursor is deleted; segs is empty
	// and popPartition reads with fetch.
	deleted bool
}

type claimedSegment struct {
	base, last int64
	body       []byte
}

// messages appends to out[:0] the claimed offsets from..to (those
// outside what was read are absent, as fetch leaves out offsets whose
// segment is gone), growing it at most once.
func (c *claimedCursor) messages(out []StoredMessage, from, to int64) ([]StoredMessage, error) {
	out = out[:0]
	if to < from {
		return out, nil
	}
	out = slices.Grow(out, int(to-from+1))
	for _, sg := range c.segs {
		if sg.last < from || sg.base > to {
			continue
		}
		var err error
		if out, err = appendSegmentOffsets(out, c.id, sg.base, sg.last, sg.body, from, to); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// deliverClaimed is popPartition for a cursor the claim statement wrote
// (pre.updated: claimOneSQL found it clean, see there): offsets
// cursor..cursor+take-1 are all stored and none is deleted, the queue has
// no delayed processing or window buffer, and the cursor held no lease,
// so what popPartition would do comes down to decoding exactly those
// offsets (and decrypting). They are decoded straight into the answer's
// []PoppedMessage, aliasing the segment bodies (no scratch slice copied
// afterwards), appended to dst (nil: a slice of its own). Anything else
// read (an offset missing from the segments, a gap) is the error
// popPartition reports for it.
func (s *Store) deliverClaimed(dst []PoppedMessage, q *queueRow, partName string, req PopRequest, leaseID uuid.UUID, pre *claimedCursor) ([]PoppedMessage, error) {
	first, last := pre.offset, pre.offset+int64(pre.take)-1
	if pre.take <= 0 {
		return nil, fmt.Errorf("claim wrote the cursor of partition %s for offsets %d..%d, but none were read",
			pre.id, first, last)
	}
	if dst == nil {
		dst = make([]PoppedMessage, 0, pre.take)
	}
	start := len(dst)
	for _, sg := range pre.segs {
		if sg.last < first || sg.base > last {
			continue
		}
		var err error
		if dst, err = decodeOffsets[PoppedMessage](dst, pre.id, sg.base, sg.last, sg.body, first, last); err != nil {
			return nil, err
		}
	}
	out := dst[start:]
	if len(out) != pre.take || (len(out) > 0 && (out[0].Offset != first || out[len(out)-1].Offset != last)) {
		got := "none"
		if len(out) > 0 {
			got = fmt.Sprintf("%d..%d (%d messages)", out[0].Offset, out[len(out)-1].Offset, len(out))
		}
		return nil, fmt.Errorf("claim wrote the cursor of partition %s for offsets %d..%d, but %s were read",
			pre.id, first, last, got)
	}
	if req.AutoAck {
		leaseID = uuid.Nil
	}
	for i := range out {
		m := &out[i]
		if m.Encrypted {
			one := []Message{m.Message}
			if err := s.decrypt(one); err != nil {
				return nil, err
			}
			m.Message = one[0]
		}
		m.Queue, m.Partition, m.LeaseID = q.name, partName, leaseID
	}
	return dst, nil
}

// growForClaimed is msgs grown to hold, beyond its length, every message
// of the cursors the claim wrote (their takes): what popTx decodes into.
func growForClaimed(msgs []PoppedMessage, cursors []*claimedCursor) []PoppedMessage {
	n := 0
	for _, cc := range cursors {
		if cc.updated {
			n += cc.take
		}
	}
	if n == 0 {
		return msgs
	}
	return slices.Grow(msgs, n)
}

// storedScratch holds the []StoredMessage a claimed pop decodes into
// before popPartition hands its messages out as []PoppedMessage (copies):
// reused from pop to pop instead of allocated, and scanned by the GC,
// once per pop. Scratch of more than maxStoredScratch messages is not
// kept.
var storedScratch = sync.Pool{New: func() any { return new([]StoredMessage) }}

const maxStoredScratch = 4096

// releaseStored clears the messages of scratch sp (so that it holds no
// segment body) and returns it to storedScratch.
func releaseStored(sp *[]StoredMessage) {
	clear(*sp)
	if cap(*sp) > maxStoredScratch {
		return
	}
	*sp = (*sp)[:0]
	storedScratch.Put(sp)
}

// claimResult is what claim read: q nil when the queue does not exist;
// fast false when the general path must run (see claimSQL); candidates
// is how many partitions had something to deliver, locked or not.
type claimResult struct {
	q          *queueRow
	fast       bool
	candidates int
	cursors    []*claimedCursor
}

// claim begins the pop's transaction on conn and runs claimSQL (or, for
// one partition, claimOneSQL with the pop's lease, uuid.Nil for autoAck),
// in one round trip. With commit (one partition only) the same round trip
// also commits: see popOneTrip; that round trip then runs under
// commitContext, as commitPop's does (a lease committed
// unseen would hold the messages until it lapsed and count a delivery
// attempt for a pop nobody received).
func claim(ctx context.Context, conn *pgx.Conn, req PopRequest, lease uuid.UUID, commit bool) (*claimResult, error) {
	var b pgx.Batch
	b.Queue("BEGIN")
	queueClaim(&b, req, lease)
	if commit {
		b.Queue("COMMIT")
		var cancel context.CancelFunc
		ctx, cancel = commitContext(ctx)
		defer cancel()
	}
	br := conn.SendBatch(ctx, &b)
	defer br.Close()
	rows, err := queryAfterBegin(br, true)
	if err != nil {
		return nil, err
	}
	res, err := scanClaim(rows)
	if err != nil {
		return nil, err
	}
	if commit {
		if err := br.Close(); err != nil {
			return nil, err
		}
		if st := conn.PgConn().TxStatus(); st != 'I' {
			return nil, fmt.Errorf("commit did not end the transaction (status %q)", st)
		}
	}
	return res, nil
}

// queueClaim queues req's claim statement on b (claimOneSQL or claimSQL,
// see claim).
func queueClaim(b *pgx.Batch, req PopRequest, lease uuid.UUID) {
	switch {
	case req.Partitions == 1:
		b.Queue(claimOneSQL, req.Queue, req.Group, req.Partitions*4+16, req.Partitions, req.Batch, req.AutoAck,
			pgtype.UUID{Bytes: lease, Valid: lease != uuid.Nil}, DefaultLeaseSeconds, req.MaxBytes)
	case req.perPartition > 0:
		// A combined pop: one partition per pop, each up to its batch
		// and byte bound.
		b.Queue(claimOneSQL, req.Queue, req.Group, req.Partitions*4+16, req.Partitions, req.perPartition, req.AutoAck,
			pgtype.UUID{Bytes: lease, Valid: lease != uuid.Nil}, DefaultLeaseSeconds, req.MaxBytes)
	default:
		b.Queue(claimSQL, req.Queue, req.Group, req.Partitions*4+16, req.Partitions, req.Batch, req.MaxBytes)
	}
}

// scanClaim reads a claim statement's rows (closing them). The queue
// columns repeat on every row and a cursor's columns on each of its
// segments' rows: the first row is scanned whole, and each later one only
// for its partition and segment (and its cursor columns when the
// partition changes), into values that need no allocation (pgx skips nil
// destinations); a segment's body is the one copy made per row.
func scanClaim(rows pgx.Rows) (*claimResult, error) {
	defer rows.Close()
	res := &claimResult{}
	var cur *claimedCursor
	var (
		q                                        queueRow
		qid, pid, lease                          pgtype.UUID
		name                                     pgtype.Text
		next, cursor, leaseEnd, take, base, last pgtype.Int8
		leaseKey                                 pgtype.Int8
		retries                                  pgtype.Int8
		live, updated, deleted                   pgtype.Bool
		c                                        cursorRow
		body                                     []byte
	)
	all := []any{&qid, &q.name, &q.leaseTime, &q.retryLimit, &q.delayed, &q.windowBuffer, &res.fast, &res.candidates,
		&pid, &name, &next, &cursor, &lease, &c.leaseExpires, &live, &leaseEnd, &retries, &c.acked, &leaseKey, &take,
		&updated, &deleted, &base, &last, &body}
	const pidCol, firstCursorCol, lastCursorCol, baseCol = 8, 9, 21, 22
	seg := make([]any, len(all))
	seg[pidCol] = all[pidCol]
	copy(seg[baseCol:], all[baseCol:])
	cursorCols := make([]any, len(all))
	copy(cursorCols[firstCursorCol:lastCursorCol+1], all[firstCursorCol:lastCursorCol+1])
	for rows.Next() {
		first := res.q == nil
		dest := seg
		if first {
			dest = all
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if first {
			q.id = qid.Bytes
			if q.leaseTime <= 0 {
				q.leaseTime = DefaultLeaseSeconds
			}
			res.q = &q
		}
		if !pid.Valid {
			continue
		}
		if cur == nil || cur.id != uuid.UUID(pid.Bytes) {
			if !first {
				c = cursorRow{}
				if err := rows.Scan(cursorCols...); err != nil {
					return nil, err
				}
			}
			if !cursor.Valid || !next.Valid || !live.Valid || !leaseEnd.Valid || !retries.Valid || !name.Valid || !take.Valid || !leaseKey.Valid {
				return nil, fmt.Errorf("claim: partition %s: NULL cursor column", uuid.UUID(pid.Bytes))
			}
			c.offset, c.nextOffset, c.live, c.leaseEnd, c.retries = cursor.Int64, next.Int64, live.Bool, leaseEnd.Int64, int(retries.Int64)
			c.leaseKey = leaseKey.Int64
			c.leaseID = optUUID(lease)
			cur = &claimedCursor{id: pid.Bytes, name: name.String, cursorRow: c, take: int(take.Int64),
				updated: updated.Valid && updated.Bool, deleted: deleted.Valid && deleted.Bool}
			res.cursors = append(res.cursors, cur)
		}
		if base.Valid {
			cur.segs = append(cur.segs, claimedSegment{base.Int64, last.Int64, body})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return res, nil
}

// ackLoadSQL locks the cursors of keys ($1 partitions, $2 groups, in the
// caller's fixed order: FOR UPDATE in that order, so concurrent acks
// cannot deadlock) and returns, for each key whose partition exists, its
// queue and partition, its cursor (NULL columns when the group has none)
// and, while the cursor holds a live lease, the segments of offsets
// cursor..lease_end: one row per (key, segment), in key order.
var ackLoadSQL = `WITH k AS (
	SELECT * FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS k(pid, grp, ord)
)` + ackLoadBody

// ackLoadOneSQL is ackLoadSQL for one key ($1 partition, $2 group).
var ackLoadOneSQL = `WITH k AS (SELECT $1::uuid AS pid, $2::text AS grp, 1::bigint AS ord)` + ackLoadBody

var ackLoadBody = `, locked AS (
	SELECT k.ord, c.cursor_offset, c.lease_id, c.lease_expires_at, coalesce(c.lease_expires_at > now(), false) AS live,
		coalesce(c.lease_end, -1) AS lease_end, c.retry_count, c.acked
	FROM k JOIN queen.consumer_cursors c ON c.partition_id = k.pid AND c.consumer_group = k.grp
	ORDER BY k.ord
	FOR UPDATE OF c
)
SELECT k.ord, q.name, p.name, q.retry_limit, p.next_offset, l.ord IS NOT NULL, l.cursor_offset, l.lease_id,
	l.lease_expires_at, l.live, l.lease_end, l.retry_count, l.acked, s.base_offset, s.last_offset, s.body, s.deleted
FROM k JOIN queen.partitions p ON p.id = k.pid JOIN queen.queues q ON q.id = p.queue_id
LEFT JOIN locked l ON l.ord = k.ord
LEFT JOIN LATERAL (
	SELECT sg.base_offset, sg.last_offset, sg.body,
		ARRAY(SELECT t.msg_offset FROM queen.tombstones t WHERE t.partition_id = k.pid
			AND t.msg_offset BETWEEN greatest(sg.base_offset, l.cursor_offset) AND least(sg.last_offset, l.lease_end)
			ORDER BY t.msg_offset) AS deleted
	FROM queen.segments sg
	WHERE l.live AND l.lease_id IS NOT NULL AND sg.partition_id = k.pid AND sg.base_offset <= l.lease_end
		AND sg.base_offset >= ` + segmentStartSQL("k.pid", "l.cursor_offset") + `
	ORDER BY sg.base_offset
) s ON true
ORDER BY k.ord, s.base_offset`

// loadAckCursors runs ackLoadSQL for keys (after BEGIN, in the same round
// trip, when begin is set) and returns one ackState per key, in order:
// gone when the partition does not exist; c nil when the group has no
// cursor there; msgs the messages of a live lease.
func loadAckCursors(ctx context.Context, tx dbtx, keys []ackKey, begin bool) ([]*ackState, error) {
	pids := make([]pgtype.UUID, len(keys))
	groups := make([]string, len(keys))
	out := make([]*ackState, len(keys))
	for i, k := range keys {
		pids[i], groups[i] = pgtype.UUID{Bytes: k.pid, Valid: true}, k.group
		out[i] = &ackState{gone: true}
	}
	var b pgx.Batch
	if begin {
		b.Queue("BEGIN")
	}
	if len(keys) == 1 {
		// The usual ack batch: one pop's messages, one cursor. With
		// scalar keys PostgreSQL plans the statement once (a generic
		// plan of index lookups); with arrays it plans it afresh on every
		// call (measured: 0.67 ms of planning per ack of 100 messages, as
		// long as the execution), and a forced generic plan of the array
		// form scans consumer_cursors whole.
		b.Queue(ackLoadOneSQL, pids[0], groups[0])
	} else {
		b.Queue(ackLoadSQL, pids, groups)
	}
	br := tx.SendBatch(ctx, &b)
	defer br.Close()
	rows, err := queryAfterBegin(br, begin)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var ord int64
		var qname, pname string
		var retryLimit int
		var next int64
		var has bool
		var cursor, leaseEnd, base, last *int64
		var lease pgtype.UUID
		var live *bool
		var retries *int
		var c cursorRow
		var body []byte
		var deleted []int64
		if err := rows.Scan(&ord, &qname, &pname, &retryLimit, &next, &has, &cursor, &lease, &c.leaseExpires, &live,
			&leaseEnd, &retries, &c.acked, &base, &last, &body, &deleted); err != nil {
			return nil, err
		}
		st := out[ord-1]
		if st.gone {
			st.gone, st.queueName, st.partName, st.retryLimit = false, qname, pname, retryLimit
			if has {
				c.offset, c.nextOffset, c.live, c.leaseEnd, c.retries = *cursor, next, *live, *leaseEnd, *retries
				c.leaseID = optUUID(lease)
				st.c = &c
			}
		}
		if base != nil {
			n := len(st.msgs)
			if st.msgs, err = appendSegmentOffsets(st.msgs, keys[ord-1].pid, *base, *last, body, st.c.offset, st.c.leaseEnd); err != nil {
				return nil, err
			}
			if len(deleted) > 0 {
				// Deleted messages of the lease are not delivered and
				// count as acked (pg/tombstone.go).
				st.msgs = append(st.msgs[:n], slices.DeleteFunc(st.msgs[n:], func(m StoredMessage) bool { return slices.Contains(deleted, m.Offset) })...)
				st.deleted = append(st.deleted, deleted...)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ack load: %w", err)
	}
	return out, nil
}

// optUUID is u as a *uuid.UUID: nil for SQL NULL (a cursor without a
// lease), else a pointer to a copy of its bytes.
func optUUID(u pgtype.UUID) *uuid.UUID {
	if !u.Valid {
		return nil
	}
	id := uuid.UUID(u.Bytes)
	return &id
}

// queryAfterBegin reads br's BEGIN result first when begin (an error of
// BEGIN is returned as is) and returns the rows of the next statement.
func queryAfterBegin(br pgx.BatchResults, begin bool) (pgx.Rows, error) {
	if begin {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	return br.Query()
}

// segmentBytesSQL is the size in bytes of segment sg once read: its plain
// (version-1) body's length, or for a segment written without it (by a
// broker before plain_bytes) the stored body's length.
const segmentBytesSQL = `coalesce(sg.plain_bytes, octet_length(sg.body))`

// boundedTakeSQL is how many offsets from cursor of partition pid a pop
// may take under its byte bound maxBytes (all SQL expressions; take is
// what it would take without the bound): the segments holding
// cursor..cursor+take-1 are summed in offset order (segmentBytesSQL), and
// the take ends with the first segment that brings the sum to maxBytes,
// so that a pop's answer holds at most maxBytes plus one segment (a
// segment is at most one projector batch of one partition) and always
// the first segment's messages, however large (a message larger than the
// bound is delivered alone, never stuck). NULL when the segments of the
// whole take stay under maxBytes (least() then ignores it). The bound is
// QUEEN_MAX_POP_BYTES (PopRequest.MaxBytes); docs/consume.md, "How much
// one pop returns".
func boundedTakeSQL(pid, cursor, take, maxBytes string) string {
	return `(SELECT greatest(x.last_offset - ` + cursor + ` + 1, 1) FROM (
				SELECT sg.last_offset, sum(` + segmentBytesSQL + `) OVER (ORDER BY sg.base_offset) AS run
				FROM queen.segments sg WHERE sg.partition_id = ` + pid + `
					AND sg.base_offset <= ` + cursor + ` + ` + take + ` - 1
					AND sg.base_offset >= ` + segmentStartSQL(pid, cursor) + `) x
				WHERE x.run >= ` + maxBytes + ` ORDER BY x.last_offset LIMIT 1)`
}

// segmentStartSQL is where a read of partition pid's offsets from at on
// begins (pid and at are SQL expressions): the base offset of the last
// segment starting at or before at, or at itself when there is none.
func segmentStartSQL(pid, at string) string {
	return `coalesce((SELECT s2.base_offset FROM queen.segments s2
			WHERE s2.partition_id = ` + pid + ` AND s2.base_offset <= ` + at + `
			ORDER BY s2.base_offset DESC LIMIT 1), ` + at + `)`
}

// offsetStoredSQL is the condition that offset at of partition pid (SQL
// expressions) lies in a stored segment: the last segment starting at or
// before at ends at or after it (retention deletes whole segments).
func offsetStoredSQL(pid, at string) string {
	return `(SELECT s.last_offset FROM queen.segments s WHERE s.partition_id = ` + pid + `
			AND s.base_offset <= ` + at + ` ORDER BY s.base_offset DESC LIMIT 1) >= ` + at
}
