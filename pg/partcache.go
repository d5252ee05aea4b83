package pg

import "github.com/google/uuid"

// maxPartitionIDs bounds the Store's cache of partition ids by name
// (partIDCache): at most this many (queue, partition) names in each of its
// two generations, so at most twice this many in all, about 100 bytes
// each (a 48-byte map slot with its share of the map's free slots and
// control bytes, and the partition name's string; the queue name is
// shared with the items' own). Measured: 62,700 partitions created by
// `queen-bench -scenario push-16x100-p10k-new` held 5.9 MB of map and 1 MB
// of names in the unbounded map this replaced (docs/decisions.md,
// "Memory").
const maxPartitionIDs = 1 << 15

// partIDCache maps (queue, partition) names to partition ids, bounded by
// its limit per generation: names are added to cur; when cur holds limit
// names it becomes old and cur starts empty, and a name found only in old
// moves back to cur. So a name used since the last turn over stays, one
// unused for two turns is forgotten (its next batch looks it up again,
// one round trip), and memory does not follow the number of partitions a
// broker has ever touched. Not safe for concurrent use (Store.mu guards
// it). The zero value is not usable: see newPartIDCache.
type partIDCache struct {
	cur, old map[partKey]uuid.UUID
	limit    int
}

// newPartIDCache returns an empty cache of at most limit names per
// generation (limit >= 1).
func newPartIDCache(limit int) *partIDCache {
	return &partIDCache{cur: make(map[partKey]uuid.UUID), limit: max(limit, 1)}
}

// get returns k's id and true, or uuid.Nil and false when k is not cached.
func (c *partIDCache) get(k partKey) (uuid.UUID, bool) {
	if id, ok := c.cur[k]; ok {
		return id, true
	}
	if id, ok := c.old[k]; ok {
		c.put(k, id)
		return id, true
	}
	return uuid.Nil, false
}

// put caches k's id in cur (and drops it from old), turning the
// generations over first when cur is full.
func (c *partIDCache) put(k partKey, id uuid.UUID) {
	delete(c.old, k)
	if _, ok := c.cur[k]; !ok && len(c.cur) >= c.limit {
		c.old, c.cur = c.cur, make(map[partKey]uuid.UUID)
	}
	c.cur[k] = id
}

// forget drops k from both generations.
func (c *partIDCache) forget(k partKey) {
	delete(c.cur, k)
	delete(c.old, k)
}

// forgetQueue drops every partition of the queue named queue.
func (c *partIDCache) forgetQueue(queue string) {
	for _, m := range []map[partKey]uuid.UUID{c.cur, c.old} {
		for k := range m {
			if k.queue == queue {
				delete(m, k)
			}
		}
	}
}

// len is the number of names held in both generations.
func (c *partIDCache) len() int { return len(c.cur) + len(c.old) }
