package pg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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

// partState is one partition of a projection batch: offsets base..next-1
// are allocated to msgs, the batch's stored messages of the partition, in
// order (none: the batch writes no segment there).
type partState struct {
	id      uuid.UUID
	next    int64
	window  int64 // dedup window, µs; 0 = off
	base    int64
	msgs    []Message
	encrypt bool // the queue has encryptionEnabled
	items   int  // the batch's items in the partition (decide sizes msgs with it)
	// keys, when set, parallels msgs: each client transactionId's keyHash
	// and UUIDv7 time, already computed (buildPredicted), for the sidecar
	// row (dedupRuns.add); a minted id's entry is unused.
	keys []clientKey
}

// clientKey is what buildPredicted learns of one client transactionId and
// the sidecar row (dedupRuns.add) needs again: its keyHash, and, when it
// is in the minted form (mintedForm), its UUIDv7 time in Unix
// milliseconds (mintedMillis); -1 when it is not. A minted id's entry
// is left zero (ms 0 would read as a time): dedupRuns.add skips minted
// messages before it reads keys.
type clientKey struct {
	hash int64
	ms   int64
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
// partition is written, and the sidecar and checkpoint are upserted. A
// batch whose partitions' next offsets this Store knows (from its own last
// commit to them, or from the lookup that found or created them), and
// whose keys are broker-minted ids or client transactionIds the sidecar
// does not know, is written in one round trip, its offsets predicted and checked under
// the lock (projectPredicted); any other batch takes two (lock and probe,
// then the writes and COMMIT), or more when the sidecar names candidates
// to confirm. Dedup
// rules (docs/push.md, "Dedup"): per partition; an entry counts while its
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
// queue never holds up other queues' batches behind the projector's
// backoff.
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
		if ids, err = s.partitionIDs(ctx, nil, items, true); err != nil {
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
		if ids, err = s.partitionIDs(ctx, conn.Conn(), items, false); err != nil {
			if errors.Is(err, ErrPartitionGone) && conn.Conn().PgConn().TxStatus() == 'T' {
				if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
					return nil, errors.Join(err, rerr)
				}
			}
			return nil, err
		}
	}
	out, learned, err := s.projectTx(ctx, conn.Conn(), !retry, items, ids, finish)
	if err != nil {
		s.forgetOffsets(ids)
	}
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
		s.forgetOffsets(ids)
		return nil, fmt.Errorf("pg: commit did not end the transaction (status %q)", st)
	}
	s.learnOffsets(learned)
	return out, nil
}

// sortIDs sorts a batch's partition ids in PostgreSQL's uuid order (byte
// order), the order its segments are written in (buildWrites): the
// segments' index entries then go in key order, and every entry of
// segments_created_at (the batch's one created_at first) is normally the
// new largest key, which PostgreSQL appends to the index's rightmost page
// without a descent from the root. Measured: 250 segments a batch
// inserted in id order took 1.22-1.28 ms, in the broker's order (first
// appearance in the batch) 1.39-1.41 ms (docs/decisions.md, "Per
// partition of a batch").
func sortIDs(ids []uuid.UUID) {
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
}

// batcher is what project needs: a *pgx.Conn or a pgx.Tx.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// project stores items in two round trips: lock + probe, then the writes,
// each sent as one pipelined batch; plus one when the sidecar names
// candidates (duplicates or hash collisions) to confirm against their
// segments, and one when exact entries of queen.dedup name duplicates
// whose segment may be gone. begin puts BEGIN in front of the first batch; finish,
// when set, appends the caller's statements (checkpoint, COMMIT) to the
// second. Transaction and the stream sink use it inside their own
// transaction.
func (s *Store) project(ctx context.Context, conn batcher, begin bool, items []ProjectItem, ids []uuid.UUID, finish func(*pgx.Batch)) ([]Outcome, error) {
	out, _, err := s.projectTx(ctx, conn, begin, items, ids, finish)
	return out, err
}

