package pg

import (
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// tickCache remembers, per 10 ms tick, the sidecar rows this Store
// committed that hold the tick's mintedKey (rows with minted ids of the
// tick, or with client keys stored under it: tickStored), the partitions
// in which they hold minted ids, and the keyHash of each client key stored
// under the tick. It lets a projection batch whose client transactionIds
// are in the minted form (the UUIDv7 text Queen's SDKs send) go the one
// round trip way (projectPredicted): its keys' ticks name this Store's
// recent rows, which the cache shows hold none of the batch's keys, and
// assert_known_rows checks under the partition locks that no other row of
// those ticks holds one of the batch's key partitions (another broker's,
// a transactional push's, one the cache dropped or never saw committed);
// if one does, the batch rolls back and the long way reads and compares
// the segments. It also caps this Store's rows per tick (crowded).
//
// A tick's entry is whole or absent: a row is recorded in every tick it
// holds once its COMMIT is confirmed (a row whose outcome is unknown is
// never recorded, so it counts as unknown), and entries are dropped a tick
// at a time: those more than keepTicks behind the newest acceptance time
// recorded (the projector's clock, so a projector catching up on a
// backlog keeps what its batches need), and the oldest while more than
// maxTickKeys keys are held (32 bits of each key's keyHash: at most some
// 1.5 MB with the slices' spare room). A key the cache names may be a
// collision, and the minted ids of a tick are not kept (a client key may
// be the text of one): such a batch goes the long way, which decides
// exactly. A clock that jumps forward drops every entry until acceptance
// times catch up with it again: batches then go the long way, and keys
// keep their own keyHash (crowded), which costs speed only.
type tickCache struct {
	mu      sync.Mutex
	buckets map[int64]*tickBucket
	ticks   []int64 // the ticks of buckets, ascending
	keys    int     // keys held over all buckets
	newest  int64   // the tick of the newest acceptance time recorded
	dropped int64   // the newest tick whose entry was dropped
}

// tickBucket is one tick's entry.
type tickBucket struct {
	rows []rowRef
	// mintedIn are the partitions in which rows hold minted ids of the
	// tick, up to maxMintedParts; mintedAll: in more (taken as all).
	mintedIn  []uuid.UUID
	mintedAll bool
	// keys are the low 32 bits of the keyHash of every client key the
	// rows store under the tick, unordered (4 bytes a key: the cache
	// shares the broker's memory limit; a match of 32 bits that is not
	// the key only sends its batch the long way).
	keys []uint32
}

const (
	// keepTicks: a tick's entry is kept until the newest acceptance time
	// recorded is this many ticks (mintedTickMillis each) past it:
	// clientTickSkew and half a second. A key is stored under its tick
	// only when accepted within clientTickSkew of it, and batches are
	// projected in acceptance order, so later batches' keys of a tick
	// dropped are stored under their own key hash; a late repeat of an
	// older key finds no entry and its batch goes the long way.
	keepTicks = int64((clientTickSkew + time.Second/2) / (mintedTickMillis * time.Millisecond))
	// maxTickKeys bounds the keys held: 1.5 s of keys at 175,000
	// messages a second.
	maxTickKeys = 1 << 18
	// maxTickRows is how many of this Store's rows may hold a tick's
	// mintedKey for client keys (crowded): a producer sending keys of one
	// UUIDv7 time over and over would otherwise add a row to the tick with
	// every batch for 2 × clientTickSkew, and every probe of the tick that
	// goes the long way reads each row's segment of its partition. Normal
	// traffic puts a tick's keys in a few consecutive batches.
	maxTickRows = 16
	// maxMintedParts bounds the partitions a tick's entry lists as holding
	// minted ids; past it, the tick counts as holding minted ids in every
	// partition.
	maxMintedParts = 64
)

// crowded reports whether client keys of tick should keep their own
// keyHash: maxTickRows of this Store's rows hold the tick's mintedKey
// already, or the tick's entry was dropped (its rows are not counted any
// more).
func (c *tickCache) crowded(tick int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.buckets[tick]; b != nil {
		return len(b.rows) >= maxTickRows
	}
	return tick <= c.dropped
}

// record adds committed row r (r.ref()) to the entries of its ticks
// (r.ticks), with its client keys stored under them (r.tickKeys) and the
// partitions in which it holds minted ids of each (r.mintedAt); r.newest
// is its newest acceptance time (µs).
func (c *tickCache) record(r *dedupRuns) {
	if len(r.ticks) == 0 {
		return
	}
	ref := r.ref()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buckets == nil {
		c.buckets = make(map[int64]*tickBucket)
	}
	bucket := func(tick int64) *tickBucket {
		b := c.buckets[tick]
		if b == nil {
			b = &tickBucket{}
			c.buckets[tick] = b
			i, _ := slices.BinarySearch(c.ticks, tick)
			c.ticks = slices.Insert(c.ticks, i, tick)
		}
		return b
	}
	for _, tick := range r.ticks {
		b := bucket(tick)
		b.rows = append(b.rows, ref)
	}
	for _, m := range r.mintedAt {
		b := bucket(m.tick)
		switch {
		case b.mintedAll || slices.Contains(b.mintedIn, m.pid):
		case len(b.mintedIn) == maxMintedParts:
			b.mintedAll, b.mintedIn = true, nil
		default:
			b.mintedIn = append(b.mintedIn, m.pid)
		}
	}
	var last int64 = -1 // the tick whose bucket b is
	var b *tickBucket
	for _, k := range r.tickKeys {
		if k.tick != last {
			last, b = k.tick, bucket(k.tick)
		}
		b.keys = append(b.keys, uint32(k.hash))
	}
	c.keys += len(r.tickKeys)
	c.newest = max(c.newest, millisTick(r.newest/1000))
	for len(c.ticks) > 0 && (c.ticks[0] < c.newest-keepTicks || c.keys > maxTickKeys) {
		c.keys -= len(c.buckets[c.ticks[0]].keys)
		delete(c.buckets, c.ticks[0])
		c.dropped = max(c.dropped, c.ticks[0])
		c.ticks = c.ticks[1:]
	}
}

// known answers for a batch's client keys in the minted form (keys: each
// key's tick, keyHash and partition): the rows this Store knows to hold
// those ticks' mintedKey (rows, for assert_known_rows), and fresh, false
// when a key's hash is among its tick's recorded keys (the key may repeat
// one), its tick's rows hold minted ids in its partition (it may be the
// text of one), or its tick's entry was dropped while rows are named (a
// named row may hold that tick too, unknown to the cache): the batch must
// then go the long way.
func (c *tickCache) known(keys []tickKey) (rows []rowRef, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last int64 = -1
	var b *tickBucket
	var seen []*tickBucket       // buckets whose rows are in rows (a batch spans a few ticks)
	var want map[uint32]struct{} // the keys' 32 bits, where their tick has keys
	// dropped: a key's tick is one whose entry was dropped (absent, or
	// rebuilt since from later rows only). Its rows are then not all
	// known, and a row named for another tick of the batch that also holds
	// this one would be excused for it by the SQL check, which pairs no
	// row with a tick: the key could be in it, unread.
	dropped := false
	for _, k := range keys {
		if k.tick <= c.dropped {
			dropped = true
		}
		if k.tick != last {
			last = k.tick
			b = c.buckets[k.tick]
			if b != nil && !slices.Contains(seen, b) {
				seen = append(seen, b)
				rows = append(rows, b.rows...)
			}
		}
		if b == nil {
			continue
		}
		if b.mintedAll || slices.Contains(b.mintedIn, k.pid) {
			return nil, false
		}
		if len(b.keys) > 0 {
			if want == nil {
				want = make(map[uint32]struct{}, len(keys))
			}
			want[uint32(k.hash)] = struct{}{}
		}
	}
	if dropped && len(rows) > 0 {
		return nil, false
	}
	// One pass over each tick's recorded keys (a match in another tick of
	// the batch is taken as a match too).
	for _, b := range seen {
		for _, h := range b.keys {
			if _, ok := want[h]; ok {
				return nil, false
			}
		}
	}
	return rows, true
}
