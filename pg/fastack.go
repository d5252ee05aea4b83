package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// fastAckSQL completes a whole lease in one statement, when the cursor row
// is still exactly as the pop that took the lease left it: lease $5 live on
// (partition $1, group $2), the cursor at the lease's first offset $3, the
// lease ending at $4, nothing acked yet, no deleted offset (tombstone) in
// $3..$4, and the segments holding $3 and $4 still stored (retention
// deletes whole segments from a partition's old end, so none in between
// is gone either). It then does what the general path (applyAcks) does
// for a completed ack of every message of the lease: the cursor moves to
// $4+1, the retry count resets, the lease is released, the run counts as
// consumed, and a NOTIFY on $6 with the queue name $7 wakes the pops of
// other brokers at commit. It returns 1 when it applied, 0 when it
// changed nothing (the caller then takes the general path).
var fastAckSQL = `WITH u AS (
	UPDATE queen.consumer_cursors c SET cursor_offset = $4 + 1, retry_count = 0, lease_id = NULL,
		lease_expires_at = NULL, lease_end = NULL, acked = '{}', last_consumed_at = now(),
		total_consumed = c.total_consumed + ($4 - $3 + 1)
	WHERE c.partition_id = $1 AND c.consumer_group = $2 AND c.lease_id = $5 AND c.lease_expires_at > now()
		AND c.cursor_offset = $3 AND c.lease_end = $4 AND c.acked = '{}'
		AND NOT EXISTS (SELECT 1 FROM queen.tombstones t WHERE t.partition_id = $1 AND t.msg_offset BETWEEN $3 AND $4)
		AND ` + offsetStoredSQL("$1", "$3") + `
		AND ` + offsetStoredSQL("$1", "$4") + `
	RETURNING 1
)
SELECT count(*) FROM u, LATERAL (SELECT pg_notify($6, $7)) n`

// fastAck applies reqs in one round trip (BEGIN, fastAckSQL, COMMIT) when
// they are the common batch ack: every message of one lease this broker
// handed out (the lease memo knows its transactionIds, see leaseMemo),
// each once, all completed/success, under one (partition, group) and, when
// given, that lease. ok false: reqs are not that shape, or the cursor row
// was not as the pop left it; nothing was changed and the caller runs the
// general path (ackTx), which gives the same answers a fast ack would.
// The results are the general path's: every ack succeeds, and the last
// one releases the lease (it completes the run; the earlier ones leave a
// gap open).
func (s *Store) fastAck(ctx context.Context, reqs []AckRequest) ([]AckResult, bool, error) {
	e := s.fastAckEntry(reqs)
	if e == nil {
		return nil, false, nil
	}
	return s.fastAckCombined(ctx, reqs, e)
}

// fastAckEntry is the lease memo's entry for reqs when they are the
// common batch ack fastAck applies to, else nil.
func (s *Store) fastAckEntry(reqs []AckRequest) *leaseMemoEntry {
	if len(reqs) == 0 {
		return nil
	}
	r0 := reqs[0]
	e := s.leases.get(r0.PartitionID, r0.Group, r0.LeaseID)
	if e == nil || int64(len(reqs)) != e.last-e.first+1 {
		return nil
	}
	seen := make([]bool, len(reqs))
	for i, r := range reqs {
		switch r.Status {
		case "", AckCompleted, AckSuccess:
		default:
			return nil
		}
		if r.PartitionID != r0.PartitionID || r.Group != r0.Group || (r.LeaseID != nil && *r.LeaseID != e.key.lease) {
			return nil
		}
		off := e.offsetOf(r.TransactionID, i)
		if off < 0 || seen[off-e.first] {
			return nil
		}
		seen[off-e.first] = true
	}
	return e
}

// queueFastAck queues fastAckSQL for the lease of entry e on b.
func queueFastAck(b *pgx.Batch, e *leaseMemoEntry) {
	b.Queue(fastAckSQL, e.key.partition, e.group, e.first, e.last, pgtype.UUID{Bytes: e.key.lease, Valid: true},
		NotifyChannel, e.queueName)
}

// fastAckResults are the answers to the n acks of e's whole lease when
// fastAckSQL applied: every ack succeeds, the last releases the lease.
func fastAckResults(e *leaseMemoEntry, n int) []AckResult {
	out := make([]AckResult, n)
	for i := range out {
		out[i] = AckResult{Success: true, QueueName: e.queueName, PartitionName: e.partName}
	}
	out[len(out)-1].LeaseReleased = true
	return out
}

// fastAckAlone runs fastAckSQL for reqs (entry e) in a transaction of its
// own: BEGIN, the lock timeout of combined acks, the statement and COMMIT
// in one round trip. While it runs, the whole-lease acks of its queue
// queue behind it (pg/ackcombine.go), so a cursor row held by a slow
// transaction must not hold it up: past ackCombineLockTimeout it changes
// nothing and answers ok false (the caller takes the general path, which
// waits for the row under the call's own context, no longer holding up
// the others).
func (s *Store) fastAckAlone(ctx context.Context, reqs []AckRequest, e *leaseMemoEntry) ([]AckResult, bool, error) {
	res, ok, err := s.fastAckTx(ctx, reqs, e)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == codeLockNotAvailable {
		return nil, false, nil
	}
	return res, ok, err
}

// codeLockNotAvailable is the SQLSTATE of a lock wait past lock_timeout.
const codeLockNotAvailable = "55P03"

// fastAckTx is fastAckAlone's transaction.
func (s *Store) fastAckTx(ctx context.Context, reqs []AckRequest, e *leaseMemoEntry) ([]AckResult, bool, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	// A connection released inside a transaction (an error below) is
	// closed by the pool, which rolls the transaction back.
	defer pc.Release()
	tx := pc.Conn()
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue("SET LOCAL lock_timeout = '" + ackCombineLockTimeout + "'")
	queueFastAck(&b, e)
	var n int
	b.Queue("COMMIT")
	br := tx.SendBatch(ctx, &b)
	for range 2 { // BEGIN, SET LOCAL
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, false, err
		}
	}
	if err := br.QueryRow().Scan(&n); err != nil {
		br.Close()
		return nil, false, err
	}
	if err := br.Close(); err != nil {
		return nil, false, err
	}
	if st := tx.PgConn().TxStatus(); st != 'I' {
		return nil, false, fmt.Errorf("commit did not end the transaction (status %q)", st)
	}
	s.leases.forget(e.key.partition, e.key.lease)
	if n == 0 {
		return nil, false, nil
	}
	s.leases.applied.Add(1)
	return fastAckResults(e, len(reqs)), true, nil
}