// projectTx is project, which with begin and finish set (a whole
// transaction: Project's first attempt) first tries projectPredicted's
// one round trip; it also returns every locked partition's next offset
// for learnOffsets, to be applied once the COMMIT is confirmed.
func (s *Store) projectTx(ctx context.Context, conn batcher, begin bool, items []ProjectItem, ids []uuid.UUID, finish func(*pgx.Batch)) ([]Outcome, batchLearned, error) {
	if begin && finish != nil {
		out, learned, err := s.projectPredicted(ctx, conn, items, ids, finish)
		switch {
		case err == nil:
			s.predicted.Add(1)
			return out, learned, nil
		case errors.Is(err, errNoPrediction):
		case isCode(err, codeOffsetsStale) || isCode(err, codeKeysNotNew) || isCode(err, codeUnmarkedRows):
			s.predictedMiss.Add(1)
			s.log.Debug("pg: one-round-trip projection batch rolled back; projecting it the long way", "err", err)
			// Rolled back before anything was written: the long way.
			if isCode(err, codeUnmarkedRows) {
				// A broker of an earlier version wrote a sidecar row since
				// the last look: probe minted-form keys by their keyHash
				// again until the sweep's look finds none
				// (refreshUnmarked).
				s.unmarkedRows.Store(true)
			} else {
				// Another broker, a transactional push or a queue delete
				// moved a partition, or the sidecar knows a key: no
				// predictions for these partitions for a while.
				s.holdOffsets(ids)
			}
			if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
				return nil, batchLearned{}, errors.Join(err, rerr)
			}
		default:
			return nil, batchLearned{}, err
		}
	}
	parts := make(map[uuid.UUID]*partState)
	lockIDs := make([]uuid.UUID, 0, 8)
	for _, id := range ids {
		if _, ok := parts[id]; !ok {
			parts[id] = &partState{id: id}
			lockIDs = append(lockIDs, id)
		}
	}
	sortIDs(lockIDs)
	known := make(map[dedupKey]*dedupEntry)
	probe := newProbeSet(s.legacyDedup.Load())
	for i := range items {
		k := dedupKey{ids[i], items[i].Message.TransactionID}
		if _, ok := known[k]; !ok {
			known[k] = nil
			// A freshly minted id is new (pg/dedup.go); it still takes part
			// in the batch's own first-wins rule through known.
			if !minted(&items[i].Message) {
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
	rows, err := queryAfterBegin(br, begin)
	if err != nil {
		br.Close()
		return nil, batchLearned{}, err
	}
	locked := 0
	for rows.Next() {
		var id pgtype.UUID
		var next int64
		var window int32
		var encrypt bool
		if err := rows.Scan(&id, &next, &window, &encrypt); err != nil {
			rows.Close()
			br.Close()
			return nil, batchLearned{}, err
		}
		ps := parts[uuid.UUID(id.Bytes)]
		ps.next, ps.base, ps.window, ps.encrypt = next, next, int64(window)*int64(time.Second/time.Microsecond), encrypt
		locked++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		br.Close()
		return nil, batchLearned{}, err
	}
	if err := probe.read(br, known); err != nil {
		br.Close()
		return nil, batchLearned{}, err
	}
	if err := br.Close(); err != nil {
		return nil, batchLearned{}, err
	}
	if locked != len(lockIDs) {
		s.forgetPartitions(items)
		return nil, batchLearned{}, fmt.Errorf("%w: locked %d of %d", ErrPartitionGone, locked, len(lockIDs))
	}

	// 2. Confirm the sidecar's candidates against their segments (a round
	// trip only when there are any: duplicates or hash collisions).
	if err := confirm(ctx, conn, probe.pending, known); err != nil {
		return nil, batchLearned{}, err
	}

	// 3. Decide each item in WAL order and allocate offsets.
	back := getBatchMsgs(len(items))
	defer putBatchMsgs(back)
	out, checkSeg := decide(items, ids, parts, known, *back)

	// 4. A duplicate names its original only while the original's segment
	// exists (docs/push.md, "Verdicts"); otherwise the all-zero UUID.
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
			return nil, batchLearned{}, err
		}
		for rows.Next() {
			var ord int64
			if err := rows.Scan(&ord); err != nil {
				rows.Close()
				return nil, batchLearned{}, err
			}
			out[checkSeg[ord-1]].MessageID = uuid.Nil
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, batchLearned{}, err
		}
	}

	// 5. Write segments, offsets, sidecar entries and the checkpoint.
	w, err := s.buildWrites(lockIDs, parts)
	if err != nil {
		return nil, batchLearned{}, err
	}
	defer w.release()
	// The encryption flag was read under this transaction's lock:
	// buildWrites asks for no check (a /configure committed since does
	// not fail the batch).
	var b pgx.Batch
	w.queue(&b, items, out)
	if finish != nil {
		finish(&b)
	}
	learned := learnedFrom(lockIDs, parts, w)
	if b.Len() == 0 {
		return out, learned, nil
	}
	if err := sendBatch(ctx, conn, &b, w.wireLen()).Close(); err != nil {
		return nil, batchLearned{}, fmt.Errorf("pg: write and commit (outcome unknown): %w", err)
	}
	return out, learned, nil
}

