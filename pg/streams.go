package pg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Streams is the server side of Queen's stream runtime (/streams/v1/*):
// the query registry, the per-shard state and the atomic cycle. The
// operators themselves run in the client.
//
// Table layout (schema.sql):
//
//	queen.stream_queries  id uuid PK, name text UNIQUE, source_queue text,
//	                      sink_queue text NULL, config_hash text (opaque),
//	                      created_at, updated_at
//	queen.stream_state    (query_id → stream_queries, partition_id →
//	                      partitions, key text COLLATE "C") PK,
//	                      value bytea (the client's JSON, byte for byte),
//	                      window_end float8 NULL (value.windowEnd when the
//	                      value is an object with a numeric windowEnd),
//	                      updated_at
//
// A shard is (query, source partition): every state row, state op and
// read is scoped to one. Progress is not kept here: the source partition's
// consumer cursor for the cycle's consumer group (queen.consumer_cursors)
// is the stream's position, moved by the cycle's ack in the same
// transaction as the state ops and the sink push.
type Streams struct {
	s *Store
}

// MaxShardStateBytes is the most state one shard (query, source
// partition) may hold, its keys and values as stored; it is also the most
// one GetState answers. The SDKs read a shard's whole state before each
// batch (state/get without keys), so a shard must stay small enough to be
// read within QUEEN_DB_TIMEOUT_MS and held in the broker's memory: 8 MiB is
// tens of thousands of open windows of the SDKs' aggregates, which hold
// tens to hundreds of bytes each (docs/decisions.md, "Stream state
// limits").
const MaxShardStateBytes = 8 << 20

// NewStreams returns the streams storage on s's pool.
func NewStreams(s *Store) *Streams { return &Streams{s: s} }

// RegisterRequest is POST /streams/v1/queries.
type RegisterRequest struct {
	Name, SourceQueue, ConfigHash string
	// SinkQueue is "" for none (stored as NULL).
	SinkQueue string
	// Reset wipes the query's state when ConfigHash differs from the stored
	// one (and only then).
	Reset bool
}

// RegisterResult is a registration's outcome. Mismatch means the name is
// registered with another config hash and Reset was false: nothing
// changed, ID is the existing query's.
type RegisterResult struct {
	ID       uuid.UUID
	Fresh    bool // no query of this name existed
	Reset    bool // the state was wiped for a new config hash
	Mismatch bool
}

