package pg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgUUIDs converts ids for binary encoding (google/uuid's driver.Valuer
// path costs an error allocation per element in pgx).
func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
}

// ErrPartitionGone is returned (wrapped) by Project when a cached partition
// row vanished (its queue was deleted); the cache entry is dropped, so the
// next attempt recreates it.
var ErrPartitionGone = errors.New("pg: partition row missing")

// ProjectItem is one item of a projector batch, in WAL order.
type ProjectItem struct {
	Queue, Partition string
	// AcceptedAtMicros is the broker's acceptance time (Unix µs) from the
	// WAL; the dedup window is measured with it.
	AcceptedAtMicros int64
	Message          Message
}

// Outcome is Project's result for one item.
type Outcome struct {
	Duplicate bool
	// MessageID is the stored id; for a duplicate the original's id, or
	// uuid.Nil when the original's segment no longer exists.
	MessageID uuid.UUID
	// Offset is the stored (or original) offset.
	Offset int64
}

type dedupKey struct {
	pid  uuid.UUID
	txid string
}

type dedupEntry struct {
	offset     int64
	id         uuid.UUID
	acceptedAt int64 // µs
	inBatch    bool
	// confirmed: read from the original's segment, which therefore exists.
	confirmed bool
}

type partState struct {
	id      uuid.UUID
	next    int64
	window  int64 // dedup window, µs; 0 = off
	base    int64
	msgs    []Message
	touched bool
	encrypt bool // the queue has encryptionEnabled
}

// Project stores one projector batch in one transaction and records cp as
// brokerID's checkpoint in the same transaction (cp.Index with cp.RecordCRC,
// the CRC-32C of that WAL record's payload, and cp.PartialItems of the next
// record when the batch ends inside it: see Checkpoint), so projection is
// exactly-once. It returns one Outcome per item.
//
// Per batch: the touched partition rows are locked in id order (no
// deadlocks between brokers), the dedup sidecar is probed for the batch's
// keys, offsets are allocated consecutively in WAL order, one segment per
// partition is written, and the sidecar and checkpoint are upserted. Dedup
// rules (spec/producing.md): per partition; an entry counts while its
// acceptance time is within the queue's dedup_window_seconds of the item's
// acceptance time (0 = off); first wins inside a batch; a repeat does not
// extend the window. The caller bounds the batch (the projector's
// MaxBatchItems and MaxBatchBytes): Project holds it in memory and sends it
// in one piece.
//
// A partition row that vanished under the batch (its queue was deleted
// between the lookup and the lock, or while its partitions were created) is
// looked up again, which recreates it as a push to a missing queue does, and
// the batch is retried at once; so is a batch that PostgreSQL rolled back as
// a deadlock or serialization failure (a queue delete racing the batch's
// sidecar writes): such an error comes from a statement before COMMIT, so
// nothing of the batch committed. Up to goneRetries attempts; a deleted
// queue never holds up other queues' batches behind the projector's backoff.
//
// An error means nothing of the batch may be assumed stored: the caller
// re-reads the checkpoint before it retries (a failed COMMIT has an unknown
// outcome).
func (s *Store) Project(ctx context.Context, brokerID uuid.UUID, cp Checkpoint, items []ProjectItem) ([]Outcome, error) {
	var crc, partIdx, partItems, partCRC *int64
	if cp.HasCRC {
		crc = ptr(int64(cp.RecordCRC))
	}
	if cp.PartialItems > 0 {
		partIdx, partItems, partCRC = ptr(int64(cp.Index)+1), ptr(int64(cp.PartialItems)), ptr(int64(cp.PartialCRC))
	}
	finish := func(b *pgx.Batch) {
		b.Queue(`INSERT INTO queen.projector_checkpoints (broker_id, wal_index, record_crc32c, partial_index, partial_items, partial_crc32c, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, now())
		ON CONFLICT (broker_id) DO UPDATE SET wal_index = excluded.wal_index, record_crc32c = excluded.record_crc32c,
			partial_index = excluded.partial_index, partial_items = excluded.partial_items, partial_crc32c = excluded.partial_crc32c,
			updated_at = now()`,
			pgtype.UUID{Bytes: brokerID, Valid: true}, int64(cp.Index), crc, partIdx, partItems, partCRC)
		b.Queue("COMMIT")
	}
	for attempt := 1; ; attempt++ {
		out, err := s.projectOnce(ctx, items, attempt > 1, finish)
		if err == nil || !(errors.Is(err, ErrPartitionGone) || retryable(err, true)) || attempt == goneRetries || ctx.Err() != nil {
			return out, err
		}
		s.log.Debug("pg: projection batch rolled back by a concurrent change (queue deleted, deadlock); retrying at once",
			"attempt", attempt, "err", err)
	}
}