// projectPredicted writes a batch in ONE round trip (BEGIN, the writes,
// the caller's checkpoint and COMMIT, pipelined) when this Store knows
// every partition's next offset and queue encryption from its own last
// committed batch (learnOffsets) or, for a partition it has not committed
// to, from the lookup that found or created it (partitionIDs), with no
// stale guess held; no key repeats in the batch; and no key needs more of
// the sidecar than a yes/no: a broker-minted id is new (pg/dedup.go) and
// is not probed, a client transactionId is probed by its key hash (not
// while queen.dedup holds legacy entries), and one in the minted form
// (UUIDv7 text, as Queen's SDKs send) by its tick's mintedKey, whose rows
// must be those this Store committed and knows to hold none of the
// batch's keys (pg/tickcache.go; not in a batch that also holds minted
// ids), and by its tick's hashedTickKey, which no row of its partitions
// may hold; while queen.dedup_batches may hold rows of an earlier layout
// (unmarkedRows), also by its key hash and its partition and tick's older
// mintedPartKey instead of the mark. The
// offsets are allocated from the predictions, every item
// stored. In the pipeline, store_segments_packed locks the partitions in id order
// and checks every prediction under the lock, the offsets per partition
// and the encryption flags per queue (predictedEncryption) (SQLSTATE QN001
// if another broker, a transactional push or a queue delete moved or
// removed one, or a /configure changed a queue's encryptionEnabled),
// then assert_new_keys probes the sidecar for the client keys, after the
// lock as the long way does, and raises QN002 on any hit (a duplicate, a
// repeat outside its window, a hash collision: the long way decides it),
// and assert_known_rows raises QN002 on a row of the minted-form keys'
// ticks that the tick cache did not name (assert_tick_rows, which
// replaces it when the marks are checked, also on a marked row, and QN004
// on a row of an earlier layout, after which this Store probes key hashes
// again until refreshUnmarked finds none).
// Any such error rolls the whole transaction back before anything is
// written, so the outcome is the long way's offsets, segments and sidecar
// rows, or nothing. It returns errNoPrediction, having sent nothing, when
// the batch does not qualify.
func (s *Store) projectPredicted(ctx context.Context, conn batcher, items []ProjectItem, ids []uuid.UUID, finish func(*pgx.Batch)) ([]Outcome, batchLearned, error) {
	if len(items) == 0 {
		return nil, batchLearned{}, errNoPrediction
	}
	parts := make(map[uuid.UUID]*partState)
	var lockIDs []uuid.UUID
	now := time.Now().UnixNano()
	s.mu.Lock()
	for _, id := range ids {
		if _, ok := parts[id]; ok {
			continue
		}
		g, ok := s.offsets[id]
		if !ok || g.hold > now {
			s.mu.Unlock()
			return nil, batchLearned{}, errNoPrediction
		}
		parts[id] = &partState{id: id, next: g.next, base: g.next, encrypt: g.encrypt}
		lockIDs = append(lockIDs, id)
	}
	s.mu.Unlock()
	sortIDs(lockIDs)
	back := getBatchMsgs(len(items))
	defer putBatchMsgs(back)
	out, w, err := s.buildPredicted(items, ids, lockIDs, parts, s.legacyDedup.Load(), *back)
	if err != nil {
		return nil, batchLearned{}, err
	}
	defer w.release()
	var b pgx.Batch
	b.Queue("BEGIN")
	w.queue(&b, items, out)
	finish(&b)
	if err := sendBatch(ctx, conn, &b, w.wireLen()).Close(); err != nil {
		if isCode(err, codeOffsetsStale) || isCode(err, codeKeysNotNew) || isCode(err, codeUnmarkedRows) {
			return nil, batchLearned{}, fmt.Errorf("pg: predicted batch: %w", err)
		}
		return nil, batchLearned{}, fmt.Errorf("pg: write and commit (outcome unknown): %w", err)
	}
	learned := learnedFrom(lockIDs, parts, w)
	return out, learned, nil
}

