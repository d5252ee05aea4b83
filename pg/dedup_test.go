package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

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
	s2, err := pg.Open(pg.Config{URL: b.store.Pool().Config().ConnString()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	b.store = s2
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

// TestDedupRunsSplitByMintedSpan: a batch's messages of one partition make
// one sidecar row unless their minted ids span more than MintedSpan; rows
// cover consecutive offsets, client keys hash, minted ids are listed.
func TestDedupRunsSplitByMintedSpan(t *testing.T) {
	pid := uuid.New()
	mint := func(ms int64) pg.Message {
		id, _ := uuid.NewV7()
		id[0], id[1], id[2], id[3], id[4], id[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
		return pg.Message{ID: id, TransactionID: id.String()}
	}
	base := int64(1_700_000_000_000)
	span := pg.MintedSpan.Milliseconds()
	msgs := []pg.Message{mint(base), {ID: uuid.New(), TransactionID: "client"}, mint(base + span), mint(base + span + 1), mint(base)}
	bases, hashes, minted := pg.RunsOf(pid, 10, msgs)
	if len(bases) != 3 || bases[0] != 10 || bases[1] != 13 || bases[2] != 14 {
		t.Fatalf("rows at %v, want [10 13 14]", bases)
	}
	if len(hashes[0]) != 3 || hashes[0][0] != 0 || hashes[0][1] == 0 || hashes[0][2] != 0 || len(minted[0]) != 2 {
		t.Fatalf("first row: hashes %v minted %v", hashes[0], minted[0])
	}
	if len(minted[1]) != 1 || minted[1][0] != msgs[3].ID || len(minted[2]) != 1 || minted[2][0] != msgs[4].ID {
		t.Fatalf("split rows: %v %v", minted[1], minted[2])
	}
}