// goneRetries bounds Project's immediate retries of a batch that a
// concurrent queue delete rolled back (see Project).
const goneRetries = 10

func ptr[T any](v T) *T { return &v }

// projectOnce is one attempt of Project: look up the partitions (from the
// cache, creating missing ones in their own transaction), then lock, probe
// and write on one connection, in one transaction. A retry (see Project)
// looks every partition up inside the projection transaction instead, its
// queues locked against deletion until it commits.
func (s *Store) projectOnce(ctx context.Context, items []ProjectItem, retry bool, finish func(*pgx.Batch)) ([]Outcome, error) {
	var ids []uuid.UUID
	var err error
	if !retry {
		if ids, err = s.partitionIDs(ctx, nil, items); err != nil {
			return nil, err
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// A connection released inside a transaction (any error below) is
	// closed by the pool, which rolls the transaction back.
	defer conn.Release()
	if retry {
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			return nil, err
		}
		if ids, err = s.partitionIDs(ctx, conn.Conn(), items); err != nil {
			if errors.Is(err, ErrPartitionGone) && conn.Conn().PgConn().TxStatus() == 'T' {
				if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
					return nil, errors.Join(err, rerr)
				}
			}
			return nil, err
		}
	}
	out, err := s.project(ctx, conn.Conn(), !retry, items, ids, finish)
	if errors.Is(err, ErrPartitionGone) {
		// Nothing was written: end the transaction here so the connection
		// goes back to the pool instead of being closed.
		if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
		return nil, fmt.Errorf("pg: commit did not end the transaction (status %q)", st)
	}
	return out, nil
}