// Register registers a query by name (Queen's register semantics, see
// docs/streams.md): a new name is inserted (Fresh); the same hash updates
// the queue names; a different hash is a Mismatch unless Reset, which
// deletes every state row of the query and stores the new hash (Reset).
// Reset with the same hash wipes nothing. Cursors, the sink queue and the
// id are never touched. Concurrent first registrations are serialised by
// the name's unique index and the row lock: one is Fresh, the others see
// its hash.
func (st *Streams) Register(ctx context.Context, r RegisterRequest) (*RegisterResult, error) {
	var sink *string
	if r.SinkQueue != "" {
		sink = &r.SinkQueue
	}
	var res RegisterResult
	err := withRetry(false, func() error {
		return pgx.BeginFunc(ctx, st.s.pool, func(tx pgx.Tx) error {
			res = RegisterResult{}
			var id pgtype.UUID
			err := tx.QueryRow(ctx, `INSERT INTO queen.stream_queries (name, source_queue, sink_queue, config_hash)
				VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING RETURNING id`,
				r.Name, r.SourceQueue, sink, r.ConfigHash).Scan(&id)
			if err == nil {
				res.ID, res.Fresh = id.Bytes, true
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			var hash string
			if err := tx.QueryRow(ctx, `SELECT id, config_hash FROM queen.stream_queries WHERE name = $1 FOR UPDATE`,
				r.Name).Scan(&id, &hash); err != nil {
				return err
			}
			res.ID = id.Bytes
			switch {
			case hash == r.ConfigHash:
			case !r.Reset:
				res.Mismatch = true
				return nil
			default:
				if _, err := tx.Exec(ctx, `DELETE FROM queen.stream_state WHERE query_id = $1`, id); err != nil {
					return err
				}
				res.Reset = true
			}
			_, err = tx.Exec(ctx, `UPDATE queen.stream_queries SET source_queue = $2, sink_queue = $3, config_hash = $4,
				updated_at = now() WHERE id = $1`, id, r.SourceQueue, sink, r.ConfigHash)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("pg: register stream query: %w", err)
	}
	return &res, nil
}

// StateOp is one state operation of a cycle: an upsert of Key to Value
// (JSON bytes, stored verbatim) or, with Delete, a delete of Key.
type StateOp struct {
	Delete bool
	Key    string
	Value  []byte
	// WindowEnd is the value's numeric "windowEnd" (nil when it has none),
	// read by GetState's RipeAtOrBefore.
	WindowEnd *float64
}

// CycleAck is the source ack a cycle carries: cumulative up to and
// including the message TransactionID of the cycle's source partition.
type CycleAck struct {
	TransactionID string
	// LeaseID is the pop's lease; nil when the client sent none (or "").
	LeaseID *uuid.UUID
	// Status is AckCompleted/AckSuccess (or "") or AckFailed/AckDLQ.
	Status string
	// Count is the client's batch size (>= 1): the source range of the
	// cycle is the Count offsets ending at the acked message, which names
	// the derived sink transactionIds.
	Count int
	Error string
}

// CycleRequest is POST /streams/v1/cycle, validated.
type CycleRequest struct {
	QueryID, PartitionID uuid.UUID
	Group                string
	// ReleaseLease ends the lease with the ack (Queen's default); false
	// keeps it (a gate's partial ack): the unacked rest of the lease is
	// redelivered, in order, when it lapses.
	ReleaseLease bool
	StateOps     []StateOp
	// Pushes are the sink items; a Message.TransactionID of "" is derived
	// (SinkTransactionID), so a replay is a duplicate in the sink partition.
	Pushes []ProjectItem
	Ack    *CycleAck
}

// CycleAckResult is what the ack did: Count offsets consumed (0 for a DLQ
// ack or an ack of what was already consumed).
type CycleAckResult struct {
	Count         int
	LeaseReleased bool
	DLQ           bool
}

// CycleResult is a committed cycle.
type CycleResult struct {
	// SourceQueue is the source partition's queue ("" when unknown).
	SourceQueue     string
	StateOpsApplied int
	Pushes          []Outcome
	PartitionIDs    []uuid.UUID // of Pushes
	Ack             *CycleAckResult
}

// CycleAbort is returned by Cycle when the cycle was refused and rolled
// back as a whole (Queen's success:false with error).
type CycleAbort struct{ Reason string }

func (e *CycleAbort) Error() string { return "cycle rolled back: " + e.Reason }

func abortf(format string, a ...any) error { return &CycleAbort{Reason: fmt.Sprintf(format, a...)} }

// SinkTransactionID is the dedup key of sink item index of a cycle that
// sent none: from the query, the source partition and the source range
// first..last when the cycle acks, else (an idle flush) from a digest of
// the cycle's content (state ops and sink items). A cycle replayed after a
// lost reply therefore pushes the same keys, and the sink partition's
// dedup window answers them duplicate instead of storing them twice.
func SinkTransactionID(query, partition uuid.UUID, first, last int64, flushDigest string, index int) string {
	if flushDigest != "" {
		return "stream:" + query.String() + ":" + partition.String() + ":flush:" + flushDigest + ":" + strconv.Itoa(index)
	}
	return "stream:" + query.String() + ":" + partition.String() + ":" + strconv.FormatInt(first, 10) + "-" +
		strconv.FormatInt(last, 10) + ":" + strconv.Itoa(index)
}

// FlushDigest is the content digest of an ack-less cycle (hex, 32 chars):
// SHA-256 over its state ops and its sink items' queue, partition and
// payload, length-prefixed.
func FlushDigest(ops []StateOp, pushes []ProjectItem) string {
	h := sha256.New()
	put := func(b []byte) {
		h.Write(strconv.AppendInt(nil, int64(len(b)), 10))
		h.Write([]byte{':'})
		h.Write(b)
	}
	for _, op := range ops {
		if op.Delete {
			put([]byte("d"))
		} else {
			put([]byte("u"))
		}
		put([]byte(op.Key))
		put(op.Value)
	}
	for _, p := range pushes {
		put([]byte(p.Queue))
		put([]byte(p.Partition))
		put(p.Message.Payload)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Cycle applies a stream cycle in ONE PostgreSQL transaction, all or
// nothing: the state ops of the shard (query, source partition) in order,
// the sink push, and the source ack. Any refusal rolls everything back and
// is returned as *CycleAbort.
//
// Order: the query must be registered; the shard is locked (advisory
// transaction lock), so cycles of one shard are serial; the ack is
// resolved and fenced (see below); the sink items get their derived
// transactionIds and are stored through the projection code (Store.project,
// the path of POST /api/v1/transaction: partition row locks, dedup probe,
// consecutive offsets, verbatim payloads, NOTIFY for long-polls); a
// duplicate is reported, not an abort; then the state ops and the cursor
// update. Sink items bypass the WAL: they must commit with the state and
// the ack, which the WAL cannot do.
//
// Ack fencing (docs/streams.md, "Exactly once", stricter than Queen): with a
// live lease on (partition, group), the ack must carry that lease's id; an
// empty leaseId does not skip the check. Without a live lease an ack with a
// leaseId is refused ("Invalid or expired lease": a replay after a committed
// cycle lands here), and one without is accepted only for a message already
// below the cursor (an autoAck pop), as a no-op. completed moves the cursor
// to just past the message (never backwards); failed/dlq dead-letters that
// message and moves the cursor past it, ending the lease.
func (st *Streams) Cycle(ctx context.Context, req CycleRequest) (*CycleResult, error) {
	s := st.s
	res := &CycleResult{}
	var err error
	if len(req.Pushes) > 0 {
		if res.PartitionIDs, err = s.partitionIDs(ctx, nil, req.Pushes, false); err != nil {
			return nil, fmt.Errorf("pg: cycle: %w", err)
		}
	}
	var digest string
	if req.Ack == nil {
		digest = FlushDigest(req.StateOps, req.Pushes)
	}
	pushes := make([]ProjectItem, len(req.Pushes))
	err = withRetry(false, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			res.SourceQueue, res.StateOpsApplied, res.Pushes, res.Ack = "", 0, nil, nil
			copy(pushes, req.Pushes)
			var one int
			err := tx.QueryRow(ctx, `SELECT 1 FROM queen.stream_queries WHERE id = $1`, req.QueryID).Scan(&one)
			if errors.Is(err, pgx.ErrNoRows) {
				return abortf("query_id %s is not registered (POST /streams/v1/queries first)", req.QueryID)
			}
			if err != nil {
				return err
			}
			var queueName *string
			err = tx.QueryRow(ctx, `SELECT q.name FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
				WHERE p.id = $1`, req.PartitionID).Scan(&queueName)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if queueName != nil {
				res.SourceQueue = *queueName
			}
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
				req.QueryID.String()+":"+req.PartitionID.String()); err != nil {
				return err
			}
			var ack *cycleAck
			if req.Ack != nil {
				if queueName == nil {
					return abortf("ack: %s", ErrTextNotFound)
				}
				if ack, err = resolveCycleAck(ctx, tx, req); err != nil {
					return err
				}
			}
			for i := range pushes {
				if pushes[i].Message.TransactionID != "" {
					continue
				}
				// A derived key is not a minted one (Message.MintedTxID).
				pushes[i].Message.MintedTxID = false
				if ack != nil {
					first := max(ack.offset-int64(max(req.Ack.Count, 1))+1, 0)
					pushes[i].Message.TransactionID = SinkTransactionID(req.QueryID, req.PartitionID, first, ack.offset, "", i)
				} else {
					pushes[i].Message.TransactionID = SinkTransactionID(req.QueryID, req.PartitionID, 0, 0, digest, i)
				}
			}
			if len(pushes) > 0 {
				out, err := s.project(ctx, tx, false, pushes, res.PartitionIDs, nil)
				if err != nil {
					return err
				}
				res.Pushes = out
			}
			if err := applyStateOps(ctx, tx, req, queueName != nil); err != nil {
				return err
			}
			res.StateOpsApplied = len(req.StateOps)
			if ack != nil {
				if res.Ack, err = ack.apply(ctx, tx, req); err != nil {
					return err
				}
			}
			return nil
		})
	})
	var abort *CycleAbort
	if errors.As(err, &abort) {
		return nil, abort
	}
	if err != nil {
		return nil, fmt.Errorf("pg: cycle: %w", err)
	}
	for i := range pushes {
		req.Pushes[i].Message.TransactionID = pushes[i].Message.TransactionID
	}
	return res, nil
}

func applyStateOps(ctx context.Context, tx pgx.Tx, req CycleRequest, partitionKnown bool) error {
	if len(req.StateOps) == 0 {
		return nil
	}
	var b pgx.Batch
	upserts := false
	for i, op := range req.StateOps {
		if op.Delete {
			b.Queue(`DELETE FROM queen.stream_state WHERE query_id = $1 AND partition_id = $2 AND key = $3`,
				req.QueryID, req.PartitionID, op.Key)
			continue
		}
		if !partitionKnown {
			return abortf("state_ops[%d]: partition_id %s is not a partition of this broker", i, req.PartitionID)
		}
		b.Queue(`INSERT INTO queen.stream_state (query_id, partition_id, key, value, window_end, updated_at)
			VALUES ($1, $2, $3, $4, $5, now())
			ON CONFLICT (query_id, partition_id, key) DO UPDATE
			SET value = excluded.value, window_end = excluded.window_end, updated_at = now()`,
			req.QueryID, req.PartitionID, op.Key, op.Value, op.WindowEnd)
		upserts = true
	}
	// With an upsert, the shard's size after the ops, in the same round
	// trip (deletes only shrink it). Cycles of one shard are serialised
	// (the advisory lock), so the sum is the shard's state after this
	// cycle.
	if upserts {
		b.Queue(`SELECT coalesce(sum(`+stateBytesSQL+`), 0) FROM queen.stream_state WHERE query_id = $1 AND partition_id = $2`,
			req.QueryID, req.PartitionID)
	}
	br := tx.SendBatch(ctx, &b)
	for range req.StateOps {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
	}
	var total int64
	if upserts {
		if err := br.QueryRow().Scan(&total); err != nil {
			br.Close()
			return err
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	if total > MaxShardStateBytes {
		return abortf("the state of this shard would hold %d bytes of keys and values, more than the %d (8 MiB) "+
			"one shard may hold: delete state the stream no longer needs", total, MaxShardStateBytes)
	}
	return nil
}

// cycleAck is a resolved (and fenced) cycle ack, its cursor row locked.
type cycleAck struct {
	offset  int64 // the acked message
	noop    bool  // already below the cursor, no lease involved
	cursor  int64
	retries int
	acked   []int64
	end     int64 // lease_end
}

// resolveCycleAck locks the cursor of (partition, group), fences the ack
// and finds the acked message's offset (see Cycle).
func resolveCycleAck(ctx context.Context, tx pgx.Tx, req CycleRequest) (*cycleAck, error) {
	a := req.Ack
	switch a.Status {
	case "", AckCompleted, AckSuccess, AckFailed, AckDLQ:
	default:
		return nil, abortf("Unknown ack.status: %s", a.Status)
	}
	var c cycleAck
	var lease pgtype.UUID
	var live bool
	err := tx.QueryRow(ctx, `SELECT cursor_offset, lease_id, coalesce(lease_expires_at > now(), false), coalesce(lease_end, -1),
		retry_count, acked FROM queen.consumer_cursors WHERE partition_id = $1 AND consumer_group = $2 FOR UPDATE`,
		req.PartitionID, req.Group).Scan(&c.cursor, &lease, &live, &c.end, &c.retries, &c.acked)
	noCursor := errors.Is(err, pgx.ErrNoRows)
	if err != nil && !noCursor {
		return nil, err
	}
	live = live && lease.Valid
	if live {
		if a.LeaseID == nil {
			return nil, abortf("%s: the partition is leased, the ack needs the pop's leaseId", ErrTextInvalidLease)
		}
		if *a.LeaseID != uuid.UUID(lease.Bytes) {
			return nil, abortf("%s", ErrTextInvalidLease)
		}
		msgs, err := fetch(ctx, tx, req.PartitionID, c.cursor, c.end)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.TransactionID == a.TransactionID {
				c.offset = m.Offset
				// Deleted messages after it count as acked (pg/tombstone.go).
				deleted, err := tombstonedIn(ctx, tx, req.PartitionID, m.Offset+1, c.end)
				if err != nil {
					return nil, err
				}
				c.acked = append(c.acked, deleted...)
				return &c, nil
			}
		}
		if off, ok, err := offsetOf(ctx, tx, req.PartitionID, a.TransactionID); err != nil {
			return nil, err
		} else if ok && off < c.cursor {
			return nil, abortf("%s", ErrTextAlreadyAcked)
		}
		return nil, abortf("%s", ErrTextNotFound)
	}
	if a.LeaseID != nil || noCursor {
		return nil, abortf("%s", ErrTextInvalidLease)
	}
	off, ok, err := offsetOf(ctx, tx, req.PartitionID, a.TransactionID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, abortf("%s", ErrTextNotFound)
	}
	if off >= c.cursor {
		return nil, abortf("%s: the message is not leased (pop it first)", ErrTextInvalidLease)
	}
	c.offset, c.noop = off, true
	return &c, nil
}

// offsetOf finds a stored, not deleted message of the partition by
// transactionId through the dedup sidecar (the latest message with that
// id, while its entry is kept).
func offsetOf(ctx context.Context, tx pgx.Tx, pid uuid.UUID, txid string) (int64, bool, error) {
	offs, err := sidecarOffsets(ctx, tx, pid, txid)
	if err != nil {
		return 0, false, err
	}
	for _, off := range offs { // newest first; a hash hit may be another key's
		msgs, err := fetch(ctx, tx, pid, off, off) // skips deleted offsets
		if err != nil {
			return 0, false, err
		}
		if len(msgs) == 1 && msgs[0].TransactionID == txid {
			return off, true, nil
		}
	}
	return 0, false, nil
}

// apply moves the cursor for a resolved ack (see Cycle).
func (c *cycleAck) apply(ctx context.Context, tx pgx.Tx, req CycleRequest) (*CycleAckResult, error) {
	if c.noop {
		return &CycleAckResult{}, nil
	}
	res := &CycleAckResult{}
	next := c.offset + 1
	release := req.ReleaseLease
	switch req.Ack.Status {
	case AckFailed, AckDLQ:
		reason := req.Ack.Error
		if reason == "" {
			reason = "sent to DLQ by stream cycle"
		}
		if _, err := deadLetter(ctx, tx, req.PartitionID, req.Group, c.offset, reason, c.retries); err != nil {
			return nil, err
		}
		res.DLQ, release = true, true
	}
	// Offsets acked out of order earlier (POST /api/v1/ack) right after
	// the new cursor are consumed too.
	for slices.Contains(c.acked, next) {
		next++
	}
	acked := slices.DeleteFunc(slices.Clone(c.acked), func(x int64) bool { return x < next })
	if acked == nil {
		acked = []int64{}
	}
	consumed := max(next-c.cursor, 0)
	if !res.DLQ {
		res.Count = int(consumed)
	}
	release = release || next > c.end
	res.LeaseReleased = release
	var err error
	if release {
		_, err = tx.Exec(ctx, `UPDATE queen.consumer_cursors SET cursor_offset = greatest(cursor_offset, $3), retry_count = 0,
			lease_id = NULL, lease_expires_at = NULL, lease_end = NULL, acked = '{}',
			last_consumed_at = now(), total_consumed = total_consumed + $4
			WHERE partition_id = $1 AND consumer_group = $2`, req.PartitionID, req.Group, next, consumed)
	} else {
		_, err = tx.Exec(ctx, `UPDATE queen.consumer_cursors SET cursor_offset = greatest(cursor_offset, $3), retry_count = 0,
			acked = $5, last_consumed_at = now(), total_consumed = total_consumed + $4
			WHERE partition_id = $1 AND consumer_group = $2`, req.PartitionID, req.Group, next, consumed, acked)
	}
	return res, err
}

// StateQuery is POST /streams/v1/state/get: the rows of one shard, by
// Keys (nil or empty: any), by a literal KeyPrefix ("" : any) and by
// RipeAtOrBefore (nil: any; else rows whose windowEnd is a number <= it),
// all combined.
type StateQuery struct {
	QueryID, PartitionID uuid.UUID
	Keys                 []string
	KeyPrefix            string
	RipeAtOrBefore       *float64
}

// StateRow is one state row; Value is the JSON stored, byte for byte.
type StateRow struct {
	Key       string
	Value     []byte
	UpdatedAt time.Time
}

// StateTooLargeError is GetState's error when the rows asked for hold more
// than MaxShardStateBytes of keys and values (state stored before the
// limit; a cycle cannot store more since).
type StateTooLargeError struct {
	Rows, Bytes int64
}

func (e *StateTooLargeError) Error() string {
	return fmt.Sprintf("the state asked for is %d bytes of keys and values in %d rows, more than the %d (8 MiB) "+
		"one state/get answers: ask for fewer keys or a narrower key_prefix", e.Bytes, e.Rows, MaxShardStateBytes)
}

// stateFilter is GetState's WHERE clause ($1..$5: query, partition, keys,
// prefix, ripe_at_or_before).
// stateBytesSQL is a state row's size as the shard limit counts it: its
// key and value, from the row header (octet_length does not detoast).
const stateBytesSQL = `octet_length(key) + octet_length(value)`

const stateFilter = `WHERE query_id = $1 AND partition_id = $2
		  AND ($3::text[] IS NULL OR key = ANY($3::text[]))
		  AND ($4::text IS NULL OR (key >= $4::text AND starts_with(key, $4::text)))
		  AND ($5::float8 IS NULL OR window_end <= $5::float8)`

// GetState reads state rows ordered by key, byte for byte (COLLATE "C").
// The prefix matches literally (starts_with: '%', '_' and '\' are plain
// characters). An unknown query or an empty shard has no rows. When the
// rows hold more than MaxShardStateBytes it returns *StateTooLargeError
// without reading them: their sizes are summed first (from the row
// headers, nothing detoasted), in the same snapshot.
func (st *Streams) GetState(ctx context.Context, q StateQuery) ([]StateRow, error) {
	var keys []string
	if len(q.Keys) > 0 {
		keys = q.Keys
	}
	var prefix *string
	if q.KeyPrefix != "" {
		prefix = &q.KeyPrefix
	}
	args := []any{q.QueryID, q.PartitionID, keys, prefix, q.RipeAtOrBefore}
	// One statement, one snapshot: the matching rows' count and size, and
	// the rows themselves only when the size is within the limit (the
	// lateral's condition on t is a one-time filter: nothing is read past
	// it).
	rows, err := st.s.pool.Query(ctx, `WITH t AS (SELECT count(*) AS n, coalesce(sum(`+stateBytesSQL+`), 0) AS b
			FROM queen.stream_state `+stateFilter+`)
		SELECT t.n, t.b, s.key, s.value, s.updated_at FROM t
		LEFT JOIN LATERAL (SELECT key, value, updated_at FROM queen.stream_state `+stateFilter+`
			AND t.b <= $6 ORDER BY key) s ON true
		ORDER BY s.key`, append(args, int64(MaxShardStateBytes))...)
	var out []StateRow
	var big StateTooLargeError
	if err == nil {
		for rows.Next() {
			var key *string
			var sr StateRow
			var at *time.Time
			if err = rows.Scan(&big.Rows, &big.Bytes, &key, &sr.Value, &at); err != nil {
				break
			}
			if key != nil {
				sr.Key, sr.UpdatedAt = *key, *at
				out = append(out, sr)
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pg: get stream state: %w", err)
	}
	if big.Bytes > MaxShardStateBytes {
		return nil, &big
	}
	return out, nil
}
