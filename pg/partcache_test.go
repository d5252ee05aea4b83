package pg_test

import (
	"fmt"
	"testing"

	"github.com/queenmq/queen-go/pg"
)

// TestProjectPartitionIDCacheBounded: with the cache of partition ids
// bounded to 16 names per generation, batches over 300 partitions (most
// evicted before their next batch, so looked up again) still store every
// item at its partition's next offset, client keys sent again are still
// duplicates, and the cache never holds more than two generations.
func TestProjectPartitionIDCacheBounded(t *testing.T) {
	x := setupBrokers(t, nil)
	pg.SetPartitionIDLimit(x.a, 16)
	const parts = 300
	next := make(map[string]int64)
	seq := 0
	for b := range 8 {
		items := make([]pg.ProjectItem, 200)
		for i := range items {
			seq++
			txid := ""
			if seq%2 == 0 {
				txid = fmt.Sprintf("k-%d", seq)
			}
			items[i] = at("cache", fmt.Sprintf("p%d", (seq*7)%parts), txid)
		}
		out := x.projectA(t, items...)
		for i, o := range out {
			p := items[i].Partition
			if o.Duplicate || o.Offset != next[p] {
				t.Fatalf("batch %d item %d (%s): %+v, want stored at offset %d", b, i, p, o, next[p])
			}
			next[p]++
		}
		if n := pg.PartitionIDsCached(x.a); n > 32 {
			t.Fatalf("after batch %d the cache holds %d names, want at most 32", b, n)
		}
	}
	// Keys of the first batches, sent again, to partitions long evicted.
	again := []pg.ProjectItem{at("cache", "p14", "k-2"), at("cache", "p28", "k-4")}
	for i, o := range x.projectA(t, again...) {
		if !o.Duplicate {
			t.Fatalf("%s sent again: %+v, want a duplicate", again[i].Message.TransactionID, o)
		}
	}
}