// batcher is what project needs: a *pgx.Conn or a pgx.Tx.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// project stores items in two round trips: lock + probe, then the writes,
// each sent as one pipelined batch; plus one when the sidecar names
// candidates (duplicates or hash collisions) to confirm against their
// segments, and one when exact entries of queen.dedup name duplicates
// whose segment may be gone. begin puts BEGIN in front of the first batch; finish,
// when set, appends the caller's statements (checkpoint, COMMIT) to the
// second.
func (s *Store) project(ctx context.Context, conn batcher, begin bool, items []ProjectItem, ids []uuid.UUID, finish func(*pgx.Batch)) ([]Outcome, error) {
	parts := make(map[uuid.UUID]*partState)
	lockIDs := make([]uuid.UUID, 0, 8)
	for _, id := range ids {
		if _, ok := parts[id]; !ok {
			parts[id] = &partState{id: id}
			lockIDs = append(lockIDs, id)
		}
	}
	known := make(map[dedupKey]*dedupEntry)
	probe := newProbeSet(s.legacyDedup.Load())
	for i := range items {
		k := dedupKey{ids[i], items[i].Message.TransactionID}
		if _, ok := known[k]; !ok {
			known[k] = nil
			// A freshly minted id is new (pg/dedup.go); it still takes part
			// in the batch's own first-wins rule through known.
			if !isMinted(items[i].Message.ID, k.txid) {
				probe.add(k)
			}
		}
	}
	// 1. Lock the touched partitions in a fixed (id) order (NO KEY UPDATE:
	// only next_offset changes, so rows that merely reference a partition,
	// such as a new consumer cursor or dead letter, are not blocked and
	// cannot deadlock with projection), then probe the
	// dedup sidecar for the batch's client keys (the probe runs after the
	// lock is held, so it sees every commit made before it).
	var b1 pgx.Batch
	if begin {
		b1.Queue("BEGIN")
	}
	b1.Queue(`SELECT id, next_offset, dedup_window_seconds, encryption_enabled FROM queen.lock_partitions($1::uuid[])`, pgUUIDs(lockIDs))
	probe.queue(&b1)
	br := conn.SendBatch(ctx, &b1)
	if begin {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, err
		}
	}
	locked := 0
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var next int64
		var window int32
		var encrypt bool
		if err := rows.Scan(&id, &next, &window, &encrypt); err != nil {
			rows.Close()
			br.Close()
			return nil, err
		}
		ps := parts[uuid.UUID(id.Bytes)]
		ps.next, ps.base, ps.window, ps.encrypt = next, next, int64(window)*int64(time.Second/time.Microsecond), encrypt
		locked++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		br.Close()
		return nil, err
	}
	if err := probe.read(br, known); err != nil {
		br.Close()
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	if locked != len(lockIDs) {
		s.forgetPartitions(items)
		return nil, fmt.Errorf("%w: locked %d of %d", ErrPartitionGone, locked, len(lockIDs))
	}

	// 2. Confirm the sidecar's candidates against their segments (a round
	// trip only when there are any: duplicates or hash collisions).
	if err := confirm(ctx, conn, probe.pending, known); err != nil {
		return nil, err
	}

	// 3. Decide each item in WAL order and allocate offsets.
	out, checkSeg := decide(items, ids, parts, known)

	// 4. A duplicate names its original only while the original's segment
	// exists (spec/producing.md); otherwise the all-zero UUID.
	if len(checkSeg) > 0 {
		pids := make([]uuid.UUID, len(checkSeg))
		offs := make([]int64, len(checkSeg))
		for j, i := range checkSeg {
			pids[j], offs[j] = ids[i], out[i].Offset
		}
		rows, err := conn.Query(ctx, `SELECT k.ord FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS k(pid, off, ord)
			WHERE NOT EXISTS (
				SELECT 1 FROM (SELECT s.last_offset FROM queen.segments s
					WHERE s.partition_id = k.pid AND s.base_offset <= k.off
					ORDER BY s.base_offset DESC LIMIT 1) seg
				WHERE seg.last_offset >= k.off)`, pgUUIDs(pids), offs)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var ord int64
			if err := rows.Scan(&ord); err != nil {
				rows.Close()
				return nil, err
			}
			out[checkSeg[ord-1]].MessageID = uuid.Nil
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}

	// 5. Write segments, offsets, sidecar entries and the checkpoint.
	w, err := s.buildWrites(lockIDs, parts)
	if err != nil {
		return nil, err
	}
	var b pgx.Batch
	segIDs := pgUUIDs(w.segPID)
	if len(w.segPID) > 0 {
		b.Queue(`SELECT queen.advance_partitions($1::uuid[], $2::bigint[])`, segIDs, w.segNext)
		b.Queue(`INSERT INTO queen.segments (partition_id, base_offset, last_offset, body)
			SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bytea[])`, segIDs, w.segBase, w.segLast, w.segBody)
	}
	w.runs.queue(&b)
	if notify := storedQueues(items, out); len(notify) > 0 {
		// Wake long-polling pops on every broker (pg/listen.go).
		b.Queue(`SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q`, NotifyChannel, notify)
	}
	if finish != nil {
		finish(&b)
	}
	if b.Len() == 0 {
		return out, nil
	}
	if err := conn.SendBatch(ctx, &b).Close(); err != nil {
		return nil, fmt.Errorf("pg: write and commit (outcome unknown): %w", err)
	}
	return out, nil
}

