package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

type bundle struct {
	store  *pg.Store
	broker uuid.UUID
	wal    uint64
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{store: openStore(t), broker: uuid.New()}
}

// item is a push of txid ("" = pushed without one: the minted id's text)
// to queue q, partition P, accepted at µs.
func item(q, txid string, at int64) pg.ProjectItem {
	id, _ := uuid.NewV7()
	if txid == "" {
		txid = id.String()
	}
	return pg.ProjectItem{Queue: q, Partition: "P", AcceptedAtMicros: at,
		Message: pg.Message{ID: id, TransactionID: txid, CreatedAtMicros: at, Payload: []byte(`1`)}}
}

func (b *bundle) project(t *testing.T, items ...pg.ProjectItem) []pg.Outcome {
	t.Helper()
	b.wal++
	out, err := b.store.Project(context.Background(), b.broker, pg.Checkpoint{Index: b.wal, HasCRC: true}, items)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// reopen opens a second Store on b's database, as a broker started on
// an upgraded database does (EnsureSchema applied), makes it b's store
// and returns it; it is closed when the test ends.
func (b *bundle) reopen(t *testing.T) *pg.Store {
	t.Helper()
	s := testenv.OpenStore(t, pg.Config{URL: b.store.Pool().Config().ConnString()})
	if err := s.EnsureSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.store = s
	return s
}

func now() int64 { return time.Now().UnixMicro() }

// wantDup checks outcome o: a duplicate of orig (its id) or stored.
func wantDup(t *testing.T, what string, o pg.Outcome, dup bool, orig uuid.UUID) {
	t.Helper()
	if o.Duplicate != dup || (dup && o.MessageID != orig) {
		t.Fatalf("%s: %+v, want duplicate=%v of %s", what, o, dup, orig)
	}
}

// TestDedupHashCollisionIsExact: with every key hashing alike, the sidecar
// names every stored message as a candidate; only the exact transactionId
// deduplicates, inside one batch and across batches.
func TestDedupHashCollisionIsExact(t *testing.T) {
	defer pg.SetKeyHash(func(uuid.UUID, string) int64 { return 42 })()
	b := setup(t)
	a, bb := item("c", "A", now()), item("c", "B", now())
	out := b.project(t, a, bb)
	wantDup(t, "A", out[0], false, uuid.Nil)
	wantDup(t, "B", out[1], false, uuid.Nil)
	out = b.project(t, item("c", "C", now()), item("c", "B", now()), item("c", "A", now()), item("c", "", now()))
	wantDup(t, "C (collides with A and B)", out[0], false, uuid.Nil)
	wantDup(t, "B again", out[1], true, bb.Message.ID)
	wantDup(t, "A again", out[2], true, a.Message.ID)
	wantDup(t, "minted", out[3], false, uuid.Nil)
	if out[0].Offset != 2 || out[3].Offset != 3 {
		t.Fatalf("offsets %d %d, want 2 3", out[0].Offset, out[3].Offset)
	}
}

// TestDedupMintedIDRepeatedAsTransactionID: a push without transactionId
// is keyed by its minted id; a later push that names that id as its
// transactionId is its duplicate (in another partition it is not), and a
// UUIDv7 that was never minted here is new.
func TestDedupMintedIDRepeatedAsTransactionID(t *testing.T) {
	b := setup(t)
	first := item("m", "", now())
	out := b.project(t, first, item("m", "", now()))
	wantDup(t, "minted", out[0], false, uuid.Nil)
	other, _ := uuid.NewV7()
	again := item("m", first.Message.ID.String(), now())
	elsewhere := again
	elsewhere.Partition = "Q"
	out = b.project(t, again, item("m", other.String(), now()), elsewhere)
	wantDup(t, "minted id as transactionId", out[0], true, first.Message.ID)
	wantDup(t, "another UUIDv7", out[1], false, uuid.Nil)
	wantDup(t, "other partition", out[2], false, uuid.Nil)
	// The window is the original's: past it, the key is new again.
	late := item("m", first.Message.ID.String(), first.AcceptedAtMicros+3600e6)
	out = b.project(t, late)
	wantDup(t, "past the window", out[0], false, uuid.Nil)
}

// TestDedupLegacyEntriesKeepTheirWindow: an exact entry written by a
// version before the hash sidecar still deduplicates after the upgrade,
// until the sweep removes it with its window.
func TestDedupLegacyEntriesKeepTheirWindow(t *testing.T) {
	b := setup(t)
	out := b.project(t, item("l", "seed", now())) // creates queue and partition
	ctx := context.Background()
	old := uuid.New()
	if _, err := b.store.Pool().Exec(ctx, `INSERT INTO queen.dedup (partition_id, transaction_id, msg_offset, message_id, accepted_at)
		SELECT p.id, 'old-key', 0, $1, now() - interval '10 minutes' FROM queen.partitions p`, old); err != nil {
		t.Fatal(err)
	}
	_ = out
	// A broker started on the upgraded database sees the old entries.
	s2 := b.reopen(t)
	got := b.project(t, item("l", "old-key", now()))
	// The original's segment (offset 0 holds "seed") does not hold old-key's
	// message, but the exact entry counts; its id is named while a segment
	// covers its offset.
	wantDup(t, "legacy key", got[0], true, old)
	if n, err := s2.SweepDedup(ctx, 0, 100); err != nil || n != 0 {
		t.Fatalf("sweep inside the window: %d %v", n, err)
	}
	if _, err := s2.Pool().Exec(ctx, `UPDATE queen.dedup SET accepted_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s2.SweepDedup(ctx, 0, 100); err != nil || n != 1 {
		t.Fatalf("sweep past the window: %d %v", n, err)
	}
	got = b.project(t, item("l", "old-key", now()))
	wantDup(t, "legacy key after its sweep", got[0], false, uuid.Nil)
}

// TestDedupBatchRow: a batch makes one sidecar row: its partitions with
// their segments' base offsets, a hash per client key, one minted key per
// tick of its minted ids (whichever partitions hold them), and its newest
// acceptance time
// (TestDedupBatchRowExpiry checks the window the insert adds).
func TestDedupBatchRow(t *testing.T) {
	p1, p2 := uuid.New(), uuid.New()
	mint := func(ms int64) pg.Message {
		id, _ := uuid.NewV7()
		id[0], id[1], id[2], id[3], id[4], id[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
		return pg.Message{ID: id, TransactionID: id.String(), CreatedAtMicros: ms * 1000}
	}
	base := int64(1_700_000_000_000) // ms, a whole tick
	tick := int64(pg.MintedTickMillis)
	client := pg.Message{ID: uuid.New(), TransactionID: "client", CreatedAtMicros: base*1000 + 5e6}
	pids, bases, hashes, newest := pg.BatchRowOf(
		pg.BatchPart{PID: p1, Base: 10, Msgs: []pg.Message{mint(base), client, mint(base + tick - 1), mint(base + tick)}},
		pg.BatchPart{PID: p2, Base: 0, Msgs: []pg.Message{mint(base)}},
	)
	if len(pids) != 2 || pids[0] != p1 || pids[1] != p2 || bases[0] != 10 || bases[1] != 0 {
		t.Fatalf("partitions %v at %v", pids, bases)
	}
	first := base / tick
	want := []int64{pg.MintedKey(first), pg.KeyHash(p1, "client"), pg.MintedKey(first + 1)}
	if len(hashes) != len(want) {
		t.Fatalf("hashes %v, want %v", hashes, want)
	}
	for i := range want {
		if hashes[i] != want[i] {
			t.Fatalf("hashes %v, want %v", hashes, want)
		}
	}
	// The client message, 5 s after the minted ones, is the newest.
	if got := time.UnixMilli(base).Add(5 * time.Second); !newest.Equal(got) {
		t.Fatalf("newest %v, want %v", newest, got)
	}
}

// TestDedupHashCollisionAcrossPartitionsIsExact: a key hash that is stored
// for another partition only (the hash mixes the partition id, so a hit
// there is a collision) names no candidate; minted keys colliding with a
// client key's hash are confirmed byte for byte as well.
func TestDedupHashCollisionAcrossPartitionsIsExact(t *testing.T) {
	defer pg.SetKeyHash(func(uuid.UUID, string) int64 { return 7 })()
	defer pg.SetMintedKey(func(int64) int64 { return 7 })()
	b := setup(t)
	a := item("x", "A", now())
	other := item("x", "A", now())
	other.Partition = "Q"
	minted := item("x", "", now())
	out := b.project(t, a, minted)
	wantDup(t, "A", out[0], false, uuid.Nil)
	out = b.project(t, other, item("x", "B", now()), item("x", "A", now()))
	wantDup(t, "A in another partition", out[0], false, uuid.Nil)
	wantDup(t, "B (collides with A and the minted id)", out[1], false, uuid.Nil)
	wantDup(t, "A again", out[2], true, a.Message.ID)
	// The minted id's text as a client transactionId: its minted key and
	// every client key collide; only the minted message matches.
	out = b.project(t, item("x", minted.Message.ID.String(), now()))
	wantDup(t, "minted id as transactionId", out[0], true, minted.Message.ID)
}

// TestDedupMintedKeyOfOlderRows: a row written by a version that kept
// one minted key per partition and tick (mintedPartKey) still
// deduplicates a client transactionId that is the text of one of its
// minted ids.
func TestDedupMintedKeyOfOlderRows(t *testing.T) {
	b := setup(t)
	minted := b.olderMintedRow(t, "om")
	out := b.project(t, item("om", minted.Message.ID.String(), now()))
	wantDup(t, "minted id as transactionId against an older row", out[0], true, minted.Message.ID)
}

// olderMintedRow projects a push without transactionId to queue q (the
// only sidecar row of b's database) and rewrites its row as a version
// that kept one minted key per partition and tick (mintedPartKey) wrote
// it (no layout: such versions wrote none); it returns the item.
func (b *bundle) olderMintedRow(t *testing.T, q string) pg.ProjectItem {
	t.Helper()
	ctx := context.Background()
	minted := item(q, "", now())
	b.project(t, minted)
	var pid uuid.UUID
	if err := b.store.Pool().QueryRow(ctx, `SELECT partition_ids[1] FROM queen.dedup_batches`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tick := pg.MintedMillis(minted.Message.ID) / pg.MintedTickMillis
	if _, err := b.store.Pool().Exec(ctx, `UPDATE queen.dedup_batches SET key_hashes = ARRAY[$1::bigint], layout = NULL`, pg.MintedPartKey(pid, tick)); err != nil {
		t.Fatal(err)
	}
	return minted
}

// TestDedupSweepExpiresBatchRows: a row goes once its latest window end
// plus grace has passed, and its keys stop deduplicating; rows inside
// their window stay.
func TestDedupSweepExpiresBatchRows(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	old := item("sw", "K", now())
	b.project(t, old)
	if n, err := b.store.SweepDedup(ctx, 0, 100); err != nil || n != 0 {
		t.Fatalf("sweep inside the window: %d %v", n, err)
	}
	// As if written 2 hours ago (the default window is 1 hour).
	if _, err := b.store.Pool().Exec(ctx, `UPDATE queen.dedup_batches SET expires_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	l := item("sw", "L", now())
	b.project(t, l)
	if n, err := b.store.SweepDedup(ctx, 0, 100); err != nil || n != 1 {
		t.Fatalf("sweep past the window: %d %v", n, err)
	}
	out := b.project(t, item("sw", "K", now()), item("sw", "L", now()))
	wantDup(t, "K after its sweep", out[0], false, uuid.Nil)
	wantDup(t, "L inside its window", out[1], true, l.Message.ID)
}

// runLayoutSQL is the sidecar table of the version before
// queen.dedup_batches (one row per partition and batch).
const runLayoutSQL = `CREATE TABLE queen.dedup_runs (
    partition_id uuid NOT NULL,
    base_offset  bigint NOT NULL,
    accepted_at  timestamptz NOT NULL,
    key_hashes   bigint[] NOT NULL,
    minted_lo    uuid,
    minted_hi    uuid,
    minted_ids   uuid[] NOT NULL
);
CREATE INDEX dedup_runs_keys ON queen.dedup_runs USING gin (key_hashes) WITH (fastupdate = off);
CREATE INDEX dedup_runs_minted ON queen.dedup_runs (partition_id, minted_lo);
CREATE INDEX dedup_runs_accepted_at ON queen.dedup_runs (accepted_at);`

// TestDedupUpgradeFromRunLayout: a database written by the version with
// queen.dedup_runs keeps its entries' windows after the upgrade (client
// keys and minted ids alike, also where a forced hash collision names
// another offset), and they expire by their accepted_at.
func TestDedupUpgradeFromRunLayout(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	client, other, minted := item("up", "K", now()), item("up", "J", now()), item("up", "", now())
	out := b.project(t, client, other, minted) // offsets 0, 1, 2
	// Rewrite the sidecar as the older version wrote it: one run row.
	if _, err := b.store.Pool().Exec(ctx, runLayoutSQL+`
		DELETE FROM queen.dedup_batches;`); err != nil {
		t.Fatal(err)
	}
	pid := pgUUIDOf(t, b, "up")
	if _, err := b.store.Pool().Exec(ctx, `INSERT INTO queen.dedup_runs VALUES ($1, 0, now() - interval '10 minutes',
		ARRAY[$2::bigint, $3::bigint, 0], $4, $4, ARRAY[$4::uuid])`,
		pid, pg.KeyHash(pid, "K"), pg.KeyHash(pid, "J"), minted.Message.ID); err != nil {
		t.Fatal(err)
	}
	_ = out
	s2 := b.reopen(t)
	got := b.project(t, item("up", "K", now()), item("up", minted.Message.ID.String(), now()), item("up", "new", now()))
	wantDup(t, "client key of the run layout", got[0], true, client.Message.ID)
	wantDup(t, "minted id of the run layout", got[1], true, minted.Message.ID)
	wantDup(t, "a new key", got[2], false, uuid.Nil)
	// A collision in the old rows: every key hashes to J's hash, so the
	// old row names offset 1 for a key whose original is offset 0.
	jh := pg.KeyHash(pid, "J")
	restore := pg.SetKeyHash(func(uuid.UUID, string) int64 { return jh })
	got = b.project(t, item("up", "K", now()), item("up", "J", now()), item("up", "fresh", now()))
	restore()
	wantDup(t, "K with every hash colliding", got[0], true, client.Message.ID)
	wantDup(t, "J with every hash colliding", got[1], true, other.Message.ID)
	wantDup(t, "a new key, colliding", got[2], false, uuid.Nil)
	if n, err := s2.SweepDedup(ctx, 0, 100); err != nil || n != 0 {
		t.Fatalf("sweep inside the window: %d %v", n, err)
	}
	if _, err := s2.Pool().Exec(ctx, `UPDATE queen.dedup_runs SET accepted_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s2.SweepDedup(ctx, 0, 100); err != nil || n != 1 {
		t.Fatalf("sweep past the window: %d %v", n, err)
	}
	// The old row is gone; the keys stored again after the upgrade (none:
	// all were duplicates) are not, so K is new now.
	got = b.project(t, item("up", "K", now()))
	wantDup(t, "K after its run row's sweep", got[0], false, uuid.Nil)
}

// pgUUIDOf is the id of queue q's partition P.
func pgUUIDOf(t *testing.T, b *bundle, q string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := b.store.Pool().QueryRow(context.Background(), `SELECT p.id FROM queen.partitions p
		JOIN queen.queues qu ON qu.id = p.queue_id WHERE qu.name = $1 AND p.name = 'P'`, q).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
