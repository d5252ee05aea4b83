package pg

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The dedup sidecar (DESIGN.md §2, spec/producing.md "transactionId and
// deduplication") is queen.dedup_runs, one row per run of consecutive
// offsets of one partition stored by one projection batch:
//
//	partition_id, base_offset  the run's first offset
//	accepted_at                the newest acceptance time in the run: the row
//	                           expires with it (SweepDedup)
//	key_hashes bigint[]        one element per offset: keyHash(partition,
//	                           transactionId) for a client transactionId, 0
//	                           for a broker-minted id (transactionId = the
//	                           message id's text)
//	minted_lo, minted_hi uuid  smallest and largest minted id of the run
//	                           (NULL without one); their UUIDv7 times are at
//	                           most mintedSpan apart (longer runs are split)
//	minted_ids uuid[]          the run's minted ids, in offset order
//
// indexed by a GIN index on key_hashes (fastupdate off: a pending list is
// scanned whole by every probe), (partition_id, minted_lo) and accepted_at.
// A message costs 8 bytes of array and one GIN entry for a client
// transactionId, 24 bytes of arrays and no index entry for a minted id.
//
// The probe stays exact. A key hash hit (or, for a client transactionId in
// the minted form, canonical lowercase UUIDv7 text, a run whose minted ids
// hold it) only names a candidate offset; the original's message is read
// from its segment and its transactionId compared byte for byte, which also
// gives its id and acceptance time. A freshly minted id is never probed: a
// UUIDv7 with 74 random bits is taken to be new. When the original's
// segment is gone (retention, RetentionPass), its exact key was copied
// beforehand into queen.dedup (spilled = true), which is probed for the
// candidates. queen.dedup also holds the exact entries written by versions
// before this sidecar (spilled = false); while any is left, every client
// key of a batch is probed there as well, and they expire by the same
// sweep, so an upgraded database keeps every entry's window.

// mintedSpan bounds the UUIDv7 time between a run's minted_lo and
// minted_hi, so a minted-form probe reads only the runs whose minted_lo
// lies within mintedSpan before the probed id.
const mintedSpan = time.Second

// spillGrace is how long past its queue's dedup window RetentionPass still
// copies a deleted message's key into queen.dedup: longer than the
// projector's default dedup grace (15 minutes), which SweepDedup applies.
const spillGrace = time.Hour

// keyHash is the sidecar key of (partition, client transactionId): XXH64
// (seed 0) of the partition id's 16 bytes followed by the transactionId's
// bytes, as a signed 64-bit integer; 0 is kept for minted ids and becomes
// 1. A variable so that tests can force collisions.
var keyHash = func(pid uuid.UUID, txid string) int64 {
	d := xxhash.New()
	_, _ = d.Write(pid[:])
	_, _ = d.WriteString(txid)
	h := int64(d.Sum64())
	if h == 0 {
		h = 1
	}
	return h
}

// isMinted reports whether txid is the text of id, the key the broker
// gives an item pushed without a transactionId.
func isMinted(id uuid.UUID, txid string) bool {
	u, ok := mintedForm(txid)
	return ok && u == id
}

// mintedForm parses txid as a minted id's text: 36 characters of canonical
// lowercase UUID text of version 7.
func mintedForm(txid string) (uuid.UUID, bool) {
	if len(txid) != 36 {
		return uuid.UUID{}, false
	}
	for i := 0; i < len(txid); i++ {
		if c := txid[i]; c >= 'A' && c <= 'Z' {
			return uuid.UUID{}, false
		}
	}
	u, err := uuid.Parse(txid)
	if err != nil || u.Version() != 7 {
		return uuid.UUID{}, false
	}
	return u, true
}

// mintedMillis is a UUIDv7's time, Unix milliseconds.
func mintedMillis(u uuid.UUID) int64 {
	var b [8]byte
	copy(b[2:], u[:6])
	return int64(binary.BigEndian.Uint64(b[:]))
}

// mintedFloor is the smallest UUID whose UUIDv7 time is mintedSpan before
// u's: the lower bound of minted_lo for a run that may hold u.
func mintedFloor(u uuid.UUID) uuid.UUID {
	ms := mintedMillis(u) - mintedSpan.Milliseconds()
	if ms < 0 {
		ms = 0
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(ms))
	var out uuid.UUID
	copy(out[:6], b[2:])
	return out
}

// dedupRuns is the sidecar rows of one batch as flat statement arguments:
// row r's key_hashes are hashes[hashLo[r]-1 : hashHi[r]] (1-based SQL
// slice bounds), its minted ids minted[mintLo[r]-1 : mintHi[r]].
type dedupRuns struct {
	pid            []uuid.UUID
	base           []int64
	at             []time.Time
	hashLo, hashHi []int32
	lo, hi         []pgtype.UUID
	mintLo, mintHi []int32
	hashes         []int64
	minted         []uuid.UUID
}

// add appends the runs of msgs, stored at offsets base.. of partition pid.
func (r *dedupRuns) add(pid uuid.UUID, base int64, msgs []Message) {
	start := 0
	for start < len(msgs) {
		r.pid = append(r.pid, pid)
		r.base = append(r.base, base+int64(start))
		r.hashLo = append(r.hashLo, int32(len(r.hashes)+1))
		r.mintLo = append(r.mintLo, int32(len(r.minted)+1))
		var lo, hi uuid.UUID
		var at int64
		end := start
		for ; end < len(msgs); end++ {
			m := &msgs[end]
			h := int64(0)
			if isMinted(m.ID, m.TransactionID) {
				nlo, nhi := lo, hi
				if len(r.minted) < int(r.mintLo[len(r.mintLo)-1]) { // first minted id of the run
					nlo, nhi = m.ID, m.ID
				} else {
					if string(m.ID[:]) < string(nlo[:]) {
						nlo = m.ID
					}
					if string(m.ID[:]) > string(nhi[:]) {
						nhi = m.ID
					}
					if end > start && mintedMillis(nhi)-mintedMillis(nlo) > mintedSpan.Milliseconds() {
						break
					}
				}
				lo, hi = nlo, nhi
				r.minted = append(r.minted, m.ID)
			} else {
				h = keyHash(pid, m.TransactionID)
			}
			r.hashes = append(r.hashes, h)
			if m.CreatedAtMicros > at || end == start {
				at = m.CreatedAtMicros
			}
		}
		r.hashHi = append(r.hashHi, int32(len(r.hashes)))
		r.mintHi = append(r.mintHi, int32(len(r.minted)))
		r.at = append(r.at, time.UnixMicro(at))
		if len(r.minted) >= int(r.mintLo[len(r.mintLo)-1]) {
			r.lo = append(r.lo, pgtype.UUID{Bytes: lo, Valid: true})
			r.hi = append(r.hi, pgtype.UUID{Bytes: hi, Valid: true})
		} else {
			r.lo = append(r.lo, pgtype.UUID{})
			r.hi = append(r.hi, pgtype.UUID{})
		}
		start = end
	}
}

// queue appends the sidecar insert to b.
func (r *dedupRuns) queue(b *pgx.Batch) {
	if len(r.pid) == 0 {
		return
	}
	b.Queue(`INSERT INTO queen.dedup_runs (partition_id, base_offset, accepted_at, key_hashes, minted_lo, minted_hi, minted_ids)
		SELECT k.pid, k.base, k.at, ($4::bigint[])[k.hlo:k.hhi], k.lo, k.hi, ($5::uuid[])[k.mlo:k.mhi]
		FROM unnest($1::uuid[], $2::bigint[], $3::timestamptz[], $6::int[], $7::int[], $8::uuid[], $9::uuid[], $10::int[], $11::int[])
			AS k(pid, base, at, hlo, hhi, lo, hi, mlo, mhi)`,
		pgUUIDs(r.pid), r.base, r.at, r.hashes, pgUUIDs(r.minted), r.hashLo, r.hashHi, r.lo, r.hi, r.mintLo, r.mintHi)
}

// probeSet is what a batch asks the sidecar: the key hashes of its client
// transactionIds, the minted-form ones among them, and (while queen.dedup
// holds entries of older versions) all of them for the exact table.
type probeSet struct {
	hashes  []int64
	byHash  map[int64][]dedupKey
	mPID    []uuid.UUID
	mID     []uuid.UUID
	mFloor  []uuid.UUID
	mKeys   []dedupKey
	exPID   []uuid.UUID
	exTx    [][]byte
	legacy  bool
	pending []candidate // filled from the probe results
}

// candidate is a sidecar hit: the message at off of k's partition may be
// k's original.
type candidate struct {
	k   dedupKey
	off int64
}

func newProbeSet(legacy bool) *probeSet {
	return &probeSet{byHash: make(map[int64][]dedupKey), legacy: legacy}
}

// add registers a client key (a minted id's own key is never probed).
func (p *probeSet) add(k dedupKey) {
	h := keyHash(k.pid, k.txid)
	if _, ok := p.byHash[h]; !ok {
		p.hashes = append(p.hashes, h)
	}
	p.byHash[h] = append(p.byHash[h], k)
	if u, ok := mintedForm(k.txid); ok {
		p.mPID, p.mID, p.mFloor = append(p.mPID, k.pid), append(p.mID, u), append(p.mFloor, mintedFloor(u))
		p.mKeys = append(p.mKeys, k)
	}
	if p.legacy {
		p.exPID, p.exTx = append(p.exPID, k.pid), append(p.exTx, []byte(k.txid))
	}
}

// queue appends the probe statements to b; read reads their results in
// the same order.
func (p *probeSet) queue(b *pgx.Batch) {
	if len(p.hashes) > 0 {
		b.Queue(`SELECT partition_id, msg_offset, key_hash FROM queen.dedup_hash_probe($1::bigint[])`, p.hashes)
	}
	if len(p.mID) > 0 {
		b.Queue(`SELECT ord, msg_offset FROM queen.dedup_minted_probe($1::uuid[], $2::uuid[], $3::uuid[])`,
			pgUUIDs(p.mPID), pgUUIDs(p.mID), pgUUIDs(p.mFloor))
	}
	if len(p.exPID) > 0 {
		b.Queue(`SELECT partition_id, transaction_id, msg_offset, message_id, accepted_at
			FROM queen.dedup_probe($1::uuid[], $2::bytea[])`, pgUUIDs(p.exPID), p.exTx)
	}
}

// read consumes the results of queue: candidates go to p.pending, exact
// entries into known (the newest per key).
func (p *probeSet) read(br pgx.BatchResults, known map[dedupKey]*dedupEntry) error {
	if len(p.hashes) > 0 {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var pid pgtype.UUID
			var off, h int64
			if err := rows.Scan(&pid, &off, &h); err != nil {
				rows.Close()
				return err
			}
			for _, k := range p.byHash[h] {
				if k.pid == pid.Bytes {
					p.pending = append(p.pending, candidate{k, off})
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	if len(p.mID) > 0 {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var ord, off int64
			if err := rows.Scan(&ord, &off); err != nil {
				rows.Close()
				return err
			}
			p.pending = append(p.pending, candidate{p.mKeys[ord-1], off})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	if len(p.exPID) > 0 {
		if err := readExact(br, known); err != nil {
			return err
		}
	}
	return nil
}

// readExact reads queen.dedup_probe rows into known, keeping the newest
// entry per key.
func readExact(br pgx.BatchResults, known map[dedupKey]*dedupEntry) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var pid, mid pgtype.UUID
		var txid []byte
		var off int64
		var at time.Time
		if err := rows.Scan(&pid, &txid, &off, &mid, &at); err != nil {
			return err
		}
		k := dedupKey{pid.Bytes, string(txid)}
		if e := known[k]; e == nil || e.offset < off {
			known[k] = &dedupEntry{offset: off, id: mid.Bytes, acceptedAt: at.UnixMicro()}
		}
	}
	return rows.Err()
}

// confirm reads the candidates' messages from their segments (and the
// exact entries of their keys from queen.dedup, for originals whose
// segment is gone) in one round trip and records in known, per key, the
// newest original whose transactionId is the key's, byte for byte.
func confirm(ctx context.Context, conn batcher, cands []candidate, known map[dedupKey]*dedupEntry) error {
	if len(cands) == 0 {
		return nil
	}
	pids := make([]uuid.UUID, len(cands))
	offs := make([]int64, len(cands))
	exTx := make([][]byte, len(cands))
	for i, c := range cands {
		pids[i], offs[i], exTx[i] = c.k.pid, c.off, []byte(c.k.txid)
	}
	var b pgx.Batch
	b.Queue(`SELECT k.ord, s.base_offset, s.last_offset, s.body
		FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS k(pid, off, ord)
		CROSS JOIN LATERAL (SELECT sg.base_offset, sg.last_offset, sg.body FROM queen.segments sg
			WHERE sg.partition_id = k.pid AND sg.base_offset <= k.off ORDER BY sg.base_offset DESC LIMIT 1) s
		WHERE s.last_offset >= k.off`, pgUUIDs(pids), offs)
	b.Queue(`SELECT partition_id, transaction_id, msg_offset, message_id, accepted_at
		FROM queen.dedup_probe($1::uuid[], $2::bytea[])`, pgUUIDs(pids), exTx)
	br := conn.SendBatch(ctx, &b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return err
	}
	type segKey struct {
		pid  uuid.UUID
		base int64
	}
	decoded := make(map[segKey][]Message)
	for rows.Next() {
		var ord, base, last int64
		var body []byte
		if err := rows.Scan(&ord, &base, &last, &body); err != nil {
			rows.Close()
			return err
		}
		c := cands[ord-1]
		sk := segKey{c.k.pid, base}
		msgs, ok := decoded[sk]
		if !ok {
			if msgs, err = decodeSegmentRange(c.k.pid, base, last, body); err != nil {
				rows.Close()
				return err
			}
			decoded[sk] = msgs
		}
		m := &msgs[c.off-base]
		if m.TransactionID != c.k.txid {
			continue // a hash collision, or a minted id of another key
		}
		if e := known[c.k]; e == nil || e.offset < c.off {
			known[c.k] = &dedupEntry{offset: c.off, id: m.ID, acceptedAt: m.CreatedAtMicros, confirmed: true}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if err := readExact(br, known); err != nil {
		return err
	}
	return br.Close()
}

// sidecarOffsets returns the offsets the sidecar names for partition pid's
// key txid (candidates, to be confirmed against the segment, and exact
// entries of queen.dedup), newest first.
func sidecarOffsets(ctx context.Context, tx pgx.Tx, pid uuid.UUID, txid string) ([]int64, error) {
	floor, mid := uuid.UUID{}, uuid.UUID{}
	u, minted := mintedForm(txid)
	if minted {
		mid, floor = u, mintedFloor(u)
	}
	rows, err := tx.Query(ctx, `SELECT msg_offset FROM queen.dedup_hash_probe(ARRAY[$1::bigint]) WHERE partition_id = $2
		UNION SELECT msg_offset FROM queen.dedup_minted_probe(ARRAY[$2::uuid], ARRAY[$3::uuid], ARRAY[$4::uuid]) WHERE $5
		UNION SELECT msg_offset FROM queen.dedup WHERE partition_id = $2 AND transaction_id = $6
		ORDER BY 1 DESC`, keyHash(pid, txid), pgtype.UUID{Bytes: pid, Valid: true}, pgtype.UUID{Bytes: mid, Valid: true},
		pgtype.UUID{Bytes: floor, Valid: true}, minted, []byte(txid))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// refreshLegacy records whether queen.dedup still holds entries of
// versions before the hash sidecar (see the sidecar description above).
func (s *Store) refreshLegacy(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) error {
	var legacy bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.dedup WHERE NOT spilled)`).Scan(&legacy); err != nil {
		return fmt.Errorf("pg: dedup legacy entries: %w", err)
	}
	s.legacyDedup.Store(legacy)
	return nil
}

// spillKeys copies into queen.dedup (spilled) the exact keys of the
// messages of deleted segment bodies that are still inside their queue's
// dedup window plus spillGrace, so that the sidecar still knows them
// without their segment. bodies[i] is partition pids[i]'s segment at
// bases[i] (nil when the segment was too old to need it); windows[i] its
// queue's window in seconds.
func spillKeys(ctx context.Context, tx pgx.Tx, pids []uuid.UUID, bases []int64, bodies [][]byte, windows []int32) error {
	var sPID, sMID []uuid.UUID
	var sTx [][]byte
	var sOff []int64
	var sAt []time.Time
	now := time.Now()
	for i, body := range bodies {
		if body == nil {
			continue
		}
		msgs, err := DecodeSegment(body)
		if err != nil {
			return fmt.Errorf("partition %s offset %d: %w", pids[i], bases[i], err)
		}
		cut := now.Add(-time.Duration(windows[i])*time.Second - spillGrace).UnixMicro()
		for j := range msgs {
			if msgs[j].CreatedAtMicros < cut {
				continue
			}
			sPID, sMID = append(sPID, pids[i]), append(sMID, msgs[j].ID)
			sTx, sOff = append(sTx, []byte(msgs[j].TransactionID)), append(sOff, bases[i]+int64(j))
			sAt = append(sAt, time.UnixMicro(msgs[j].CreatedAtMicros))
		}
	}
	if len(sPID) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO queen.dedup AS d (partition_id, transaction_id, msg_offset, message_id, accepted_at, spilled)
		SELECT DISTINCT ON (pid, txid) pid, txid, off, mid, at, true
		FROM unnest($1::uuid[], $2::bytea[], $3::bigint[], $4::uuid[], $5::timestamptz[]) AS k(pid, txid, off, mid, at)
		ORDER BY pid, txid, off DESC
		ON CONFLICT (partition_id, transaction_id) DO UPDATE
		SET msg_offset = excluded.msg_offset, message_id = excluded.message_id, accepted_at = excluded.accepted_at, spilled = true
		WHERE d.msg_offset < excluded.msg_offset`, pgUUIDs(sPID), sTx, sOff, pgUUIDs(sMID), sAt)
	return err
}

// SweepDedup deletes sidecar rows (queen.dedup_runs, by their newest
// acceptance time) and exact entries (queen.dedup) older than their
// queue's window plus grace, at most limit rows of each per window value
// per call; it returns how many it deleted. The grace keeps entries a
// little past the window so that a WAL replay after a short outage still
// sees them (DESIGN.md §3: replay gives the live verdicts). One range scan
// of an accepted_at index per distinct window value, so the cost follows
// what expires, not the table; a sidecar row covers a whole run of a
// batch, so the sweep deletes one row per run, not per message.
func (s *Store) SweepDedup(ctx context.Context, grace time.Duration, limit int) (int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT dedup_window_seconds FROM queen.queues`)
	if err != nil {
		return 0, err
	}
	windows, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0, err
	}
	var n int64
	for _, w := range windows {
		for _, table := range []string{"queen.dedup_runs", "queen.dedup"} {
			tag, err := s.pool.Exec(ctx, `DELETE FROM `+table+` d WHERE d.ctid IN (
			SELECT d2.ctid FROM `+table+` d2
			WHERE d2.accepted_at < now() - make_interval(secs => $2)
			  AND d2.partition_id IN (SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			                          WHERE q.dedup_window_seconds = $1)
			LIMIT $3)`, w, float64(w)+grace.Seconds(), limit)
			if err != nil {
				return n, err
			}
			n += tag.RowsAffected()
		}
	}
	if s.legacyDedup.Load() {
		if err := s.refreshLegacy(ctx, s.pool); err != nil {
			return n, err
		}
	}
	return n, nil
}