// decide gives each item its Outcome in WAL order against the sidecar
// entries in known (probe results; entries of this batch are added as
// items are stored) and allocates offsets in parts. checkSeg lists the
// duplicates whose original is outside this batch.
func decide(items []ProjectItem, ids []uuid.UUID, parts map[uuid.UUID]*partState, known map[dedupKey]*dedupEntry) (out []Outcome, checkSeg []int) {
	out = make([]Outcome, len(items))
	for i := range items {
		it := &items[i]
		ps := parts[ids[i]]
		k := dedupKey{ps.id, it.Message.TransactionID}
		if e := known[k]; ps.window > 0 && e != nil && it.AcceptedAtMicros-e.acceptedAt < ps.window {
			out[i] = Outcome{Duplicate: true, MessageID: e.id, Offset: e.offset}
			if !e.inBatch && !e.confirmed {
				checkSeg = append(checkSeg, i)
			}
			continue
		}
		known[k] = &dedupEntry{offset: ps.next, id: it.Message.ID, acceptedAt: it.AcceptedAtMicros, inBatch: true}
		out[i] = Outcome{MessageID: it.Message.ID, Offset: ps.next}
		ps.msgs = append(ps.msgs, it.Message)
		ps.next++
		ps.touched = true
	}
	return out, checkSeg
}

// storedQueues lists, in first-stored order and without repeats, the
// queues of the items that out does not mark as duplicates: the queues the
// batch stores messages in, which its pg_notify names (taken from the
// batch, not read back from queen.partitions).
func storedQueues(items []ProjectItem, out []Outcome) []string {
	var qs []string
	for i := range items {
		if out[i].Duplicate || (len(qs) > 0 && qs[len(qs)-1] == items[i].Queue) {
			continue
		}
		if !slices.Contains(qs, items[i].Queue) {
			qs = append(qs, items[i].Queue)
		}
	}
	return qs
}

// batchWrites is the Go side of a projection batch's writes: one segment
// per touched partition and the dedup sidecar rows, as statement
// arguments.
type batchWrites struct {
	segPID                    []uuid.UUID
	segBase, segLast, segNext []int64
	segBody                   [][]byte
	runs                      dedupRuns
}

// buildWrites encodes (and, for queues with encryptionEnabled, encrypts)
// the segment of every touched partition of lockIDs and builds the
// sidecar rows of its stored messages. Every stored message gets a sidecar
// entry, also where the window is 0: the window governs the probe, so
// turning dedup back on sees the history (spec/producing.md caution on
// /configure).
func (s *Store) buildWrites(lockIDs []uuid.UUID, parts map[uuid.UUID]*partState) (*batchWrites, error) {
	w := &batchWrites{}
	for _, id := range lockIDs {
		ps := parts[id]
		if !ps.touched {
			continue
		}
		// The sidecar reads transactionIds and ids, which encryption leaves
		// alone; it goes first so that it sees the messages as pushed.
		w.runs.add(id, ps.base, ps.window, ps.msgs)
		if ps.encrypt {
			if err := s.encrypt(ps.msgs); err != nil {
				return nil, err
			}
		}
		w.segPID = append(w.segPID, id)
		w.segBase = append(w.segBase, ps.base)
		w.segLast = append(w.segLast, ps.next-1)
		w.segNext = append(w.segNext, ps.next)
		w.segBody = append(w.segBody, EncodeSegment(nil, ps.msgs))
	}
	return w, nil
}

