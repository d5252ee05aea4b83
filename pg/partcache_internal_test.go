package pg

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
)

// TestPartIDCacheBounded: however many names go in, the cache holds at
// most two generations of its limit; the names put last are found with
// their ids, a name read between turn-overs survives them all, a name
// not used for two turn-overs is forgotten, and forget and forgetQueue
// drop names from both generations.
func TestPartIDCacheBounded(t *testing.T) {
	const limit = 8
	c := newPartIDCache(limit)
	hot := partKey{"q", "hot"}
	hotID := uuid.New()
	c.put(hot, hotID)
	ids := make(map[partKey]uuid.UUID)
	for i := range 1000 {
		k := partKey{"q", fmt.Sprintf("p%d", i)}
		ids[k] = uuid.New()
		c.put(k, ids[k])
		if n := c.len(); n > 2*limit {
			t.Fatalf("after %d names the cache holds %d, want at most %d", i+1, n, 2*limit)
		}
		if i%(limit/2) == 0 {
			if id, ok := c.get(hot); !ok || id != hotID {
				t.Fatalf("after %d names the hot name is %v, %v; want %v", i+1, id, ok, hotID)
			}
		}
	}
	for i := 1000 - limit + 1; i < 1000; i++ {
		k := partKey{"q", fmt.Sprintf("p%d", i)}
		if id, ok := c.get(k); !ok || id != ids[k] {
			t.Fatalf("recent name %v: %v, %v; want %v", k, id, ok, ids[k])
		}
	}
	if _, ok := c.get(partKey{"q", "p0"}); ok {
		t.Fatal("the first name is still cached after 1,000 others")
	}
	// A name in old, then forgotten: gone from both.
	k := partKey{"q", "p999"}
	c.forget(k)
	if _, ok := c.get(k); ok {
		t.Fatal("forgotten name still cached")
	}
	c.put(partKey{"other", "p1"}, uuid.New())
	c.forgetQueue("q")
	if n := c.len(); n != 1 {
		t.Fatalf("after forgetQueue the cache holds %d names, want 1 (the other queue's)", n)
	}
	if _, ok := c.get(partKey{"other", "p1"}); !ok {
		t.Fatal("forgetQueue dropped another queue's name")
	}
}
