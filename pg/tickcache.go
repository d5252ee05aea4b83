package pg

import (
	"slices"
	"sync"
	"time"
)

// tickCache remembers, per 10 ms tick, the sidecar rows this Store
// committed that hold the tick's mintedKey (rows with minted ids of the
// tick, or with client keys stored under it: tickStored), whether any of
// them holds minted ids, and the keyHash of each client key stored under
// the tick. It lets a projection batch whose client transactionIds are in
// the minted form (the UUIDv7 text Queen's SDKs send) go the one round
// trip way (projectPredicted): its keys' ticks name this Store's recent
// rows, which the cache shows hold none of the batch's keys, and
// assert_known_rows checks under the partition locks that no other row
// holds those ticks' keys (another broker's, a transactional push's, one
// the cache dropped or never saw committed); if one does, the batch rolls
// back and the long way reads and compares the segments.
//
// A tick's entry is whole or absent: a row is recorded in every tick it
// holds once its COMMIT is confirmed (a row whose outcome is unknown is
// never recorded, so it counts as unknown), and entries are dropped a tick
// at a time: those more than keepTicks behind the newest acceptance time
// recorded (the projector's clock, so a projector catching up on a
// backlog keeps what its batches need), and the oldest while more than
// maxTickKeys keys are held (about 12 bytes a key: at most some 3 MB). A keyHash is 64 bits of the key, so a key the
// cache names may be a collision, and the minted ids of a tick are not
// kept (a client key may be the text of one of them): such a batch goes
// the long way, which decides exactly.
type tickCache struct {
	mu      sync.Mutex
	buckets map[int64]*tickBucket
	ticks   []int64 // the ticks of buckets, ascending
	keys    int     // keys held over all buckets
	newest  int64   // the tick of the newest acceptance time recorded
}

// tickBucket is one tick's entry.
type tickBucket struct {
	rows   []rowRef
	minted bool // a row of rows holds minted ids of the tick
	keys   map[int64]struct{}
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
)

// record adds committed row ref to the entries of its ticks (r.ticks),
// with its client keys stored under them (r.tickKeys) and whether it holds
// minted ids of each (r.mintedTicks); r.newest is its newest acceptance
// time (µs).
func (c *tickCache) record(ref rowRef, r *dedupRuns) {
	if len(r.ticks) == 0 {
		return
	}
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
		b.minted = b.minted || slices.Contains(r.mintedTicks, tick)
	}
	var last int64 = -1 // the tick whose bucket b is
	var b *tickBucket
	for _, k := range r.tickKeys {
		if k.tick != last {
			last, b = k.tick, bucket(k.tick)
			if b.keys == nil {
				b.keys = make(map[int64]struct{})
			}
		}
		if _, ok := b.keys[k.hash]; !ok {
			b.keys[k.hash] = struct{}{}
			c.keys++
		}
	}
	c.newest = max(c.newest, r.newest/1000/mintedTickMillis)
	for len(c.ticks) > 0 && (c.ticks[0] < c.newest-keepTicks || c.keys > maxTickKeys) {
		c.keys -= len(c.buckets[c.ticks[0]].keys)
		delete(c.buckets, c.ticks[0])
		c.ticks = c.ticks[1:]
	}
}

// known answers for a batch's client keys in the minted form (keys: each
// key's tick and keyHash): the rows this Store knows to hold those ticks'
// mintedKey (rows, for assert_known_rows), and fresh, false when a key's
// hash is among its tick's recorded keys (the key may repeat one) or its
// tick's rows hold minted ids (it may be the text of one): the batch must
// then go the long way.
func (c *tickCache) known(keys []tickKey) (rows []rowRef, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last int64 = -1
	var b *tickBucket
	var seen []int64 // ticks whose rows are in rows (a batch spans a few)
	for _, k := range keys {
		if k.tick != last {
			last = k.tick
			b = c.buckets[k.tick]
			if b != nil && !slices.Contains(seen, k.tick) {
				if b.minted {
					return nil, false
				}
				seen = append(seen, k.tick)
				rows = append(rows, b.rows...)
			}
		}
		if b == nil {
			continue
		}
		if _, ok := b.keys[k.hash]; ok {
			return nil, false
		}
	}
	return rows, true
}