// buildPredicted is projectPredicted's Go side: with parts holding every
// partition's predicted next offset, it checks that the batch qualifies
// (errNoPrediction otherwise; legacy: older sidecar tables hold entries),
// stores every item (storeAll, its messages in back: see partsOf) and
// builds the writes, with the key hashes of the client transactionIds for
// assert_new_keys (of the minted-form ones only while unmarkedRows) and
// the ticks (and marks) of the minted-form ones for assert_known_rows
// (assert_tick_rows).
func (s *Store) buildPredicted(items []ProjectItem, ids, lockIDs []uuid.UUID, parts map[uuid.UUID]*partState, legacy bool, back []Message) ([]Outcome, *batchWrites, error) {
	// The client keys seen, for first-wins inside the batch. A minted id's
	// key needs no entry: only an item with that same id (ids are unique)
	// or one whose client transactionId has the minted form (not predicted
	// beside minted ids, below) could repeat it.
	// Keyed by keyHash: two keys of one hash (a collision, or the same key
	// twice) both send the batch the long way, which decides exactly.
	var known map[int64]struct{}
	var hashes []int64
	var keys []clientKey // item i's; zero for a minted id; nil: all minted
	// The minted-form keys (tickKeys), and the older rows' minted keys of
	// their partition and tick (mintedPartKey) among hashes once each.
	var tickKeys []tickKey
	var extra map[int64]struct{}
	anyMinted := false
	// unmarked: the sidecar may hold rows of an earlier layout, which keep
	// minted-form keys under their keyHash without a mark and minted ids
	// per partition (dedup_batches.layout): such keys are probed by both.
	// Otherwise a minted-form key is found through its tick alone: under
	// the tick's mintedKey, or, kept under its own keyHash, in a row
	// marked with the tick's hashedTickKey (assert_tick_rows).
	unmarked := s.unmarkedRows.Load()
	for i := range items {
		m := &items[i].Message
		if minted(m) {
			anyMinted = true
			continue
		}
		if legacy {
			return nil, nil, errNoPrediction
		}
		pid, txid := ids[i], m.TransactionID
		if known == nil {
			known = make(map[int64]struct{}, len(items)-i)
			keys = make([]clientKey, len(items))
			hashes = make([]int64, 0, len(items)-i)
		}
		h := keyHash(pid, txid)
		if _, ok := known[h]; ok {
			return nil, nil, errNoPrediction // first-wins inside the batch: the long way decides it
		}
		known[h] = struct{}{}
		u, form := mintedForm(txid)
		keys[i] = clientKey{hash: h, ms: -1}
		if !form || unmarked {
			hashes = append(hashes, h)
		}
		if form {
			keys[i].ms = mintedMillis(u)
			tick := millisTick(keys[i].ms)
			if tickKeys == nil {
				tickKeys = make([]tickKey, 0, len(items)-i)
			}
			tickKeys = append(tickKeys, tickKey{tick, h, pid})
			if !unmarked {
				continue
			}
			if extra == nil {
				extra = make(map[int64]struct{})
			}
			if h := mintedPartKey(pid, tick); !hasKey(extra, h) {
				extra[h] = struct{}{}
				hashes = append(hashes, h)
			}
		}
	}
	// A minted-form key may repeat a key stored under its tick's mintedKey
	// (a client key, tickStored, or a minted id): the tick cache must know
	// every row of those ticks (assert_known_rows checks it) and that none
	// of them holds the key.
	var knownTicks, knownMarks []int64
	var knownRows []rowRef
	var knownParts []uuid.UUID
	if len(tickKeys) > 0 {
		if anyMinted {
			// A minted-form key may be the text of an id minted in this
			// very batch (an answer the client already had): first-wins
			// inside the batch, which the long way decides.
			return nil, nil, errNoPrediction
		}
		ticks := make(map[int64]struct{})
		parts := make(map[uuid.UUID]struct{})
		for _, tk := range tickKeys {
			if !hasKey(ticks, tk.tick) {
				if len(ticks) == maxPredictedTicks {
					return nil, nil, errNoPrediction
				}
				ticks[tk.tick] = struct{}{}
				knownTicks = append(knownTicks, mintedKey(tk.tick))
				if !unmarked {
					knownMarks = append(knownMarks, hashedTickKey(tk.tick))
				}
			}
			if _, ok := parts[tk.pid]; !ok {
				parts[tk.pid] = struct{}{}
				knownParts = append(knownParts, tk.pid)
			}
		}
		var fresh bool
		if knownRows, fresh = s.ticks.known(tickKeys); !fresh {
			return nil, nil, errNoPrediction
		}
	}
	encQ, encV, ok := predictedEncryption(items, ids, parts)
	if !ok {
		return nil, nil, errNoPrediction
	}
	// Every key is new (or the pipeline rolls back) and unique, so every
	// item is stored and the window (not predicted) never applies.
	out := storeAll(items, ids, parts, keys, back)
	w, err := s.buildWrites(lockIDs, parts)
	if err != nil {
		return nil, nil, err
	}
	w.newKeys = hashes
	w.knownTicks, w.knownMarks, w.knownRows, w.knownParts = knownTicks, knownMarks, knownRows, knownParts
	w.encQueues, w.encValues = encQ, encV
	return out, w, nil
}

// predictedEncryption lists the queues of a predicted batch (items, their
// partition ids ids, the partitions' predictions in parts) once each, in
// first-seen order, with the encryptionEnabled the batch's segments are
// built for, for store_segments_packed to check (one queue probe per queue
// instead of one per partition). ok is false when two partitions of one
// queue predict different flags (guesses learned at different times):
// one of them is wrong, and the long way, which reads the flags under the
// lock, also corrects the guesses.
func predictedEncryption(items []ProjectItem, ids []uuid.UUID, parts map[uuid.UUID]*partState) (queues []string, encrypt []bool, ok bool) {
	for i := range items {
		q, e := items[i].Queue, parts[ids[i]].encrypt
		if n := len(queues); n > 0 && queues[n-1] == q {
			if encrypt[n-1] != e {
				return nil, nil, false
			}
			continue
		}
		if j := slices.Index(queues, q); j >= 0 {
			if encrypt[j] != e {
				return nil, nil, false
			}
			continue
		}
		queues, encrypt = append(queues, q), append(encrypt, e)
	}
	return queues, encrypt, true
}

// errNoPrediction: projectPredicted does not apply to the batch.
var errNoPrediction = errors.New("pg: batch offsets not predictable")

// SQLSTATEs of the projection functions (pg/schema.sql): store_segments_packed
// raises codeOffsetsStale when a partition is gone or not in the state the
// batch was built for, assert_new_keys codeKeysNotNew when the sidecar
// names an offset for one of the keys.
const (
	codeOffsetsStale = "QN001"
	codeKeysNotNew   = "QN002"
	// codeUnmarkedRows: assert_tick_rows found a sidecar row of an earlier
	// layout (dedup_batches.layout).
	codeUnmarkedRows = "QN004"
)