// partitionIDs resolves (queue, partition) of every item to a partition id,
// creating missing queues and partitions (with default options) in their
// own short transaction, in name order; with conn set, on conn inside the
// caller's transaction, every pair looked up afresh (see ensurePartitions).
func (s *Store) partitionIDs(ctx context.Context, conn batcher, items []ProjectItem) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(items))
	var missQ, missP []string
	seen := make(map[partKey]bool)
	s.mu.Lock()
	for i := range items {
		k := partKey{items[i].Queue, items[i].Partition}
		if id, ok := s.partIDs[k]; ok && conn == nil {
			ids[i] = id
		} else if !seen[k] {
			seen[k] = true
			missQ = append(missQ, k.queue)
			missP = append(missP, k.partition)
		}
	}
	s.mu.Unlock()
	if len(missQ) > 0 {
		found, err := s.ensurePartitions(ctx, conn, missQ, missP)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		for k, id := range found {
			s.partIDs[k] = id
		}
		s.mu.Unlock()
		for i := range items {
			if ids[i] == uuid.Nil {
				id, ok := found[partKey{items[i].Queue, items[i].Partition}]
				if !ok {
					return nil, fmt.Errorf("%w: %q/%q not created", ErrPartitionGone, items[i].Queue, items[i].Partition)
				}
				ids[i] = id
			}
		}
	}
	return ids, nil
}

// partitionLookupSQL resolves (queue, partition) name pairs ($1[i], $2[i])
// to partition ids.
const partitionLookupSQL = `SELECT queue, partition, id FROM queen.partition_ids($1::text[], $2::text[])`

// ensurePartitions creates (if missing) and returns the ids of the given
// (queue, partition) pairs; queues[i] goes with partitions[i]. With conn nil
// it runs in its own short transaction; otherwise on conn, inside the
// caller's transaction, and it first locks the batch's existing queue rows
// FOR KEY SHARE, so that no queue delete can remove them (or, through them,
// their partitions) before that transaction ends: the retry of a batch
// that lost a race with a queue delete (Project).
//
// A foreign-key violation (a queue deleted between its insert and its
// partitions' insert) is returned as ErrPartitionGone.
func (s *Store) ensurePartitions(ctx context.Context, conn batcher, queues, partitions []string) (map[partKey]uuid.UUID, error) {
	var b pgx.Batch
	if conn != nil {
		// Locks before the insert: a queue created by the insert is this
		// transaction's own until it commits.
		b.Queue(`SELECT 1 FROM queen.queues WHERE name = ANY($1::text[]) ORDER BY id FOR KEY SHARE`, queues)
	}
	// A queue created by a push takes its namespace and task from its name
	// split on the first "." (API.md, push side effects): "billing.invoices"
	// is namespace "billing", task "invoices"; a name without "." is its own
	// namespace with task "".
	b.Queue(`INSERT INTO queen.queues (name, namespace, task)
		SELECT q, split_part(q, '.', 1), CASE WHEN strpos(q, '.') > 0 THEN substr(q, strpos(q, '.') + 1) ELSE '' END
		FROM (SELECT DISTINCT q FROM unnest($1::text[]) AS q) d ORDER BY q
		ON CONFLICT (name) DO NOTHING`, queues)
	b.Queue(`SELECT queen.create_partitions($1::text[], $2::text[])`, queues, partitions)
	b.Queue(partitionLookupSQL, queues, partitions)
	out := make(map[partKey]uuid.UUID, len(queues))
	run := func(conn batcher) error {
		br := conn.SendBatch(ctx, &b)
		defer br.Close()
		for i := 0; i < b.Len()-1; i++ {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var k partKey
			var id uuid.UUID
			if err := rows.Scan(&k.queue, &k.partition, &id); err != nil {
				rows.Close()
				return err
			}
			out[k] = id
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	}
	var err error
	if conn != nil {
		err = run(conn)
	} else {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return run(tx) })
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" { // foreign_key_violation: a queue deleted under the insert
		return nil, fmt.Errorf("%w: ensure partitions: %v", ErrPartitionGone, err)
	}
	if err != nil {
		return nil, fmt.Errorf("pg: ensure partitions: %w", err)
	}
	return out, nil
}

func (s *Store) forgetPartitions(items []ProjectItem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range items {
		delete(s.partIDs, partKey{items[i].Queue, items[i].Partition})
	}
}
