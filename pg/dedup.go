package pg

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/queenmq/queen-go/internal/binenc"
)

// The dedup sidecar (docs/push.md, "Dedup"; docs/decisions.md, "Dedup
// sidecar" and "Sidecar layout") is queen.dedup_batches, one row per
// projection batch:
//
//	expires_at                when the newest message of the row leaves the
//	                          longest dedup window of its partitions' queues
//	                          (as it was when the row was written); the
//	                          sweep deletes the row a grace later (SweepDedup)
//	partition_ids uuid[]      the batch's partitions and, in the same order,
//	base_offsets  bigint[]    the base offset of the segment each one got
//	key_hashes    bigint[]    keyHash(partition, transactionId) of every
//	                          client transactionId the batch stored, and
//	                          mintedKey(tick) of every 10 ms tick in which a
//	                          minted id the batch stored (the key of an item
//	                          pushed without a transactionId) was minted, in
//	                          any of its partitions, and hashedTickKey(tick)
//	                          of every tick of a client key in the minted
//	                          form kept under its own keyHash (outside the
//	                          skew, or crowded); in no particular order
//	layout smallint           rowLayout (2) on the rows of this version,
//	                          which mark such ticks; NULL on rows of
//	                          earlier versions, which did not
//
// indexed by a GIN index on key_hashes (fastupdate off: a pending list is
// scanned whole by every probe) and a btree on expires_at. A client
// transactionId costs 8 bytes of array and one GIN entry (about 40 bytes
// in all), a minted id nothing of its own, a partition of a batch 24
// bytes, and a batch one minted key per tick (one to three). Rows written
// before the minted key dropped the partition held one minted key per
// partition and tick (mintedPartKey), one GIN entry per partition of a
// batch: at 16 x 100 pushes over 10,000 partitions, about 190 GIN inserts
// per batch and the row's insert the costliest projection statement
// (docs/decisions.md). The row of the layout before (queen.dedup_runs: one row per
// partition and batch, with every minted id listed and three indexes)
// cost 50 to 230 bytes per message at small batches. One row per key
// under a UNIQUE btree (its insert as the probe) and a hash index were
// measured against this layout (scripts/dedup-layouts.sh, docs/decisions.md
// "Sidecar layouts measured"): 1.2 to 1.9 times less CPU per key for
// the unique btree, none to speak of for the hash index, at 80 to 93 bytes
// per key.
//
// The probe stays exact. A batch probes the hashes of its client keys, and
// for a client transactionId in the minted form (canonical lowercase
// UUIDv7 text) also the minted key of that UUID's tick (and the older
// rows' mintedPartKey of the key's partition and tick). A one-round-trip
// batch (pg/project.go, projectPredicted) leaves a minted-form key's own
// hash and mintedPartKey out once no row without a layout remains
// (Store.unmarkedRows): such a key's original is in a row holding its
// tick's minted key or, kept under its own hash, its tick's mark, and
// queen.assert_tick_rows refuses the batch when any such row of its
// partitions is not one the broker's tick cache knows to hold none of its
// keys, or when a row without a layout appeared meanwhile. A hit only names
// a segment: the row's segment of the key's partition (a row without the
// key's partition is another partition's hash, or minted ids of that tick
// stored elsewhere); its
// messages are compared with the key byte for byte, which gives the
// original's offset, id and acceptance time; the newest match wins. A
// freshly minted id is never probed: a UUIDv7 with 74 random bits is taken
// to be new. When the original's segment is gone (retention,
// RetentionPass), its exact key was copied beforehand into queen.dedup
// (spilled = true), which is probed for the candidates' keys. queen.dedup
// also holds the exact entries written by versions before the hash sidecar
// (spilled = false), and a database upgraded from the run layout keeps
// queen.dedup_runs: while either holds entries of older versions, every
// client key of a batch is probed there as well, and they expire by the
// sweep of their own layout (the window of their queue, by accepted_at),
// so an upgraded database keeps every entry's window. queen.dedup_runs is
// never written and is left empty once swept.

// mintedSpan bounds the UUIDv7 time between a queen.dedup_runs row's
// minted_lo and minted_hi (the run layout), so a minted-form probe of that
// table reads only the runs whose minted_lo lies within mintedSpan before
// the probed id.
const mintedSpan = time.Second