// isCode reports whether err is a server error with SQLSTATE code.
func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// offsetGuess is what a Store remembers of a partition from its last
// committed projection batch: the next offset to allocate and its queue's
// encryptionEnabled; hold is a time (Unix ns) before which it is not used,
// set when a guess proved stale.
type offsetGuess struct {
	next    int64
	encrypt bool
	hold    int64
}

// batchLearned is what a batch teaches its Store once its COMMIT is confirmed
// (learnOffsets): its partitions' state and its sidecar row's client keys
// stored under tick keys, for the tick cache.
type batchLearned struct {
	offsets []learnedOffset
	runs    *dedupRuns // the sidecar row; nil: no row with ticks
}

// learnedFrom is batchLearned for a batch that locked lockIDs (parts: the
// batch's partitions by id) and wrote w (nil: nothing).
func learnedFrom(lockIDs []uuid.UUID, parts map[uuid.UUID]*partState, w *batchWrites) batchLearned {
	l := batchLearned{offsets: learnedOffsets(lockIDs, parts)}
	if w != nil && len(w.runs.ticks) > 0 {
		l.runs = &w.runs
	}
	return l
}

// learnedOffset is a partition's state after a batch, for learnOffsets.
type learnedOffset struct {
	id      uuid.UUID
	next    int64
	encrypt bool
}

// Bounds of the prediction cache: at most maxOffsetGuesses partitions
// (about 100 bytes each with the map's free slots: 7.0 MB measured near
// the bound; the map starts over when full), and a partition
// whose guess proved stale is not predicted for guessHold (brokers
// writing the same partitions would otherwise waste a round trip on most
// batches).
const (
	maxOffsetGuesses = 1 << 16
	guessHold        = time.Second
)

// learnedOffsets is the state of the partitions lockIDs after a batch
// (parts: the batch's partitions by id), in lockIDs order, for learnOffsets.
func learnedOffsets(lockIDs []uuid.UUID, parts map[uuid.UUID]*partState) []learnedOffset {
	learned := make([]learnedOffset, len(lockIDs))
	for i, id := range lockIDs {
		learned[i] = learnedOffset{id, parts[id].next, parts[id].encrypt}
	}
	return learned
}

// learnOffsets records partitions' state after a confirmed COMMIT,
// keeping a hold in force, and the batch's sidecar row in the tick cache.
func (s *Store) learnOffsets(bl batchLearned) {
	if bl.runs != nil {
		s.ticks.record(bl.runs)
	}
	l := bl.offsets
	if len(l) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offsets == nil || len(s.offsets)+len(l) > maxOffsetGuesses {
		s.offsets = make(map[uuid.UUID]offsetGuess, len(l))
	}
	for _, o := range l {
		s.offsets[o.id] = offsetGuess{next: o.next, encrypt: o.encrypt, hold: s.offsets[o.id].hold}
	}
}

// holdOffsets keeps the partitions ids from predictions for guessHold.
func (s *Store) holdOffsets(ids []uuid.UUID) {
	until := time.Now().Add(guessHold).UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if g, ok := s.offsets[id]; ok {
			g.hold = until
			s.offsets[id] = g
		}
	}
}

// forgetOffsets drops the guesses of the partitions ids (a batch that
// failed: its outcome may be unknown), except those on hold, which keep
// their hold.
func (s *Store) forgetOffsets(ids []uuid.UUID) {
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.offsets) == 0 {
		return
	}
	for _, id := range ids {
		if g, ok := s.offsets[id]; ok && g.hold <= now {
			delete(s.offsets, id)
		}
	}
}

// decide gives each item its Outcome in WAL order against the sidecar
// entries in known (probe results; entries of this batch are added as
// items are stored) and allocates offsets in parts. checkSeg lists the
// duplicates whose original is outside this batch.
//
// Allocations are per batch, not per item: every partition's msgs is sized
// for all its items at once (in back: see partsOf), and the batch's
// entries share one array.
func decide(items []ProjectItem, ids []uuid.UUID, parts map[uuid.UUID]*partState, known map[dedupKey]*dedupEntry, back []Message) (out []Outcome, checkSeg []int) {
	out = make([]Outcome, len(items))
	pss := partsOf(ids, parts, back)
	entries := make([]dedupEntry, 0, len(items))
	for i := range items {
		it := &items[i]
		ps := pss[i]
		k := dedupKey{ps.id, it.Message.TransactionID}
		if e := known[k]; ps.window > 0 && e != nil && it.AcceptedAtMicros-e.acceptedAt < ps.window {
			out[i] = Outcome{Duplicate: true, MessageID: e.id, Offset: e.offset}
			if !e.inBatch && !e.confirmed {
				checkSeg = append(checkSeg, i)
			}
			continue
		}
		entries = append(entries, dedupEntry{offset: ps.next, id: it.Message.ID, acceptedAt: it.AcceptedAtMicros, inBatch: true})
		known[k] = &entries[len(entries)-1]
		out[i] = Outcome{MessageID: it.Message.ID, Offset: ps.next}
		ps.msgs = append(ps.msgs, it.Message)
		ps.next++
	}
	return out, checkSeg
}

