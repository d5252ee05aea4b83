package pg_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

// sdkKey is a client transactionId as Queen's SDKs mint it: the lowercase
// text of a version-7 UUID of time at (µs).
func sdkKey(at int64) string {
	u, _ := uuid.NewV7()
	ms := at / 1000
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return u.String()
}

// sameTimeKey is key i of keys that share u's UUIDv7 time (a producer
// repeating one time): u with i in its last two bytes.
func sameTimeKey(u uuid.UUID, i int) string {
	u[14], u[15] = byte(i>>8), byte(i)
	return u.String()
}

// sidecarKeys is every key of the sidecar rows.
func sidecarKeys(t *testing.T, s *pg.Store) []int64 {
	t.Helper()
	var keys []int64
	if err := s.Pool().QueryRow(context.Background(),
		`SELECT coalesce(array_agg(k), '{}') FROM queen.dedup_batches, unnest(key_hashes) AS k`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestDedupUUIDv7KeysUnderTicks: client transactionIds in the UUIDv7 text
// form, accepted within the skew of their time, are stored under their
// tick's minted key (no key hash of their own) by one-round-trip batches,
// and stay exact: a repeat is a duplicate of its original whether the
// broker's tick cache names it (its own rows) or not (another broker's
// batch, whose prediction assert_known_rows refuses); the same key in
// another partition, and a new key of the same tick, are stored; a key far
// from its acceptance time gets its own key hash and is deduplicated too.
func TestDedupUUIDv7KeysUnderTicks(t *testing.T) {
	x := setupBrokers(t, nil)
	t0 := now()
	k1, k2, k3 := sdkKey(t0), sdkKey(t0), sdkKey(t0)
	first := []pg.ProjectItem{at("u", "P", k1), at("u", "P", k2), at("u", "Q", k3)}
	out := x.projectA(t, first...)
	wantPredicted(t, x.a, 1, 0)
	for _, o := range out {
		wantDup(t, "first batch", o, false, uuid.Nil)
	}
	keys := sidecarKeys(t, x.a)
	var pidP uuid.UUID
	if err := x.a.Pool().QueryRow(context.Background(),
		`SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'u' AND p.name = 'P'`).Scan(&pidP); err != nil {
		t.Fatal(err)
	}
	u1, _ := uuid.Parse(k1)
	tick := pg.MintedMillis(u1) / pg.MintedTickMillis
	if !slices.Contains(keys, pg.MintedKey(tick)) || slices.Contains(keys, pg.KeyHash(pidP, k1)) {
		t.Fatalf("sidecar keys %v: want the tick's minted key %d and no key hash of %s", keys, pg.MintedKey(tick), k1)
	}

	// A new key of the same tick: still one round trip (the cache knows
	// the first row and that it does not hold the key).
	k4 := sdkKey(t0)
	out = x.projectA(t, at("u", "P", k4))
	wantPredicted(t, x.a, 2, 0)
	wantDup(t, "new key, same tick", out[0], false, uuid.Nil)

	// A repeat on the same broker: the cache names it, the long way finds
	// the original; the key in another partition is new.
	out = x.projectA(t, at("u", "P", k2), at("u", "Q", k1), at("u", "P", sdkKey(t0)))
	wantPredicted(t, x.a, 2, 0)
	wantDup(t, "k2 again", out[0], true, first[1].Message.ID)
	wantDup(t, "k1 in Q", out[1], false, uuid.Nil)
	wantDup(t, "a new key beside them", out[2], false, uuid.Nil)

	// Another broker knows none of A's rows: its prediction for a new key
	// of the tick in a partition A's rows hold is refused under the lock
	// (no row wasted), one in a partition they do not hold is not, and a
	// repeat is found the long way.
	x.projectB(t, at("u", "P", "plain"), at("u", "R", "plain")) // B learns the offsets (keys that are no UUID)
	committedBefore, missedBefore := pg.PredictedBatches(x.b)
	out = x.projectB(t, at("u", "P", sdkKey(t0)))
	wantDup(t, "B: a new key of the tick", out[0], false, uuid.Nil)
	if _, missed := pg.PredictedBatches(x.b); missed != missedBefore+1 {
		t.Fatalf("B: %d predictions refused, want %d (A's rows of the tick in P are unknown to B)", missed, missedBefore+1)
	}
	out = x.projectB(t, at("u", "R", sdkKey(t0)))
	wantDup(t, "B: a new key of the tick in R", out[0], false, uuid.Nil)
	if committed, _ := pg.PredictedBatches(x.b); committed != committedBefore+1 {
		t.Fatalf("B: %d one-round-trip batches, want %d (no row of the tick holds R)", committed, committedBefore+1)
	}
	out = x.projectB(t, at("u", "P", k1), at("u", "Q", k3))
	wantDup(t, "B: k1 again", out[0], true, first[0].Message.ID)
	wantDup(t, "B: k3 again", out[1], true, first[2].Message.ID)

	// A key whose time is a minute off its acceptance: its own key hash,
	// found again as before.
	far := sdkKey(t0 - int64(time.Minute/time.Microsecond))
	farItem := at("u", "P", far)
	x.projectA(t, farItem)
	if !slices.Contains(sidecarKeys(t, x.a), pg.KeyHash(pidP, far)) {
		t.Fatal("a key a minute off its acceptance has no key hash of its own")
	}
	out = x.projectA(t, at("u", "P", far))
	wantDup(t, "far key again", out[0], true, farItem.Message.ID)

	// Every message once, in order.
	got := stored(t, x.a, "u")
	if n := len(got["P"]); n != 7 {
		t.Fatalf("partition P holds %d messages, want 7 (k1, k2, k4, a new key, B's plain and new keys, far; no repeat)", n)
	}
}

// TestDedupUUIDv7CrowdedTick: keys that all carry one UUIDv7 time (a
// producer repeating it) go under the tick's key for maxTickRows rows of
// this broker at most, then under key hashes of their own; a repeat of
// either kind is a duplicate.
func TestDedupUUIDv7CrowdedTick(t *testing.T) {
	b := setup(t)
	t0 := now()
	u, _ := uuid.Parse(sdkKey(t0))
	key := func(i int) string { return sameTimeKey(u, i) }
	const batches = pg.MaxTickRows + 4
	var firsts []pg.ProjectItem
	for i := range batches {
		it := item("c", key(i), t0)
		firsts = append(firsts, it)
		wantDup(t, "new key", b.project(t, it)[0], false, uuid.Nil)
	}
	tick := pg.MintedMillis(u) / pg.MintedTickMillis
	var rows int
	if err := b.store.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM queen.dedup_batches WHERE key_hashes && ARRAY[$1::bigint]`, pg.MintedKey(tick)).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != pg.MaxTickRows {
		t.Fatalf("%d rows hold the tick's key, want %d", rows, pg.MaxTickRows)
	}
	out := b.project(t, item("c", key(0), t0), item("c", key(batches-1), t0))
	wantDup(t, "a key under the tick, again", out[0], true, firsts[0].Message.ID)
	wantDup(t, "a key under its own hash, again", out[1], true, firsts[batches-1].Message.ID)
}

// TestDedupUUIDv7OlderRowPartKey: a row written by a version that kept
// one minted key per partition and tick still makes the text of its
// minted id a duplicate on the one-round-trip way (assert_new_keys probes
// that key; assert_known_rows does not see such a row).
func TestDedupUUIDv7OlderRowPartKey(t *testing.T) {
	b := setup(t)
	minted := b.olderMintedRow(t, "op")
	b.reopen(t)
	b.project(t, item("op", "plain", now())) // the new Store learns the partition's offset
	committed, _ := pg.PredictedBatches(b.store)
	out := b.project(t, item("op", minted.Message.ID.String(), now()))
	wantDup(t, "minted id as transactionId against an older row", out[0], true, minted.Message.ID)
	if c, m := pg.PredictedBatches(b.store); c != committed || m != 1 {
		t.Fatalf("one-round-trip batches %d -> %d, refused %d: want the attempt refused", committed, c, m)
	}
}

// TestDedupUUIDv7KeyIsMintedIDOfSameBatch: a client transactionId that is
// the text of an id minted in the same batch (the client had the answer of
// an earlier push) is its duplicate: such a batch is not predicted.
func TestDedupUUIDv7KeyIsMintedIDOfSameBatch(t *testing.T) {
	b := setup(t)
	minted := item("s", "", now())
	again := item("s", minted.Message.ID.String(), now())
	out := b.project(t, minted, again, item("s", sdkKey(now()), now()))
	wantDup(t, "minted", out[0], false, uuid.Nil)
	wantDup(t, "its id as a transactionId", out[1], true, minted.Message.ID)
	wantDup(t, "another UUIDv7 key", out[2], false, uuid.Nil)
}

// acceptedAt is item q/p/txid accepted at µs (the push path's acceptance
// time, which decides where a minted-form key is kept).
func acceptedAt(q, p, txid string, us int64) pg.ProjectItem {
	it := item(q, txid, us)
	it.Partition = p
	return it
}

// TestDedupUUIDv7OwnHashFoundThroughMark: a minted-form key kept under its
// own key hash (its UUIDv7 time more than the skew ahead of its first
// acceptance: a client clock running ahead) marks its tick in its row; a
// repeat accepted later, within the skew, goes the one-round-trip way
// without probing key hashes, and the mark refuses it: a duplicate, on the
// broker that wrote it and on another.
func TestDedupUUIDv7OwnHashFoundThroughMark(t *testing.T) {
	x := setupBrokers(t, nil)
	x.projectA(t, at("m", "P", "plain")) // A learns P's offset (B looks it up with its first batch)
	t0 := now()
	k := sdkKey(t0 + int64(5*time.Second/time.Microsecond))
	first := acceptedAt("m", "P", k, t0)
	wantDup(t, "first", x.projectA(t, first)[0], false, uuid.Nil)
	u, _ := uuid.Parse(k)
	tick := pg.MintedMillis(u) / pg.MintedTickMillis
	if keys := sidecarKeys(t, x.a); !slices.Contains(keys, pg.HashedTickKey(tick)) || slices.Contains(keys, pg.MintedKey(tick)) {
		t.Fatalf("sidecar keys %v: want the tick's mark %d and not its minted key", keys, pg.HashedTickKey(tick))
	}
	for _, s := range []struct {
		name    string
		store   *pg.Store
		project func(*testing.T, ...pg.ProjectItem) []pg.Outcome
	}{{"A", x.a, x.projectA}, {"B", x.b, x.projectB}} {
		c0, m0 := pg.PredictedBatches(s.store)
		// 4.5 s later: within the skew of the key's time now.
		out := s.project(t, acceptedAt("m", "P", k, t0+int64(4500*time.Millisecond/time.Microsecond)))
		wantDup(t, s.name+": the key again", out[0], true, first.Message.ID)
		if c, m := pg.PredictedBatches(s.store); c != c0 || m != m0+1 {
			t.Fatalf("%s: one-round-trip batches %d -> %d, refused %d -> %d: want the attempt refused by the mark", s.name, c0, c, m0, m)
		}
	}
}

// TestDedupUUIDv7CrowdedTickOtherBroker: broker A keeps a crowded tick's
// keys under their own key hashes; broker B, whose cache knows nothing of
// the tick, finds such a key again through the tick's mark, also once the
// tick's older rows under its minted key are gone.
func TestDedupUUIDv7CrowdedTickOtherBroker(t *testing.T) {
	x := setupBrokers(t, nil)
	t0 := now()
	u, _ := uuid.Parse(sdkKey(t0))
	key := func(i int) string { return sameTimeKey(u, i) }
	var last pg.ProjectItem
	for i := range pg.MaxTickRows + 1 {
		last = at("c", "P", key(i))
		wantDup(t, "new key", x.projectA(t, last)[0], false, uuid.Nil)
	}
	// The tick's rows under its minted key go first (the sweep removes
	// rows oldest first); the newer row with the key under its own hash
	// is what is left of the tick.
	tick := pg.MintedMillis(u) / pg.MintedTickMillis
	if _, err := x.a.Pool().Exec(context.Background(), `DELETE FROM queen.dedup_batches WHERE key_hashes && ARRAY[$1::bigint]`,
		pg.MintedKey(tick)); err != nil {
		t.Fatal(err)
	}
	x.projectB(t, at("c", "P", "plain")) // B learns P's offset
	c0, m0 := pg.PredictedBatches(x.b)
	out := x.projectB(t, at("c", "P", key(pg.MaxTickRows)))
	wantDup(t, "B: A's key under its own hash, again", out[0], true, last.Message.ID)
	if c, m := pg.PredictedBatches(x.b); c != c0 || m != m0+1 {
		t.Fatalf("B: one-round-trip batches %d -> %d, refused %d -> %d: want the attempt refused", c0, c, m0, m)
	}
}

// TestDedupUUIDv7RowOfEarlierLayout: a sidecar row written by a version
// before the marks (no layout) that holds a minted-form key under its key
// hash makes a repeat of the key a duplicate although the Store had found
// no such row: assert_tick_rows refuses the one-round-trip try, and the
// Store probes key hashes again from then on (the next batch of new keys
// goes one round trip without being refused).
func TestDedupUUIDv7RowOfEarlierLayout(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	k := sdkKey(now())
	first := item("e", k, now())
	b.project(t, first)
	b.reopen(t)                             // a Store whose cache does not know the row
	b.project(t, item("e", "plain", now())) // and that learns the partition's offset
	// As a version before the marks wrote it: the key under its own key
	// hash, no mark, no layout.
	if _, err := b.store.Pool().Exec(ctx, `UPDATE queen.dedup_batches SET key_hashes = ARRAY[$1::bigint], layout = NULL
		WHERE base_offsets[1] = 0`, pg.KeyHash(partitionID(t, b.store, "e", "P"), k)); err != nil {
		t.Fatal(err)
	}
	if pg.UnmarkedRows(b.store) {
		t.Fatal("the Store took the sidecar for one with rows of an earlier layout before it held any")
	}
	c0, m0 := pg.PredictedBatches(b.store)
	out := b.project(t, item("e", k, now()))
	wantDup(t, "the key again", out[0], true, first.Message.ID)
	if c, m := pg.PredictedBatches(b.store); c != c0 || m != m0+1 {
		t.Fatalf("one-round-trip batches %d -> %d, refused %d -> %d: want the attempt refused", c0, c, m0, m)
	}
	if !pg.UnmarkedRows(b.store) {
		t.Fatal("after the refusal the Store does not probe key hashes again")
	}
	out = b.project(t, item("e", sdkKey(now()), now()))
	wantDup(t, "a new key", out[0], false, uuid.Nil)
	if c, m := pg.PredictedBatches(b.store); c != c0+1 || m != m0+1 {
		t.Fatalf("one-round-trip batches %d -> %d, refused %d -> %d: want the new key's batch one round trip", c0, c, m0, m)
	}
	// Once the sweep has removed the row, the marks are enough again.
	if _, err := b.store.Pool().Exec(ctx, `DELETE FROM queen.dedup_batches WHERE layout IS NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.SweepDedup(ctx, 0, 100); err != nil {
		t.Fatal(err)
	}
	if pg.UnmarkedRows(b.store) {
		t.Fatal("the sweep's look did not see that no row of an earlier layout is left")
	}
}

// partitionID is the id of partition p of queue q.
func partitionID(t *testing.T, s *pg.Store, q, p string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := s.Pool().QueryRow(context.Background(),
		`SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND p.name = $2`, q, p).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDedupUUIDv7DroppedTickNamedByOtherTick: a row holds a key under an
// old tick and another key under a new one; the tick cache drops the old
// tick and keeps the new one. A repeat of the old tick's key beside a new
// key of the new tick (which names the row) is a duplicate: the cache does
// not vouch for a row it names for one tick where the batch has a key of
// a tick it dropped (found by a review; the one-round-trip way stored the
// repeat).
func TestDedupUUIDv7DroppedTickNamedByOtherTick(t *testing.T) {
	b := setup(t)
	ms := int64(time.Millisecond / time.Microsecond)
	t0 := now()
	k := sdkKey(t0 - 900*ms)
	first := item("h", k, t0)
	other := item("h", sdkKey(t0+900*ms), t0)
	other.Partition = "Q"
	b.project(t, first, other) // one row, both ticks
	// A later batch (a minted id), accepted 0.7 s later: the cache drops
	// ticks more than 1.5 s before it, the old tick only.
	later := item("h", "", t0+700*ms)
	later.Partition = "S"
	b.project(t, later)
	again := item("h", k, t0+800*ms)
	fresh := item("h", sdkKey(t0+900*ms), t0+800*ms)
	fresh.Partition = "Q"
	out := b.project(t, again, fresh)
	wantDup(t, "the old tick's key again", out[0], true, first.Message.ID)
	wantDup(t, "a new key of the new tick", out[1], false, uuid.Nil)
}
