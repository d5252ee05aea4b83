package pg

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
)

// uuid7At is a version-7 UUID of Unix millisecond ms (random otherwise).
func uuid7At(ms int64) uuid.UUID {
	u, _ := uuid.NewV7()
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return u
}

// TestTickStoredSkew: a client transactionId in the minted form is stored
// under its tick when its UUIDv7 time is within clientTickSkew of its
// acceptance, either side; outside it, in upper case, or not version 7, it
// keeps its own key hash.
func TestTickStoredSkew(t *testing.T) {
	at := time.Date(2026, 12, 6, 15, 0, 0, 0, time.UTC)
	skew := clientTickSkew.Milliseconds()
	for _, tt := range []struct {
		name string
		txid string
		want bool
	}{
		{"now", uuid7At(at.UnixMilli()).String(), true},
		{"skew before", uuid7At(at.UnixMilli() - skew).String(), true},
		{"skew after", uuid7At(at.UnixMilli() + skew).String(), true},
		{"past the skew", uuid7At(at.UnixMilli() - skew - 1).String(), false},
		{"future past the skew", uuid7At(at.UnixMilli() + skew + 1).String(), false},
		{"upper case", string(toUpper(uuid7At(at.UnixMilli()).String())), false},
		{"version 4", uuid.NewString(), false},
		{"not a UUID", "order-42", false},
	} {
		m := Message{ID: uuid.New(), TransactionID: tt.txid, CreatedAtMicros: at.UnixMicro()}
		tick, _, ok := tickStored(&m)
		if ok != tt.want {
			t.Errorf("%s: tickStored(%q) = %v, want %v", tt.name, tt.txid, ok, tt.want)
		}
		if ok {
			u, _ := uuid.Parse(tt.txid)
			if tick != mintedTick(u) {
				t.Errorf("%s: tick %d, want %d", tt.name, tick, mintedTick(u))
			}
		}
	}
}

func toUpper(s string) []byte {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return b
}

// TestDedupRowTickKeys: a row holds one mintedKey per tick for its minted
// ids and its in-skew minted-form client keys together, and a key hash for
// every other client key (and for an in-skew key of a crowded tick), with
// the hashedTickKey of the tick of each minted-form key among those;
// tickKeys lists the client keys under ticks with their key hashes and
// partitions, mintedAt the (tick, partition) pairs of minted ids.
func TestDedupRowTickKeys(t *testing.T) {
	pid, pid2 := uuid.New(), uuid.New()
	atMs := int64(1_700_000_000_000) // a whole tick
	at := atMs * 1000
	mintedMsg := func(ms int64) Message {
		id := uuid7At(ms)
		return Message{ID: id, TransactionID: id.String(), CreatedAtMicros: at}
	}
	client := func(txid string) Message { return Message{ID: uuid.New(), TransactionID: txid, CreatedAtMicros: at} }
	sameTick := uuid7At(atMs + 3).String()
	nextTick := uuid7At(atMs + mintedTickMillis).String()
	old := uuid7At(atMs - 60_000).String()
	crowdedTick := uuid7At(atMs + 2*mintedTickMillis).String()
	first, second, third := atMs/mintedTickMillis, atMs/mintedTickMillis+1, atMs/mintedTickMillis+2
	r := dedupRuns{crowded: func(tick int64) bool { return tick == third }}
	r.add(pid, 0, []Message{mintedMsg(atMs), client(sameTick), client(nextTick), client(old), client("plain"),
		mintedMsg(atMs + 1), client(crowdedTick)}, nil)
	r.add(pid2, 5, []Message{mintedMsg(atMs + mintedTickMillis)}, nil)
	oldTick := (atMs - 60_000) / mintedTickMillis
	want := []int64{mintedKey(first), mintedKey(second), keyHash(pid, old), hashedTickKey(oldTick), keyHash(pid, "plain"),
		keyHash(pid, crowdedTick), hashedTickKey(third)}
	if !slices.Equal(r.hashes, want) {
		t.Fatalf("hashes %v, want %v", r.hashes, want)
	}
	// A minted-form key under its own hash marks its tick, once per row.
	if !slices.Equal(r.marked, []int64{oldTick, third}) {
		t.Fatalf("marked ticks %v, want %v", r.marked, []int64{oldTick, third})
	}
	if !slices.Equal(r.ticks, []int64{first, second}) {
		t.Fatalf("ticks %v", r.ticks)
	}
	if want := []tickPart{{first, pid}, {second, pid2}}; !slices.Equal(r.mintedAt, want) {
		t.Fatalf("minted at %v, want %v", r.mintedAt, want)
	}
	wantKeys := []rowKey{{first, keyHash(pid, sameTick)}, {second, keyHash(pid, nextTick)}}
	if !slices.Equal(r.tickKeys, wantKeys) {
		t.Fatalf("tick keys %v, want %v", r.tickKeys, wantKeys)
	}
}

// rowOf is r as the row whose first partition and base offset are ref's.
func rowOf(ref rowRef, r *dedupRuns) *dedupRuns {
	r.pid, r.base = []uuid.UUID{ref.pid}, []int64{ref.base}
	return r
}

