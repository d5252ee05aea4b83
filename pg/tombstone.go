package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Tombstones deletes single messages (DELETE
// /api/v1/messages/:partitionId/:transactionId).
//
// Messages are packed into segments (one row per projection batch and
// partition), so one message cannot be removed from its row without rewriting
// the segment under the pop path's feet. A deleted message is instead marked
// in queen.tombstones, keyed by (partition_id, msg_offset), with its
// transactionId. fetch (the read under pop, ack, dead-lettering, message
// lookup and traces) skips marked offsets, so the message is never delivered,
// acked, traced or shown again; a lease or cursor that reaches a marked
// offset passes over it as if it had been acked. The payload bytes stay in
// the segment until retention deletes it. The dedup sidecar is left alone:
// the transactionId stays a duplicate for the rest of its window
// (docs/streams.md, "Deleting one message"). Cost: one row (~60 bytes plus
// the transactionId) per deleted message, one index probe of the tombstones
// per segment row read, and one per partition or cursor a message count
// covers (the counts subtract the deleted messages: deletedCountsSQL below).
type Tombstones struct {
	s *Store
}

// NewTombstones returns the single-message delete on s's pool.
func NewTombstones(s *Store) *Tombstones { return &Tombstones{s: s} }

// DeleteMessage marks the stored message of partition pid with
// transactionId txid deleted, with its dead letters and traces. It returns
// false when there is no such (undeleted) message: an unknown partition,
// an unknown transactionId, or one deleted already. When several stored
// messages share the transactionId (dedup off, or after its window), the
// latest is deleted. The message is looked up through the dedup sidecar,
// the partition's leases, and else a scan of the partition's segments,
// newest first.
func (t *Tombstones) DeleteMessage(ctx context.Context, pid uuid.UUID, txid string) (bool, error) {
	deleted := false
	err := withRetry(true, func() error {
		return pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
			deleted = false
			m, err := t.s.findTracedMessage(ctx, tx, pid, txid)
			if errors.Is(err, ErrTraceMessageNotFound) {
				m, err = scanForMessage(ctx, tx, pid, txid)
			}
			if err != nil || m == nil {
				return err
			}
			tag, err := tx.Exec(ctx, `INSERT INTO queen.tombstones (partition_id, msg_offset, transaction_id)
				VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, pid, m.Offset, []byte(txid))
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM queen.dead_letters WHERE partition_id = $1 AND msg_offset = $2`, pid, m.Offset); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM queen.message_traces WHERE partition_id = $1 AND msg_offset = $2`, pid, m.Offset); err != nil {
				return err
			}
			deleted = true
			return nil
		})
	})
	if err != nil {
		return false, fmt.Errorf("pg: delete message: %w", err)
	}
	return deleted, nil
}

// scanForMessage reads the partition's segments newest first for the
// latest undeleted message with transactionId txid; nil when none. The
// segments are read in runs of about scanRunBytes of stored body (at least
// one segment each), one round trip a run, so that neither a partition of
// many small segments (a round trip per segment made 5,000 of them take
// 2.5 s) nor one of a few huge ones holds more than a run in memory.
func scanForMessage(ctx context.Context, tx pgx.Tx, pid uuid.UUID, txid string) (*StoredMessage, error) {
	rows, err := tx.Query(ctx, `SELECT base_offset, last_offset, octet_length(body) FROM queen.segments
		WHERE partition_id = $1 ORDER BY base_offset DESC`, pid)
	if err != nil {
		return nil, err
	}
	type seg struct {
		base, last int64
		size       int
	}
	segs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (seg, error) {
		var s seg
		err := r.Scan(&s.base, &s.last, &s.size)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	for len(segs) > 0 {
		n, size := 1, segs[0].size
		for n < len(segs) && size+segs[n].size <= scanRunBytes {
			size += segs[n].size
			n++
		}
		// segs[:n] are newest first: the run spans offsets from its last
		// segment's base to its first segment's last.
		msgs, err := fetch(ctx, tx, pid, segs[n-1].base, segs[0].last)
		if err != nil {
			return nil, err
		}
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].TransactionID == txid {
				return &msgs[i], nil
			}
		}
		segs = segs[n:]
	}
	return nil, nil
}

// scanRunBytes is how many bytes of stored segment bodies scanForMessage
// reads in one round trip.
const scanRunBytes = 4 << 20

// tombstonedIn returns the deleted offsets of partition pid in [from, to],
// ascending.
func tombstonedIn(ctx context.Context, tx dbtx, pid uuid.UUID, from, to int64) ([]int64, error) {
	rows, err := tx.Query(ctx, `SELECT msg_offset FROM queen.tombstones WHERE partition_id = $1
		AND msg_offset >= $2 AND msg_offset <= $3 ORDER BY msg_offset`, pid, from, to)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// The message counts (pg/admin.go, pg/resources.go, pg/status.go) exclude
// deleted messages by counting the tombstones in the offset range they
// count, per partition: one range scan of the tombstones' primary key
// (partition_id, msg_offset), which finds nothing and costs one index
// descent when the partition has no tombstone, and reads only the
// tombstones of stored messages when it has (those below the partition's
// first stored offset, whose segment retention removed, are not read).

// deletedCountsSQL is a LATERAL subquery (alias it) counting the
// tombstones of partition p (alias p, with its cursor as alias c, which
// may be a LEFT JOIN's NULLs) at offsets >= first, an SQL expression for
// the partition's first stored offset: column stored (all of them),
// pending (those at or after pendingFrom, an SQL expression >= first) and
// leased (those under c's live lease, cursor_offset..lease_end).
func deletedCountsSQL(first, pendingFrom string) string {
	return `LATERAL (SELECT count(*) AS stored,
		count(*) FILTER (WHERE t.msg_offset >= ` + pendingFrom + `) AS pending,
		count(*) FILTER (WHERE c.lease_expires_at > now() AND t.msg_offset >= c.cursor_offset
			AND t.msg_offset <= c.lease_end) AS leased
		FROM queen.tombstones t WHERE t.partition_id = p.id AND t.msg_offset >= ` + first + `)`
}

// deletedFromSQL is how many messages of partition pid (an SQL
// expression) at offsets >= from (an SQL expression) are deleted: one
// range scan of the tombstones' primary key.
func deletedFromSQL(pid, from string) string {
	return `(SELECT count(*) FROM queen.tombstones t WHERE t.partition_id = ` + pid + ` AND t.msg_offset >= ` + from + `)`
}

// deletedInSQL is how many messages of partition pid at offsets from..to
// (SQL expressions, both inclusive) are deleted: one range scan of the
// tombstones' primary key.
func deletedInSQL(pid, from, to string) string {
	return `(SELECT count(*) FROM queen.tombstones t WHERE t.partition_id = ` + pid + ` AND t.msg_offset >= ` + from +
		` AND t.msg_offset <= ` + to + `)`
}

// firstLiveAtSQL is a scalar subquery: the commit time of the first
// segment of partition pid holding an undeleted message at an offset >=
// from (pid and from SQL expressions), NULL when none does. The segment
// holding from starts the index range (segmentStartSQL), so it costs a
// probe or two of the segments' primary key, not a walk from the
// partition's start. skipLive, an SQL condition (say "the partition has
// no tombstone past from"), spares the per-segment tombstone count when
// true; "false" never spares it.
func firstLiveAtSQL(pid, from, skipLive string) string {
	return `(SELECT sg.created_at FROM queen.segments sg WHERE sg.partition_id = ` + pid + `
		AND sg.base_offset >= ` + segmentStartSQL(pid, from) + ` AND sg.last_offset >= ` + from + `
		AND (` + skipLive + ` OR ` + liveInSegmentSQL(from) + `)
		ORDER BY sg.base_offset LIMIT 1)`
}

// liveInSegmentSQL is the condition that segment sg (alias sg) holds a
// message at an offset >= from (an SQL expression) that is not deleted:
// the segment's offsets in that range outnumber its tombstones there.
func liveInSegmentSQL(from string) string {
	return `sg.last_offset - greatest(sg.base_offset, ` + from + `) + 1 > (SELECT count(*) FROM queen.tombstones t
		WHERE t.partition_id = sg.partition_id AND t.msg_offset >= greatest(sg.base_offset, ` + from + `)
		AND t.msg_offset <= sg.last_offset)`
}