// storeAll is decide for a batch whose keys are all new and distinct
// (projectPredicted): every item is stored, at the next offset of its
// partition in parts, in WAL order. keys holds item i's clientKey (zero
// for a minted id; nil: every id is minted), which goes to its
// partition's keys alongside its message; the messages go into back (see
// partsOf).
func storeAll(items []ProjectItem, ids []uuid.UUID, parts map[uuid.UUID]*partState, keys []clientKey, back []Message) []Outcome {
	out := make([]Outcome, len(items))
	pss := partsOf(ids, parts, back)
	if keys != nil {
		// One array for every partition's keys, cut by partition.
		back := make([]clientKey, len(items))
		for _, ps := range parts {
			ps.keys, back = back[:0:ps.items], back[ps.items:]
		}
	}
	for i := range items {
		ps := pss[i]
		out[i] = Outcome{MessageID: items[i].Message.ID, Offset: ps.next}
		ps.msgs = append(ps.msgs, items[i].Message)
		if keys != nil {
			ps.keys = append(ps.keys, keys[i])
		}
		ps.next++
	}
	return out
}

// partsOf returns the partState of every item (ids[i] in parts) and sizes
// each partition's msgs for all of its items: cut from back when it holds
// room for all of ids (getBatchMsgs; one array for the batch, not one per
// partition), else from one array made here. A partition's msgs has no
// room beyond its own items, so it never runs into the next one's.
func partsOf(ids []uuid.UUID, parts map[uuid.UUID]*partState, back []Message) []*partState {
	pss := make([]*partState, len(ids))
	var last *partState
	for i, id := range ids {
		if last == nil || last.id != id {
			last = parts[id]
		}
		pss[i] = last
		last.items++
	}
	if len(back) < len(ids) {
		back = make([]Message, len(ids))
	}
	for _, ps := range parts {
		if ps.msgs != nil || ps.items > len(back) {
			ps.msgs = slices.Grow(ps.msgs, ps.items)
			continue
		}
		ps.msgs, back = back[:0:ps.items], back[ps.items:]
	}
	return pss
}

// batchMsgs holds the arrays a projection batch's messages are stored in
// (partsOf) for the batches after it: the messages are copied there from
// the batch's items and encoded into its segments, and nothing refers to
// them once the batch has been sent, so the array of one batch serves the
// next (a fresh one per batch was the projector's largest allocation,
// about 90 bytes per message). keepBatchMsgs bounds what is kept: 16,384
// messages (about 1.5 MB), more than the largest batch of a default
// configuration holds. An array is cleared when it is put back, so that
// it keeps no payload alive.
var batchMsgs sync.Pool

const keepBatchMsgs = 1 << 14

// maxPredictedTicks bounds the distinct ticks of a predicted batch's
// minted-form keys (assert_known_rows probes one index key per tick in one
// scan, whose cost grows faster than its keys); a batch spanning more (keys
// minted over more than a second or so) goes the long way.
const maxPredictedTicks = 64

// hasKey reports whether set holds h.
func hasKey(set map[int64]struct{}, h int64) bool {
	_, ok := set[h]
	return ok
}

// getBatchMsgs returns an array of n messages (all zero) for a batch of n
// items; putBatchMsgs takes it back once the batch has been sent.
func getBatchMsgs(n int) *[]Message {
	if bp, ok := batchMsgs.Get().(*[]Message); ok {
		if cap(*bp) >= n {
			*bp = (*bp)[:n]
			return bp
		}
	}
	b := make([]Message, n)
	return &b
}

func putBatchMsgs(bp *[]Message) {
	if cap(*bp) > keepBatchMsgs {
		return
	}
	clear((*bp)[:cap(*bp)])
	batchMsgs.Put(bp)
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
	segPID   []uuid.UUID
	segBase  []int64
	segCount []int32
	segBody  segmentBodies // encoded by queue (packSegments, pg/pgarray.go)
	// compress: the bodies are stored compressed where that pays
	// (storeSegment); pack holds them once queue has encoded them, until
	// release.
	compress bool
	pack     *packBuf
	// encQueues, encValues: the queues of the batch's partitions and the
	// encryptionEnabled their segments were built for (predictedEncryption),
	// checked by store_segments_packed; nil: no check.
	encQueues []string
	encValues []bool
	runs      dedupRuns
	// newKeys: key hashes of client transactionIds the sidecar must not
	// know yet (projectPredicted), checked after the segments lock their
	// partitions and before the sidecar rows go in.
	newKeys []int64
	// knownTicks: minted keys (mintedKey) of ticks that, among the rows
	// holding one of the partitions knownParts, only the rows knownRows
	// may hold (projectPredicted, pg/tickcache.go), checked after newKeys.
	knownTicks []int64
	knownRows  []rowRef
	knownParts []uuid.UUID
	// knownMarks, when set: hashedTickKey of the same ticks, in the same
	// order; the batch's minted-form keys were not sent in newKeys, and
	// assert_tick_rows checks the marks and that no row of an earlier
	// layout exists besides what assert_known_rows checks.
	knownMarks []int64
}

