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
		tick, ok := tickStored(&m)
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
// every other client key; tickKeys lists the client keys under ticks with
// their key hashes, mintedTicks the ticks that hold minted ids.
func TestDedupRowTickKeys(t *testing.T) {
	pid := uuid.New()
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
	var r dedupRuns
	r.add(pid, 0, []Message{mintedMsg(atMs), client(sameTick), client(nextTick), client(old), client("plain")}, nil)
	first, second := atMs/mintedTickMillis, atMs/mintedTickMillis+1
	want := []int64{mintedKey(first), mintedKey(second), keyHash(pid, old), keyHash(pid, "plain")}
	if !slices.Equal(r.hashes, want) {
		t.Fatalf("hashes %v, want %v", r.hashes, want)
	}
	if !slices.Equal(r.ticks, []int64{first, second}) || !slices.Equal(r.mintedTicks, []int64{first}) {
		t.Fatalf("ticks %v, minted ticks %v", r.ticks, r.mintedTicks)
	}
	wantKeys := []tickKey{{first, keyHash(pid, sameTick)}, {second, keyHash(pid, nextTick)}}
	if !slices.Equal(r.tickKeys, wantKeys) {
		t.Fatalf("tick keys %v, want %v", r.tickKeys, wantKeys)
	}
}

// TestTickCache: known names the rows recorded for the keys' ticks and is
// fresh unless a key's hash was recorded under its tick or the tick's rows
// hold minted ids; entries far behind the newest acceptance time, and the
// oldest beyond maxTickKeys keys, are dropped whole.
func TestTickCache(t *testing.T) {
	var c tickCache
	r1 := rowRef{uuid.New(), 0}
	r2 := rowRef{uuid.New(), 7}
	at := int64(101 * mintedTickMillis * 1000) // µs, in tick 101
	c.record(r1, &dedupRuns{ticks: []int64{100, 101}, tickKeys: []tickKey{{100, 1}, {101, 2}, {100, 3}}, newest: at})
	c.record(r2, &dedupRuns{ticks: []int64{101}, tickKeys: []tickKey{{101, 4}}, newest: at})
	rows, fresh := c.known([]tickKey{{101, 9}, {100, 8}, {101, 10}})
	if !fresh || !slices.Equal(rows, []rowRef{r1, r2, r1}) {
		t.Fatalf("known: %v %v, want rows of 101 then 100, fresh", rows, fresh)
	}
	for _, k := range []tickKey{{100, 3}, {101, 4}} {
		if _, fresh := c.known([]tickKey{{102, 5}, k}); fresh {
			t.Errorf("key %v recorded, taken as fresh", k)
		}
	}
	if rows, fresh := c.known([]tickKey{{102, 1}}); !fresh || len(rows) != 0 {
		t.Errorf("unrecorded tick: %v %v", rows, fresh)
	}
	// A row with minted ids of a tick: its keys are not kept, so no key of
	// the tick is taken as fresh; other ticks are unaffected.
	c.record(rowRef{uuid.New(), 1}, &dedupRuns{ticks: []int64{102}, mintedTicks: []int64{102}, newest: 102 * mintedTickMillis * 1000})
	if _, fresh := c.known([]tickKey{{102, 99}}); fresh {
		t.Error("tick with minted ids taken as fresh")
	}
	if _, fresh := c.known([]tickKey{{100, 99}}); !fresh {
		t.Error("tick 100 not fresh after a minted row of 102")
	}
	// Accepted far later: the old ticks go, whatever ticks the row holds.
	c.record(rowRef{uuid.New(), 2}, &dedupRuns{ticks: []int64{90}, tickKeys: []tickKey{{90, 1}},
		newest: (100 + keepTicks + 1) * mintedTickMillis * 1000})
	if _, ok := c.buckets[100]; ok {
		t.Error("tick 100 kept past keepTicks")
	}
	if _, ok := c.buckets[101]; !ok {
		t.Error("tick 101 dropped within keepTicks")
	}
	if rows, fresh := c.known([]tickKey{{100, 3}}); !fresh || len(rows) != 0 {
		t.Errorf("dropped tick: %v %v, want no rows and fresh (assert_known_rows then refuses any row)", rows, fresh)
	}
	// Too many keys: the oldest ticks go first.
	big := dedupRuns{newest: at}
	big.ticks = []int64{200}
	for i := range maxTickKeys {
		big.tickKeys = append(big.tickKeys, tickKey{200, int64(i + 1000)})
	}
	c.record(rowRef{uuid.New(), 3}, &big)
	if _, ok := c.buckets[101]; ok || c.keys > maxTickKeys {
		t.Errorf("over maxTickKeys: tick 101 kept or %d keys held", c.keys)
	}
	if !slices.IsSorted(c.ticks) || len(c.ticks) != len(c.buckets) {
		t.Errorf("ticks %v for %d buckets", c.ticks, len(c.buckets))
	}
}