// TestTickCache: known names the rows recorded for the keys' ticks and is
// fresh unless a key's hash was recorded under its tick or the tick's rows
// hold minted ids in the key's partition; crowded counts a tick's rows;
// entries far behind the newest acceptance time, and the oldest beyond
// maxTickKeys keys, are dropped whole (and their ticks count as crowded).
func TestTickCache(t *testing.T) {
	var c tickCache
	p, q := uuid.New(), uuid.New()
	r1 := rowRef{uuid.New(), 0}
	r2 := rowRef{uuid.New(), 7}
	at := int64(101 * mintedTickMillis * 1000) // µs, in tick 101
	c.record(rowOf(r1, &dedupRuns{ticks: []int64{100, 101}, tickKeys: []rowKey{{100, 1}, {101, 2}, {100, 3}}, newest: at}))
	c.record(rowOf(r2, &dedupRuns{ticks: []int64{101}, tickKeys: []rowKey{{101, 4}}, newest: at}))
	rows, fresh := c.known([]tickKey{{101, 9, p}, {100, 8, p}, {101, 10, q}})
	if !fresh || !slices.Equal(rows, []rowRef{r1, r2, r1}) {
		t.Fatalf("known: %v %v, want rows of 101 then 100, fresh", rows, fresh)
	}
	for _, k := range []tickKey{{100, 3, p}, {101, 4, q}} {
		if _, fresh := c.known([]tickKey{{102, 5, p}, k}); fresh {
			t.Errorf("key %v recorded, taken as fresh", k)
		}
	}
	if rows, fresh := c.known([]tickKey{{102, 1, p}}); !fresh || len(rows) != 0 {
		t.Errorf("unrecorded tick: %v %v", rows, fresh)
	}
	// A row with minted ids of a tick in partition q: q's keys of the tick
	// are not fresh (a key may be a minted id's text), p's are.
	c.record(rowOf(rowRef{uuid.New(), 1}, &dedupRuns{ticks: []int64{102}, mintedAt: []tickPart{{102, q}}, newest: at}))
	if _, fresh := c.known([]tickKey{{102, 99, q}}); fresh {
		t.Error("tick with minted ids in the key's partition taken as fresh")
	}
	if _, fresh := c.known([]tickKey{{102, 99, p}}); !fresh {
		t.Error("tick with minted ids in another partition not fresh")
	}
	// Past maxMintedParts partitions, every partition counts.
	var many dedupRuns
	many.ticks, many.newest = []int64{103}, at
	for range maxMintedParts + 1 {
		many.mintedAt = append(many.mintedAt, tickPart{103, uuid.New()})
	}
	c.record(rowOf(rowRef{uuid.New(), 9}, &many))
	if _, fresh := c.known([]tickKey{{103, 99, p}}); fresh {
		t.Error("tick with minted ids in more than maxMintedParts partitions taken as fresh for another")
	}
	// crowded: maxTickRows rows of a tick.
	for i := range maxTickRows {
		if c.crowded(104) {
			t.Fatalf("tick 104 crowded at %d rows", i)
		}
		c.record(rowOf(rowRef{uuid.New(), int64(i)}, &dedupRuns{ticks: []int64{104}, newest: at}))
	}
	if !c.crowded(104) {
		t.Errorf("tick 104 not crowded at %d rows", maxTickRows)
	}
	// Accepted far later: the old ticks go, whatever ticks the row holds,
	// and count as crowded from then on.
	c.record(rowOf(rowRef{uuid.New(), 2}, &dedupRuns{ticks: []int64{90}, tickKeys: []rowKey{{90, 1}},
		newest: (100 + keepTicks + 1) * mintedTickMillis * 1000}))
	if _, ok := c.buckets[100]; ok {
		t.Error("tick 100 kept past keepTicks")
	}
	if _, ok := c.buckets[101]; !ok {
		t.Error("tick 101 dropped within keepTicks")
	}
	if !c.crowded(100) || c.crowded(105) {
		t.Errorf("crowded: dropped tick 100 %v, new tick 105 %v", c.crowded(100), c.crowded(105))
	}
	if rows, fresh := c.known([]tickKey{{100, 3, p}}); !fresh || len(rows) != 0 {
		t.Errorf("dropped tick: %v %v, want no rows and fresh (assert_known_rows then refuses any row)", rows, fresh)
	}
	// Too many keys: the oldest ticks go first.
	recent := 100 + keepTicks // within keepTicks of the newest acceptance
	c.record(rowOf(rowRef{uuid.New(), 4}, &dedupRuns{ticks: []int64{recent}, tickKeys: []rowKey{{recent, 1}, {recent, 2}}, newest: at}))
	big := dedupRuns{newest: at}
	big.ticks = []int64{recent + 1}
	for i := range maxTickKeys {
		big.tickKeys = append(big.tickKeys, rowKey{recent + 1, int64(i + 1000)})
	}
	c.record(rowOf(rowRef{uuid.New(), 3}, &big))
	if _, ok := c.buckets[recent]; ok || c.keys > maxTickKeys {
		t.Errorf("over maxTickKeys: tick %d kept or %d keys held", recent, c.keys)
	}
	if _, ok := c.buckets[recent+1]; !ok {
		t.Errorf("tick %d, the newest, dropped", recent+1)
	}
	if !slices.IsSorted(c.ticks) || len(c.ticks) != len(c.buckets) {
		t.Errorf("ticks %v for %d buckets", c.ticks, len(c.buckets))
	}
}