// spillGrace is how long past its queue's dedup window RetentionPass still
// copies a deleted message's key into queen.dedup: longer than the
// projector's default dedup grace (15 minutes), which SweepDedup applies.
const spillGrace = time.Hour

// keyHash is the sidecar key of (partition, client transactionId): XXH64
// (seed 0) of the partition id's 16 bytes followed by the transactionId's
// bytes, as a signed 64-bit integer; 0 becomes 1 (the run layout keeps 0
// for minted ids). A variable so that tests can force collisions.
var keyHash = func(pid uuid.UUID, txid string) int64 {
	var sum uint64
	if len(txid) <= keyHashStack-len(pid) {
		// The usual key: hashed in one call from a copy on the stack
		// (the same bytes, so the same hash, as the streaming form below).
		var b [keyHashStack]byte
		n := copy(b[:], pid[:])
		n += copy(b[n:], txid)
		sum = xxhash.Sum64(b[:n])
	} else {
		d := xxhash.New()
		_, _ = d.Write(pid[:])
		_, _ = d.WriteString(txid)
		sum = d.Sum64()
	}
	h := int64(sum)
	if h == 0 {
		h = 1
	}
	return h
}

// keyHashStack is the most bytes (partition id and transactionId) keyHash
// hashes from a copy on the stack: a UUID text of 36 bytes, and most
// other keys, fit.
const keyHashStack = 80

// mintedKey is the sidecar key of the ids minted in tick (mintedTick),
// whichever partitions a batch stored them in: XXH64 (seed 0) of the bytes
// 0xff 0xfe and tick as 8 big-endian bytes (10 bytes; a client key hashes
// 16 bytes of partition id and its transactionId, mintedPartKey 25 bytes).
// A variable so that tests can force collisions.
var mintedKey = func(tick int64) int64 { return tickHash(0xfe, tick) }

// tickHash is XXH64 (seed 0) of the bytes 0xff, tag and tick as 8
// big-endian bytes: the sidecar keys of a tick (mintedKey, hashedTickKey),
// one tag each.
func tickHash(tag byte, tick int64) int64 {
	var b [10]byte
	b[0], b[1] = 0xff, tag
	binary.BigEndian.PutUint64(b[2:], uint64(tick))
	return int64(xxhash.Sum64(b[:]))
}

// hashedTickKey marks a sidecar row that keeps a client key in the minted
// form (UUIDv7 text) of tick under the key's own keyHash rather than under
// the tick's mintedKey (outside clientTickSkew, or crowded): XXH64 (seed
// 0) of the bytes 0xff 0xfd and tick as 8 big-endian bytes, in the row's
// key_hashes once per such tick. A batch whose minted-form keys are not
// probed by their keyHash (projectPredicted, once no row of an earlier
// layout remains: dedup_batches.layout) checks these marks of their ticks
// instead (assert_tick_rows). A variable so that tests can force
// collisions.
var hashedTickKey = func(tick int64) int64 { return tickHash(0xfd, tick) }

// rowLayout is the queen.dedup_batches.layout of the rows this version
// writes: every minted-form client key kept under its own keyHash has its
// tick's hashedTickKey in the row (NULL: rows of earlier versions).
const rowLayout = 2

// clientTickSkew bounds how far a client transactionId in the minted form
// (canonical lowercase UUIDv7 text) may lie, by its UUIDv7 time, from its
// acceptance time for the key to be stored as a minted id is, under its
// tick's mintedKey, rather than under its own keyHash: such a key costs
// no index entry of its own, and is found, as a minted id named as a
// transactionId always was, through its tick and confirmed against the
// segment byte for byte. Brokers of the version before probe a minted-form
// key's mintedKey too, so they find such keys as well. Queen's SDKs mint a UUIDv7 per
// item as they build the push, so their keys land within it (client-side
// buffering and clock offset included); one outside it, older or in the
// future, gets its own keyHash entry as any other client key does. The
// bound is what keeps a tick's rows few: rows can take client keys of a
// tick only while the broker's clock is within clientTickSkew of it, so a
// producer that sends one UUIDv7 time over and over (or a fixed one) adds
// rows to that tick for 2 × clientTickSkew at most, and every later probe
// of the tick reads at most those.
const clientTickSkew = time.Second