// queue appends the batch's writes to b: the segments with their
// partitions' offsets (store_segments_packed), the sidecar rows and the pg_notify
// of the queues that items stores messages in (out: their outcomes).
func (w *batchWrites) queue(b *pgx.Batch, items []ProjectItem, out []Outcome) {
	if len(w.segPID) > 0 {
		// The bodies last: see store_segments_packed (pg/schema.sql).
		var offsets, lens, plains []int32
		w.pack, offsets, lens, plains = packSegments(w.segBody, w.compress)
		b.Queue(`SELECT queen.store_segments_packed($1::uuid[], $2::bigint[], $3::integer[], $4::text[], $5::boolean[], $6::integer[], $7::integer[], $8::integer[], $9::bytea)`,
			pgUUIDs(w.segPID), w.segBase, w.segCount, w.encQueues, w.encValues, offsets, lens, plains, segmentPack(w.pack.out))
	}
	if len(w.newKeys) > 0 {
		b.Queue(`SELECT queen.assert_new_keys($1::bigint[])`, w.newKeys)
	}
	if len(w.knownTicks) > 0 {
		pids := make([]pgtype.UUID, len(w.knownRows))
		bases := make([]int64, len(w.knownRows))
		for i, r := range w.knownRows {
			pids[i], bases[i] = pgtype.UUID{Bytes: r.pid, Valid: true}, r.base
		}
		if w.knownMarks != nil {
			b.Queue(`SELECT queen.assert_tick_rows($1::bigint[], $2::bigint[], $3::uuid[], $4::uuid[], $5::bigint[])`,
				w.knownTicks, w.knownMarks, pgUUIDs(w.knownParts), pids, bases)
		} else {
			b.Queue(`SELECT queen.assert_known_rows($1::bigint[], $2::uuid[], $3::uuid[], $4::bigint[])`,
				w.knownTicks, pgUUIDs(w.knownParts), pids, bases)
		}
	}
	notify := storedQueues(items, out)
	w.runs.queue(b, notify)
	if len(notify) > 0 {
		// Wake long-polling pops on every broker (pg/listen.go).
		b.Queue(`SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q`, NotifyChannel, notify)
	}
}

// buildWrites encodes (and, for queues with encryptionEnabled, encrypts)
// the segment of every touched partition of lockIDs (in that order, which
// sortIDs made id order) and builds the
// sidecar rows of its stored messages. Every stored message gets a sidecar
// entry, also where the window is 0: the window governs the probe, so
// turning dedup back on sees the history (docs/push.md, "Dedup").
func (s *Store) buildWrites(lockIDs []uuid.UUID, parts map[uuid.UUID]*partState) (*batchWrites, error) {
	w := &batchWrites{compress: !s.plainSegments}
	w.runs.crowded = s.ticks.crowded
	for _, id := range lockIDs {
		ps := parts[id]
		if len(ps.msgs) == 0 {
			continue
		}
		// The sidecar reads transactionIds and ids, which encryption leaves
		// alone; it goes first so that it sees the messages as pushed.
		w.runs.add(id, ps.base, ps.msgs, ps.keys)
		if ps.encrypt {
			if err := s.encrypt(ps.msgs); err != nil {
				return nil, err
			}
		}
		w.segPID = append(w.segPID, id)
		w.segBase = append(w.segBase, ps.base)
		w.segCount = append(w.segCount, int32(ps.next-ps.base))
		w.segBody = append(w.segBody, ps.msgs)
	}
	return w, nil
}

// partitionIDs resolves (queue, partition) of every item to a partition id,
// creating missing queues and partitions (with default options) in their
// own short transaction, in name order; with conn set, on conn inside the
// caller's transaction, every pair looked up afresh (see ensurePartitions).
//
// With learn set (the projector's batches; conn nil), a partition looked up
// (not found in the cache) whose next offset this Store does not know yet
// gets the lookup's next_offset and encryption flag as its guess
// (learnOffsets' map), so that the batch naming it for the first time can
// go the one round trip way (projectPredicted): the guess is read without
// a lock, and store_segments_packed checks it under the lock, so a partition
// another broker moved since is refused (QN001) and the batch goes the
// long way; a guess this Store learned from its own commit is never
// replaced by a lookup. Transactional and stream pushes pass false: they
// move the partitions themselves right after, which would only make the
// guess stale.
func (s *Store) partitionIDs(ctx context.Context, conn batcher, items []ProjectItem, learn bool) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(items))
	var missQ, missP []string
	seen := make(map[partKey]bool)
	s.mu.Lock()
	for i := range items {
		k := partKey{items[i].Queue, items[i].Partition}
		if conn == nil {
			if id, ok := s.partIDs.get(k); ok {
				ids[i] = id
				continue
			}
		}
		if !seen[k] {
			seen[k] = true
			missQ = append(missQ, k.queue)
			missP = append(missP, k.partition)
		}
	}
	s.mu.Unlock()
	if learn && conn == nil {
		s.projectorLookups.Add(int64(len(missQ)))
	}
	if len(missQ) > 0 {
		found, err := s.ensurePartitions(ctx, conn, missQ, missP)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if learn && conn == nil {
			s.guessLookedUp(found)
		}
		for i := range items {
			if ids[i] != uuid.Nil {
				continue
			}
			// Cached under the items' names, not the scanned ones: the
			// items of a record share one string per queue name.
			k := partKey{items[i].Queue, items[i].Partition}
			st, ok := found[k]
			if !ok {
				return nil, fmt.Errorf("%w: %q/%q not created", ErrPartitionGone, items[i].Queue, items[i].Partition)
			}
			ids[i] = st.id
			s.partIDs.put(k, st.id)
		}
	}
	return ids, nil
}