// tickStored reports whether m's client transactionId is stored under its
// tick's mintedKey (not keyHash), and the tick: the transactionId is
// in the minted form (form; tick is valid then) and its UUIDv7 time is
// within clientTickSkew of m's acceptance time (CreatedAtMicros). A
// function of the message alone, so a WAL replay stores a key as the live
// path did. m must not be a minted id (minted).
func tickStored(m *Message) (tick int64, form, ok bool) {
	u, form := mintedForm(m.TransactionID)
	if !form {
		return 0, false, false
	}
	return tickStoredAt(mintedMillis(u), m.CreatedAtMicros)
}

// tickStoredAt is tickStored for a minted-form transactionId whose UUIDv7
// time (Unix ms, mintedMillis) is ms, of a message accepted at
// createdMicros (Unix µs): form is true.
func tickStoredAt(ms, createdMicros int64) (tick int64, form, ok bool) {
	d := ms - createdMicros/1000
	return millisTick(ms), true, d >= -clientTickSkew.Milliseconds() && d <= clientTickSkew.Milliseconds()
}

// mintedPartKey is the minted key of rows written by versions before
// mintedKey (one per partition and tick): XXH64 (seed 0) of the partition
// id's 16 bytes, the byte 0xff (which no UTF-8 transactionId holds) and
// tick as 8 big-endian bytes. Never written any more; a minted-form client
// key probes it as well, so that such rows keep deduplicating until the
// sweep removes them with their window.
func mintedPartKey(pid uuid.UUID, tick int64) int64 {
	var b [25]byte
	copy(b[:16], pid[:])
	b[16] = 0xff
	binary.BigEndian.PutUint64(b[17:], uint64(tick))
	return int64(xxhash.Sum64(b[:]))
}

// mintedTickMillis is the time step of mintedKey. A batch's row holds one
// minted key per tick its minted ids span (a batch spans a few
// milliseconds: one to three); a client transactionId in the minted form
// that is not a minted id of its partition still names, as candidates to
// read and compare, its partition's segments of the batches that stored
// minted ids in that tick. Coarser ticks save keys of minted ids, finer
// ones save those reads where a partition mixes both.
const mintedTickMillis = 10

// isMinted reports whether txid is the text of id, the key the broker
// gives an item pushed without a transactionId.
//
// That is: id is version 7 and txid is its canonical text, which is what
// mintedForm accepting txid as id's text amounts to; checked without
// parsing txid (binenc.IsUUIDText stops at the first differing byte).
func isMinted(id uuid.UUID, txid string) bool {
	return id.Version() == 7 && binenc.IsUUIDText(id, txid)
}

// minted is isMinted for a message of a projection batch, taking the push
// path's word for it where it has one (Message.MintedTxID, set only where
// TransactionID is ID's text; whoever changes TransactionID clears it), so
// that a batch of minted ids builds no id text to compare. A mark on a
// transactionId that is not 36 bytes long (one changed without clearing
// it) is not taken.
func minted(m *Message) bool {
	return (m.MintedTxID && len(m.TransactionID) == 36 && m.ID.Version() == 7) || isMinted(m.ID, m.TransactionID)
}

// mintedForm parses txid as a minted id's text: 36 characters of canonical
// lowercase UUID text (hex digits 0-9 and a-f in groups of 8-4-4-4-12
// joined by '-') of version 7. It is asked for every client
// transactionId of a batch, so it reads the text once with a table
// rather than through uuid.Parse, which also takes uppercase hex digits
// that a separate pass had to refuse (TestMintedFormMatchesParse holds
// the two to the same answers).
func mintedForm(txid string) (uuid.UUID, bool) {
	if len(txid) != 36 || txid[8] != '-' || txid[13] != '-' || txid[18] != '-' || txid[23] != '-' || txid[14] != '7' {
		return uuid.UUID{}, false
	}
	var u uuid.UUID
	for k, at := range uuidTextDigits {
		hi, lo := lowerHex[txid[at]], lowerHex[txid[at+1]]
		if hi|lo == badHex {
			return uuid.UUID{}, false
		}
		u[k] = hi<<4 | lo
	}
	return u, true
}