// guessLookedUp records the looked-up state of the partitions in found as
// their guesses where this Store has none (see partitionIDs). s.mu held.
func (s *Store) guessLookedUp(found map[partKey]partitionState) {
	if s.offsets == nil || len(s.offsets)+len(found) > maxOffsetGuesses {
		s.offsets = make(map[uuid.UUID]offsetGuess, len(found))
	}
	for _, st := range found {
		if _, ok := s.offsets[st.id]; !ok {
			s.offsets[st.id] = offsetGuess{next: st.next, encrypt: st.encrypt}
		}
	}
}

// partitionState is a partition as ensurePartitions looked it up: its id,
// next_offset and its queue's encryption_enabled.
type partitionState struct {
	id      uuid.UUID
	next    int64
	encrypt bool
}

// partitionLookupSQL resolves (queue, partition) name pairs ($1[i], $2[i])
// to partition ids, with each partition's next_offset and its queue's
// encryption_enabled.
const partitionLookupSQL = `SELECT queue, partition, id, next_offset, encryption_enabled FROM queen.partition_states($1::text[], $2::text[])`

// derivedNamespaceSQL and derivedTaskSQL are the namespace and task a
// queue gets when it is created without them (by a push, a transaction's
// push, or a /configure that names neither), as SQL expressions of name,
// an SQL text expression for the queue's name: the name split on its
// first "." (docs/push.md, "Request"). "billing.invoices" is namespace
// "billing", task "invoices"; a name without "." is its own namespace,
// with task "".
func derivedNamespaceSQL(name string) string { return `split_part(` + name + `, '.', 1)` }

func derivedTaskSQL(name string) string {
	return `CASE WHEN strpos(` + name + `, '.') > 0 THEN substr(` + name + `, strpos(` + name + `, '.') + 1) ELSE '' END`
}

// ensurePartitions creates (if missing) and returns the state (id,
// next_offset, encryption; see partitionState) of the given (queue,
// partition) pairs; queues[i] goes with partitions[i]. With conn nil it
// runs in its own short transaction, in one round trip; otherwise on conn,
// inside the caller's transaction, and it first locks the batch's existing queue rows
// FOR KEY SHARE, so that no queue delete can remove them (or, through them,
// their partitions) before that transaction ends: the retry of a batch
// that lost a race with a queue delete (Project).
//
// A foreign-key violation (a queue deleted between its insert and its
// partitions' insert) is returned as ErrPartitionGone.
func (s *Store) ensurePartitions(ctx context.Context, conn batcher, queues, partitions []string) (map[partKey]partitionState, error) {
	var b pgx.Batch
	if conn != nil {
		// Locks before the insert: a queue created by the insert is this
		// transaction's own until it commits.
		b.Queue(`SELECT 1 FROM queen.queues WHERE name = ANY($1::text[]) ORDER BY id FOR KEY SHARE`, queues)
	}
	// A queue created by a push takes its namespace and task from its name
	// (derivedNamespaceSQL, derivedTaskSQL).
	b.Queue(`INSERT INTO queen.queues (name, namespace, task)
		SELECT q, `+derivedNamespaceSQL("q")+`, `+derivedTaskSQL("q")+`
		FROM (SELECT DISTINCT q FROM unnest($1::text[]) AS q) d ORDER BY q
		ON CONFLICT (name) DO NOTHING`, queues)
	b.Queue(`SELECT queen.create_partitions($1::text[], $2::text[])`, queues, partitions)
	b.Queue(partitionLookupSQL, queues, partitions)
	out := make(map[partKey]partitionState, len(queues))
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
			var st partitionState
			if err := rows.Scan(&k.queue, &k.partition, &st.id, &st.next, &st.encrypt); err != nil {
				rows.Close()
				return err
			}
			out[k] = st
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
		// One pipelined batch is one implicit transaction (pgx runs a batch
		// without transaction statements up to a single Sync): one round
		// trip, where BEGIN and COMMIT of their own took three.
		err = run(s.pool)
	}
	if isCode(err, "23503") { // foreign_key_violation: a queue deleted under the insert
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
		s.partIDs.forget(partKey{items[i].Queue, items[i].Partition})
	}
}