// uuidTextDigits is where each byte's two hex digits start in a UUID's
// canonical text.
var uuidTextDigits = [16]int{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// badHex is lowerHex's value for a byte that is not a lowercase hex digit;
// OR-ing it with any digit's value (0-15) gives badHex again.
const badHex = 0xff

// lowerHex maps '0'-'9' and 'a'-'f' to their values, every other byte to
// badHex.
var lowerHex = func() (t [256]byte) {
	for i := range t {
		t[i] = badHex
	}
	for i := byte(0); i < 10; i++ {
		t['0'+i] = i
	}
	for i := byte(0); i < 6; i++ {
		t['a'+i] = 10 + i
	}
	return t
}()

// mintedMillis is a UUIDv7's time, Unix milliseconds.
func mintedMillis(u uuid.UUID) int64 {
	var b [8]byte
	copy(b[2:], u[:6])
	return int64(binary.BigEndian.Uint64(b[:]))
}

// mintedTick is a UUIDv7's time in mintedTickMillis steps since the Unix
// epoch: the tick of its mintedKey.
func mintedTick(u uuid.UUID) int64 { return millisTick(mintedMillis(u)) }

// millisTick is the tick (mintedTick) of a time in Unix milliseconds.
func millisTick(ms int64) int64 { return ms / mintedTickMillis }

// mintedFloor is the smallest UUID whose UUIDv7 time is mintedSpan before
// u's: the lower bound of minted_lo for a run of queen.dedup_runs that may
// hold u.
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

// dedupRuns is the sidecar row of one batch (queen.dedup_batches), built
// partition by partition.
type dedupRuns struct {
	pid    []uuid.UUID
	base   []int64
	hashes []int64
	newest int64   // µs, the newest acceptance time; valid when len(pid) > 0
	ticks  []int64 // the ticks whose mintedKey is in hashes
	// mintedAt are the (tick, partition) pairs of the row's minted ids;
	// tickKeys the client keys stored under a tick's mintedKey
	// (tickStored) (both for the Store's tickCache once the row is
	// committed).
	mintedAt []tickPart
	tickKeys []rowKey
	// marked are the ticks whose hashedTickKey the row holds.
	marked []int64
	// crowded, when set, reports that a tick has enough rows with its
	// mintedKey already (tickCache.crowded): a client key of that tick
	// then keeps its own keyHash.
	crowded func(tick int64) bool
}

// tickKey is a client key stored (or probed) under mintedKey(tick): its
// tick, its keyHash and its partition.
type tickKey struct {
	tick, hash int64
	pid        uuid.UUID
}

// rowKey is a client key a row stores under mintedKey(tick): its tick and
// its keyHash.
type rowKey struct {
	tick, hash int64
}

// tickPart is a tick and a partition.
type tickPart struct {
	tick int64
	pid  uuid.UUID
}

// rowRef names a row of queen.dedup_batches: its first partition and that
// partition's segment base offset (a segment is written once, so no two
// rows share them).
type rowRef struct {
	pid  uuid.UUID
	base int64
}

// add appends partition pid's messages msgs, stored at offsets base.. (one
// segment). keys, when not nil, parallels msgs: for every message with a
// client transactionId, its keyHash and what mintedForm found in it
// (computed once by the caller); nil: add computes them.
func (r *dedupRuns) add(pid uuid.UUID, base int64, msgs []Message, keys []clientKey) {
	if len(msgs) == 0 {
		return
	}
	r.pid = append(r.pid, pid)
	r.base = append(r.base, base)
	var at int64
	lastTick, lastCrowded := int64(-1), false // crowded's answer for lastTick
	var mintedTicks []int64                   // this partition's
	for i := range msgs {
		m := &msgs[i]
		if i == 0 || m.CreatedAtMicros > at {
			at = m.CreatedAtMicros
		}
		if !minted(m) {
			var h, tick int64
			var form, ok bool
			switch {
			case keys == nil:
				h = keyHash(pid, m.TransactionID)
				tick, form, ok = tickStored(m)
			case keys[i].ms >= 0:
				h = keys[i].hash
				tick, form, ok = tickStoredAt(keys[i].ms, m.CreatedAtMicros)
			default:
				h = keys[i].hash
			}
			if ok && r.crowded != nil {
				if tick != lastTick {
					lastTick, lastCrowded = tick, r.crowded(tick)
				}
				ok = !lastCrowded
			}
			if !ok {
				r.hashes = append(r.hashes, h)
				if form && !slices.Contains(r.marked, tick) {
					// Outside its tick: the row says so under the tick
					// (hashedTickKey).
					r.marked = append(r.marked, tick)
					r.hashes = append(r.hashes, hashedTickKey(tick))
				}
				continue
			}
			r.addTick(tick)
			r.tickKeys = append(r.tickKeys, rowKey{tick, h})
			continue
		}
		tick := mintedTick(m.ID)
		r.addTick(tick)
		if !slices.Contains(mintedTicks, tick) {
			mintedTicks = append(mintedTicks, tick)
			r.mintedAt = append(r.mintedAt, tickPart{tick, pid})
		}
	}
	if len(r.pid) == 1 || at > r.newest {
		r.newest = at
	}
}

// addTick puts tick's mintedKey in the row once.
func (r *dedupRuns) addTick(tick int64) {
	if !slices.Contains(r.ticks, tick) {
		r.ticks = append(r.ticks, tick)
		r.hashes = append(r.hashes, mintedKey(tick))
	}
}

// ref is the row's rowRef; valid when len(r.pid) > 0.
func (r *dedupRuns) ref() rowRef { return rowRef{r.pid[0], r.base[0]} }

// queue appends the sidecar insert to b. The row expires at its newest
// acceptance time plus the longest dedup window of queues, the queues of
// its partitions (by name: the batch's items name them), read in the
// statement itself (0 with dedup off: the keys are kept for the sweep's
// grace), so it is right on both ways of pg/project.go: the long way,
// which read the windows under the lock, and the one-round-trip way, which
// sends the insert before it has read anything; the partitions are locked
// by then either way, so each exists and so does its queue, under the
// name the item gave. (Read through the partition ids instead, the window
// cost one partition and one queue probe per partition of the batch,
// about 1 ms of a 190-partition batch.)
func (r *dedupRuns) queue(b *pgx.Batch, queues []string) {
	if len(r.pid) == 0 {
		return
	}
	b.Queue(`INSERT INTO queen.dedup_batches (expires_at, partition_ids, base_offsets, key_hashes, layout)
		SELECT $1::timestamptz + make_interval(secs => coalesce((SELECT max(q.dedup_window_seconds)
			FROM queen.queues q WHERE q.name = ANY($5::text[])), 0)),
			$2, $3, $4, `+strconv.Itoa(rowLayout),
		time.UnixMicro(r.newest), pgUUIDs(r.pid), r.base, r.hashes, queues)
}

// probeSet is what a batch asks the sidecar: the key hashes of its client
// transactionIds and the minted keys of the minted-form ones, and (while
// older versions' tables hold entries) all of them for those tables.
type probeSet struct {
	hashes []int64
	byHash map[int64][]dedupKey // a hash (key or minted key) → the keys probing it
	legacy bool
	// For queen.dedup_runs (the run layout): the minted-form keys.
	mPID, mID, mFloor []uuid.UUID
	mKeys             []dedupKey
	// For queen.dedup (exact entries).
	exPID   []uuid.UUID
	exTx    [][]byte
	pending []candidate // filled from the probe results
}

// candidate is a sidecar hit: the segment of k's partition holding offset
// off (a segment's base offset, or in the run layout the message's
// offset) may hold k's original.
type candidate struct {
	k   dedupKey
	off int64
}

// newProbeSet starts a batch's probe; legacy: older versions' sidecar
// tables hold entries (Store.legacyDedup).
func newProbeSet(legacy bool) *probeSet {
	return &probeSet{byHash: make(map[int64][]dedupKey), legacy: legacy}
}

func (p *probeSet) want(h int64, k dedupKey) {
	ks, ok := p.byHash[h]
	if !ok {
		p.hashes = append(p.hashes, h)
	}
	p.byHash[h] = append(ks, k)
}

// add registers a client key (a minted id's own key is never probed).
func (p *probeSet) add(k dedupKey) {
	p.want(keyHash(k.pid, k.txid), k)
	if u, ok := mintedForm(k.txid); ok {
		p.want(mintedKey(mintedTick(u)), k)
		p.want(mintedPartKey(k.pid, mintedTick(u)), k)
		if p.legacy {
			p.mPID, p.mID, p.mFloor = append(p.mPID, k.pid), append(p.mID, u), append(p.mFloor, mintedFloor(u))
			p.mKeys = append(p.mKeys, k)
		}
	}
	if p.legacy {
		p.exPID, p.exTx = append(p.exPID, k.pid), append(p.exTx, []byte(k.txid))
	}
}

// queue appends the probe statements to b; read reads their results in
// the same order.
func (p *probeSet) queue(b *pgx.Batch) {
	if len(p.hashes) == 0 {
		return
	}
	b.Queue(`SELECT partition_ids, base_offsets, key_hashes FROM queen.dedup_batch_probe($1::bigint[])`, p.hashes)
	if !p.legacy {
		return
	}
	b.Queue(`SELECT partition_id, msg_offset, key_hash FROM queen.dedup_hash_probe($1::bigint[])`, p.hashes)
	if len(p.mID) > 0 {
		b.Queue(`SELECT ord, msg_offset FROM queen.dedup_minted_probe($1::uuid[], $2::uuid[], $3::uuid[])`,
			pgUUIDs(p.mPID), pgUUIDs(p.mID), pgUUIDs(p.mFloor))
	}
	b.Queue(`SELECT partition_id, transaction_id, msg_offset, message_id, accepted_at
		FROM queen.dedup_probe($1::uuid[], $2::bytea[])`, pgUUIDs(p.exPID), p.exTx)
}

// read consumes the results of queue: candidates go to p.pending, exact
// entries into known (the newest per key).
func (p *probeSet) read(br pgx.BatchResults, known map[dedupKey]*dedupEntry) error {
	if len(p.hashes) == 0 {
		return nil
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	type seen struct {
		k   dedupKey
		off int64
	}
	var dup map[seen]bool // made on the first hit (most probes have none)
	for rows.Next() {
		var pids []pgtype.UUID
		var bases, hashes []int64
		if err := rows.Scan(&pids, &bases, &hashes); err != nil {
			rows.Close()
			return err
		}
		if len(pids) != len(bases) {
			rows.Close()
			return fmt.Errorf("pg: dedup sidecar row with %d partitions and %d base offsets", len(pids), len(bases))
		}
		// A tick key names every key of its tick, and a row of a batch over
		// many partitions lists them all: find the key's partition through a
		// map, not a scan per key.
		at := make(map[uuid.UUID]int, len(pids))
		for j := range pids {
			at[pids[j].Bytes] = j
		}
		for _, h := range hashes {
			for _, k := range p.byHash[h] {
				j, ok := at[k.pid]
				if !ok {
					continue
				}
				if c := (seen{k, bases[j]}); !dup[c] {
					if dup == nil {
						dup = make(map[seen]bool)
					}
					dup[c] = true
					p.pending = append(p.pending, candidate{k, bases[j]})
				}
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if !p.legacy {
		return nil
	}
	if rows, err = br.Query(); err != nil {
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
	if len(p.mID) > 0 {
		if rows, err = br.Query(); err != nil {
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
	return readExact(br, known)
}

// readExact reads queen.dedup_probe rows into known, keeping the newest
// entry per key.
func readExact(br pgx.BatchResults, known map[dedupKey]*dedupEntry) error {
	return readExactEntries(br, keepNewest(known))
}

// readExactEntries calls found for every row of br's next result, a
// queen.dedup_probe row (partition_id, transaction_id, msg_offset,
// message_id, accepted_at): an exact entry, not confirmed.
func readExactEntries(br pgx.BatchResults, found func(dedupKey, dedupEntry)) error {
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
		found(dedupKey{pid.Bytes, string(txid)}, dedupEntry{offset: off, id: mid.Bytes, acceptedAt: at.UnixMicro()})
	}
	return rows.Err()
}

// keepNewest records each entry it is given in known unless known holds
// an entry of the key at a higher or the same offset.
func keepNewest(known map[dedupKey]*dedupEntry) func(dedupKey, dedupEntry) {
	return func(k dedupKey, e dedupEntry) {
		if old := known[k]; old == nil || old.offset < e.offset {
			known[k] = &e
		}
	}
}

// confirm reads the candidates' segments (and the exact entries of their
// keys from queen.dedup, for originals whose segment is gone) in one round
// trip and records in known, per key, the newest original whose
// transactionId is the key's, byte for byte.
func confirm(ctx context.Context, conn batcher, cands []candidate, known map[dedupKey]*dedupEntry) error {
	return originals(ctx, conn, cands, keepNewest(known))
}

// originals calls found for every message of the candidates' segments
// whose transactionId is its candidate's key, byte for byte (confirmed),
// and for every exact entry of queen.dedup of the candidates' keys; one
// round trip. A segment named by several candidates is read once.
func originals(ctx context.Context, conn batcher, cands []candidate, found func(dedupKey, dedupEntry)) error {
	if len(cands) == 0 {
		return nil
	}
	type segRef struct {
		pid uuid.UUID
		off int64
	}
	refIdx := make(map[segRef]int)
	var refPID []uuid.UUID
	var refOff []int64
	var byRef [][]dedupKey              // the keys of ref i (a key twice is harmless: see want)
	refsOf := make(map[uuid.UUID][]int) // a partition's refs
	keyIdx := make(map[dedupKey]bool)
	var exPID []uuid.UUID
	var exTx [][]byte
	for _, c := range cands {
		r := segRef{c.k.pid, c.off}
		i, ok := refIdx[r]
		if !ok {
			i = len(refPID)
			refIdx[r] = i
			refPID, refOff, byRef = append(refPID, r.pid), append(refOff, r.off), append(byRef, nil)
			refsOf[r.pid] = append(refsOf[r.pid], i)
		}
		byRef[i] = append(byRef[i], c.k)
		if !keyIdx[c.k] {
			keyIdx[c.k] = true
			exPID, exTx = append(exPID, c.k.pid), append(exTx, []byte(c.k.txid))
		}
	}
	var b pgx.Batch
	// DISTINCT: run-layout candidates of one segment name it once each.
	b.Queue(`SELECT DISTINCT ON (k.pid, s.base_offset) k.ord, s.base_offset, s.last_offset, s.body
		FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS k(pid, off, ord)
		CROSS JOIN LATERAL (SELECT sg.base_offset, sg.last_offset, sg.body FROM queen.segments sg
			WHERE sg.partition_id = k.pid AND sg.base_offset <= k.off ORDER BY sg.base_offset DESC LIMIT 1) s
		WHERE s.last_offset >= k.off`, pgUUIDs(refPID), refOff)
	b.Queue(`SELECT partition_id, transaction_id, msg_offset, message_id, accepted_at
		FROM queen.dedup_probe($1::uuid[], $2::bytea[])`, pgUUIDs(exPID), exTx)
	br := conn.SendBatch(ctx, &b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return err
	}
	for rows.Next() {
		var ord, base, last int64
		var body []byte
		if err := rows.Scan(&ord, &base, &last, &body); err != nil {
			rows.Close()
			return err
		}
		pid := refPID[ord-1]
		msgs, err := decodeSegmentRange(pid, base, last, body)
		if err != nil {
			rows.Close()
			return err
		}
		// Every candidate of this segment: the distinct row stands for
		// all candidate offsets inside base..last.
		want := make(map[string]dedupKey)
		for _, i := range refsOf[pid] {
			if refOff[i] >= base && refOff[i] <= last {
				for _, k := range byRef[i] {
					want[k.txid] = k
				}
			}
		}
		for j := range msgs {
			m := &msgs[j]
			if k, ok := want[m.TransactionID]; ok { // else a hash collision, or a minted id of another key
				found(k, dedupEntry{offset: base + int64(j), id: m.ID, acceptedAt: m.CreatedAtMicros, confirmed: true})
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if err := readExactEntries(br, found); err != nil {
		return err
	}
	return br.Close()
}

// sidecarOffsets returns the offsets of partition pid whose message the
// sidecar names for key txid (confirmed against their segments) and the
// exact entries of queen.dedup for it, newest first, without repeats.
func sidecarOffsets(ctx context.Context, tx pgx.Tx, pid uuid.UUID, txid string) ([]int64, error) {
	k := dedupKey{pid, txid}
	p := newProbeSet(true) // the older layouts' probes cost little for one key
	p.add(k)
	var b pgx.Batch
	p.queue(&b)
	known := make(map[dedupKey]*dedupEntry)
	br := tx.SendBatch(ctx, &b)
	err := p.read(br, known)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	var offs []int64
	if e := known[k]; e != nil {
		offs = append(offs, e.offset)
	}
	err = originals(ctx, tx, p.pending, func(_ dedupKey, e dedupEntry) { offs = append(offs, e.offset) })
	if err != nil {
		return nil, err
	}
	slices.Sort(offs)
	offs = slices.Compact(offs)
	slices.Reverse(offs)
	return offs, nil
}

// rowQuerier is what the sidecar's looks need: a pool, a connection or a
// transaction.
type rowQuerier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}

// refreshLegacy records whether older versions' sidecar tables hold
// entries: exact entries of queen.dedup that were not spilled, or rows of
// queen.dedup_runs (see the sidecar description above); and whether
// queen.dedup_batches holds rows of an earlier layout (unmarkedRows).
func (s *Store) refreshLegacy(ctx context.Context, q rowQuerier) error {
	var exact, runs bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.dedup WHERE NOT spilled),
		to_regclass('queen.dedup_runs') IS NOT NULL`).Scan(&exact, &runs); err != nil {
		return fmt.Errorf("pg: dedup legacy entries: %w", err)
	}
	if runs {
		if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.dedup_runs)`).Scan(&runs); err != nil {
			return fmt.Errorf("pg: dedup legacy runs: %w", err)
		}
	}
	s.legacyRuns.Store(runs)
	s.legacyDedup.Store(exact || runs)
	return s.refreshUnmarked(ctx, q)
}

// refreshUnmarked records whether queen.dedup_batches holds rows of an
// earlier layout (unmarkedRows; one look at the partial index
// dedup_batches_unmarked).
func (s *Store) refreshUnmarked(ctx context.Context, q rowQuerier) error {
	var unmarked bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.dedup_batches WHERE layout IS NULL)`).Scan(&unmarked); err != nil {
		return fmt.Errorf("pg: dedup rows of an earlier layout: %w", err)
	}
	s.unmarkedRows.Store(unmarked)
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

// SweepDedup deletes sidecar rows and entries past their window plus
// grace, at most limit rows of each table per call (per window value for
// the older layouts), and returns how many it deleted: rows of
// queen.dedup_batches whose expires_at is older than grace (one range scan
// of its expires_at index, one row per batch), and exact entries of
// queen.dedup (and rows of an upgraded database's queen.dedup_runs) whose
// accepted_at is older than their queue's window plus grace. The grace
// keeps entries a little past the window so that a WAL replay after a
// short outage still sees them (docs/push.md, "Dedup": a replay gives the
// verdicts the live path would have given).
func (s *Store) SweepDedup(ctx context.Context, grace time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM queen.dedup_batches d WHERE d.ctid IN (
		SELECT d2.ctid FROM queen.dedup_batches d2 WHERE d2.expires_at < now() - make_interval(secs => $1) LIMIT $2)`,
		grace.Seconds(), limit)
	if err != nil {
		return 0, err
	}
	n := tag.RowsAffected()
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT dedup_window_seconds FROM queen.queues`)
	if err != nil {
		return n, err
	}
	windows, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return n, err
	}
	tables := []string{"queen.dedup"}
	if s.legacyRuns.Load() {
		tables = append(tables, "queen.dedup_runs")
	}
	for _, w := range windows {
		for _, table := range tables {
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
	} else if s.unmarkedRows.Load() {
		// Only the partial index's look: refreshLegacy's look at
		// queen.dedup has no index to use.
		if err := s.refreshUnmarked(ctx, s.pool); err != nil {
			return n, err
		}
	}
	return n, nil
}
